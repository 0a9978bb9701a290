"""Retention (``[store] keep_events_days``) against a real server on 127.0.0.1:
what a pass deletes and keeps, and replays from a pruned offset (``stream.truncated``)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import trio

from coordinator.store import open_store
from tests.coordinator.server.harness import WAIT_SECONDS
from tests.coordinator.server.retained import (
    Served,
    age_events,
    run_shell_turn,
    served,
    sse_frames,
    wait_event,
)

SETTLED_TURN = [
    "session.created",
    "session.turn.started",
    "session.step.started",
    "session.tool.started",
    "permission.asked",
    "permission.replied",
    "session.tool.succeeded",
    "session.step.succeeded",
    "session.step.started",
    "session.step.succeeded",
    "session.execution.succeeded",
    "session.idle",
]


async def _two_settled_sessions(api: Served) -> tuple[str, str, int]:
    """Two sessions with a settled turn each; the last seq of the first one's events."""
    first = await api.client.create_session(title="old")
    await run_shell_turn(api, first.id)
    boundary = api.coordinator.store.read.last_seq()
    second = await api.client.create_session(title="new")
    await run_shell_turn(api, second.id)
    return first.id, second.id, boundary


async def test_a_replay_from_a_pruned_offset_starts_with_stream_truncated_then_the_kept_events(
    tmp_path: Path,
) -> None:
    """A client that reconnects from before the horizon must learn that events are gone, and where the
    stream resumes, before it gets the kept events in order."""
    async with served(tmp_path, keep_events_days=1) as api:
        _, second, boundary = await _two_settled_sessions(api)
        age_events(api.db, upto_seq=boundary)
        assert await api.coordinator.prune_events() == boundary
        assert api.coordinator.store.read.event_horizon() == boundary
        kept = [str(seq) for seq in range(boundary + 1, boundary + 1 + len(SETTLED_TURN))]
        truncated = {"event": "stream.truncated", "data": json.dumps({"oldest_seq": boundary + 1})}
        truncated["data"] = truncated["data"].replace(" ", "")

        for path, headers in [
            ("/api/event?follow=false", {}),
            ("/api/event?after=3&follow=false", {}),
            ("/api/event?follow=false", {"Last-Event-ID": "5"}),
            (f"/api/session/{second}/event?follow=false", {}),
        ]:
            frames = await sse_frames(api, path, **headers)
            assert frames[0] == truncated, path  # no id: Last-Event-ID does not move for it
            assert [f["id"] for f in frames[1:]] == kept, path
            assert [f["event"] for f in frames[1:]] == SETTLED_TURN, path

        # From the horizon on nothing was lost: no frame says otherwise.
        frames = await sse_frames(api, f"/api/event?after={boundary}&follow=false")
        assert [f["id"] for f in frames] == kept
        # A followed stream (replay, then live) starts the same way; so does the client's view of it.
        assert await _first_followed_frames(api, count=2) == [truncated["data"], str(boundary + 1)]
        replayed = [event async for event in api.client.events(follow=False)]
        assert replayed[0] == {"type": "stream.truncated", "oldest_seq": boundary + 1}
        assert [e["seq"] for e in replayed[1:]] == [int(seq) for seq in kept]


async def _first_followed_frames(api: Served, count: int) -> list[str]:
    """The first frames of ``GET /api/event`` (followed): a truncation's data, else the frame's id."""
    seen: list[str] = []
    frame: dict[str, str] = {}
    async with (
        httpx.AsyncClient(base_url=api.url, timeout=WAIT_SECONDS) as http,
        http.stream("GET", "/api/event") as response,
    ):
        # Stopped by cancellation, which unwinds httpx's nested line iterators cleanly.
        with trio.fail_after(WAIT_SECONDS), trio.CancelScope() as reading:
            async for line in response.aiter_lines():
                if line:
                    key, _, value = line.partition(": ")
                    frame[key] = value
                    continue
                seen.append(frame.get("id", frame.get("data", "")))
                frame = {}
                if len(seen) == count:
                    reading.cancel()  # lines already read still arrive before the cancel lands
    return seen[:count]


async def test_pruning_never_deletes_the_events_of_an_unsettled_turn(tmp_path: Path) -> None:
    """A turn waiting for a person for longer than the retention window must keep its whole story, or
    its replay (and a restart's restore) would miss how it began."""
    async with served(tmp_path, keep_events_days=1) as api:
        settled, _, _ = await _two_settled_sessions(api)
        waiting = await api.client.create_session(title="waiting")
        turn_id = await api.client.prompt(waiting.id, "run it")
        asked = await wait_event(api, waiting.id, "permission.asked")
        last = api.coordinator.store.read.last_seq()
        age_events(api.db, upto_seq=last)  # everything is old, the waiting turn's events too

        pruned = await api.coordinator.prune_events()

        frames = await sse_frames(api, "/api/event?follow=false")
        # session.created of the waiting session is not its turn's: it goes with the rest.
        assert [f["event"] for f in frames] == [
            "stream.truncated",
            "session.turn.started",
            "session.step.started",
            "session.tool.started",
            "permission.asked",
        ]
        assert pruned == last - 4
        assert json.loads(frames[0]["data"]) == {"oldest_seq": last - 3}
        assert api.coordinator.store.read.event_horizon() == last - 4
        assert [e["session_id"] for e in map(lambda f: json.loads(f["data"]), frames[1:])] == [waiting.id] * 4
        # Once it settles and ages too, its events go like any others.
        await api.client.reply_permission(waiting.id, asked["request"]["id"], "once")
        await wait_event(api, waiting.id, "session.idle", turn_id)
        age_events(api.db, upto_seq=api.coordinator.store.read.last_seq())
        assert await api.coordinator.prune_events() == len(SETTLED_TURN) - 1
        assert [f["event"] for f in await sse_frames(api, "/api/event?follow=false")] == ["stream.truncated"]
        assert (await api.client.get_session(settled)).last_outcome == "succeeded"  # state stays


async def test_young_events_are_kept_and_keep_events_days_0_keeps_everything(tmp_path: Path) -> None:
    """Only events older than the window go; with retention off, a pass deletes nothing at all."""
    async with served(tmp_path, keep_events_days=1) as api:
        await _two_settled_sessions(api)
        assert await api.coordinator.prune_events() == 0
        assert api.coordinator.store.read.event_horizon() == 0
        assert [f["event"] for f in await sse_frames(api, "/api/event?follow=false")] == SETTLED_TURN * 2
    async with served(tmp_path, keep_events_days=0) as api:
        age_events(api.db, upto_seq=api.coordinator.store.read.last_seq())
        assert await api.coordinator.prune_events() == 0
        assert len(await sse_frames(api, "/api/event?follow=false")) == 2 * len(SETTLED_TURN)


async def test_the_horizon_and_the_truncation_survive_a_restart(tmp_path: Path) -> None:
    """The horizon is stored: a server started later still tells a reconnecting client what is gone."""
    async with served(tmp_path, keep_events_days=1) as api:
        _, _, boundary = await _two_settled_sessions(api)
        age_events(api.db, upto_seq=boundary)
        await api.coordinator.prune_events()
    with open_store(str(api.db)) as store:
        assert store.read.event_horizon() == boundary
    async with served(tmp_path, keep_events_days=1) as api:
        frames = await sse_frames(api, "/api/event?after=1&follow=false")
        assert frames[0]["event"] == "stream.truncated" and "id" not in frames[0]
        assert json.loads(frames[0]["data"]) == {"oldest_seq": boundary + 1}
