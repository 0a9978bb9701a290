"""``DELETE /api/session/{sid}`` against a real server on 127.0.0.1: a settled session goes with
everything it owns and its sub-agents, a busy one is refused and left as it was."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import pytest
import trio

from coordinator import errors
from tests.coordinator.server.retained import (
    TEXT,
    Served,
    rows_naming,
    run_shell_turn,
    run_turn,
    served,
    sse_frames,
    wait_event,
)


async def _stored_types(served: Served, path: str = "/api/event?follow=false") -> list[tuple[str, str]]:
    return [(frame["id"], frame["event"]) for frame in await sse_frames(served, path)]


async def test_deleting_a_busy_session_answers_409_and_changes_nothing(tmp_path: Path) -> None:
    """A session whose turn runs (here: waits on a permission) or is queued keeps everything it owns."""
    async with served(tmp_path) as api:
        session = await api.client.create_session(title="busy")
        await api.client.prompt(session.id, "run it")
        asked = await wait_event(api, session.id, "permission.asked")
        queued = await api.client.prompt(session.id, "and then this")
        before = (
            await api.client.get_session(session.id),
            await api.client.history(session.id),
            await api.client.pending_permissions(session.id),
            await _stored_types(api),
            rows_naming(api.db, session.id),
        )
        with pytest.raises(errors.SessionBusy) as refused:
            await api.client.delete_session(session.id)
        assert refused.value.session_id == session.id
        assert refused.value.turns == ["running", "queued"]
        after = (
            await api.client.get_session(session.id),
            await api.client.history(session.id),
            await api.client.pending_permissions(session.id),
            await _stored_types(api),
            rows_naming(api.db, session.id),
        )
        assert after == before
        # The turn is unharmed: the reply lets it finish, then the queued one runs, then it can go.
        await api.client.reply_permission(session.id, asked["request"]["id"], "once")
        await wait_event(api, session.id, "session.idle", queued)
        await api.client.delete_session(session.id)


async def test_a_suspended_session_parked_at_start_answers_409_until_it_settles(tmp_path: Path) -> None:
    """A turn a shutdown suspended is not settled: its session stays until the turn is resumed or
    interrupted, whatever the resume policy left it as."""
    async with served(tmp_path) as api:
        session = await api.client.create_session(title="suspended")
        await api.client.prompt(session.id, "run it")
        await wait_event(api, session.id, "permission.asked")
    async with served(tmp_path, resume="manual") as api:
        assert (await api.client.get_session(session.id)).status == "suspended"
        with pytest.raises(errors.SessionBusy) as refused:
            await api.client.delete_session(session.id)
        assert refused.value.turns == ["suspended"]
        assert await api.client.interrupt(session.id)
        await wait_event(api, session.id, "session.idle")
        await api.client.delete_session(session.id)
        assert set(rows_naming(api.db, session.id).values()) == {0}


async def test_deleting_a_settled_session_removes_it_from_every_route_and_replay(tmp_path: Path) -> None:
    """After the delete nothing of the session is left: not in a list, a read, a wait, a replay or a row."""
    async with served(tmp_path) as api:
        gone = await api.client.create_session(title="gone")
        await run_shell_turn(api, gone.id, "always")  # a session rule too
        kept = await api.client.create_session(title="kept")
        await run_shell_turn(api, kept.id)
        gone_frames = await _gone_frames(api, gone.id)
        assert len(gone_frames) == 12
        kept_events = [frame for frame in await _stored_types(api) if frame not in gone_frames]
        last_seq = api.coordinator.store.read.last_seq()

        await api.client.delete_session(gone.id)

        assert [s.id for s in await api.client.list_sessions()] == [kept.id]
        for read in (
            api.client.get_session,
            api.client.history,
            api.client.pending_permissions,
            api.client.pending_forms,
            api.client.delete_session,
        ):
            with pytest.raises(errors.SessionNotFound):
                await read(gone.id)
        with pytest.raises(errors.SessionNotFound):
            await api.client.prompt(gone.id, "again")
        assert await _stored_types(api) == kept_events
        replayed = [event async for event in api.client.events(follow=False)]
        assert replayed and {event["session_id"] for event in replayed} == {kept.id}
        async with api.client._client().stream("GET", f"/api/session/{gone.id}/event") as response:
            assert response.status_code == 404
        assert set(rows_naming(api.db, gone.id).values()) == {0}
        assert await api.client.pending_permissions() == []
        # The deleted session's seqs are never given again, not even its last one.
        fresh = await api.client.create_session(title="fresh")
        created = await wait_event(api, fresh.id, "session.created")
        assert created["seq"] == last_seq + 1


async def _gone_frames(api: Served, session_id: str) -> list[tuple[str, str]]:
    return await _stored_types(api, f"/api/session/{session_id}/event?follow=false")


async def _outcome(call: Callable[[], Awaitable[object]], results: dict[str, object], name: str) -> None:
    try:
        await call()
        results[name] = None
    except errors.ClientError as exc:
        results[name] = exc


async def test_a_delete_racing_a_prompt_either_wins_whole_or_loses_whole(tmp_path: Path) -> None:
    """A prompt arriving as the session is deleted never leaves a turn of a missing session behind."""
    async with served(tmp_path, script=TEXT) as api:
        for round in range(10):
            session = await api.client.create_session(title="raced")
            results: dict[str, object] = {}
            calls = [
                (partial(api.client.delete_session, session.id), "delete"),
                (partial(api.client.prompt, session.id, "hi"), "prompt"),
            ]
            async with trio.open_nursery() as nursery:
                for call, name in calls[:: 1 if round % 2 else -1]:  # each is sent first in turn
                    nursery.start_soon(_outcome, call, results, name)
            kinds = (type(results["delete"]).__name__, type(results["prompt"]).__name__)
            assert kinds in {("NoneType", "SessionNotFound"), ("SessionBusy", "NoneType")}, kinds
            if results["delete"] is None:
                assert set(rows_naming(api.db, session.id).values()) == {0}
            else:  # the prompt won: its turn runs to its end, and then the session can go
                await wait_event(api, session.id, "session.idle")
                await api.client.delete_session(session.id)


async def test_the_database_stops_growing_under_create_prompt_delete_cycles(tmp_path: Path) -> None:
    """A daemon that creates, uses and deletes sessions for months must not grow its file for ever:
    the pages a delete frees are reused by the next sessions."""
    async with served(tmp_path, script=TEXT) as api:
        sizes = []
        for _ in range(6):
            sessions = [await api.client.create_session(title="cycle") for _ in range(40)]
            for session in sessions:
                await run_turn(api, session.id)
            for session in sessions:
                await api.client.delete_session(session.id)
            sizes.append(api.coordinator.store.read.page_counts()[1])
        # A round writes about 20 pages of rows (280 events among them): a store that never reused
        # space would grow by that much every round; this one holds still after the first.
        assert max(sizes[1:]) <= sizes[0] + 2, sizes
