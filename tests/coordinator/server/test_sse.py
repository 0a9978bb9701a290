"""The event streams over HTTP: replay then live, resuming, one session, keep-alive and shutdown."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from coordinator import errors, open_coordinator
from coordinator.client import CoordinatorClient
from coordinator.server import sse
from coordinator.server.app import build_app
from tests.coordinator.server.harness import (
    SHELL_CALL,
    WAIT_SECONDS,
    Api,
    EventLog,
    hypercorn_app,
    server_config,
    serving,
)
from tests.model_server import serve_model


async def _stored(client: CoordinatorClient, **kwargs: Any) -> list[dict[str, Any]]:
    return [event async for event in client.events(follow=False, **kwargs)]


async def test_a_stream_replays_then_streams_live_with_no_gap_and_no_duplicate(shell_api: Api) -> None:
    """A subscriber that joins late must see history and then new events, each exactly once, in order."""
    api = shell_api
    for title in ("a", "b", "c"):
        await api.client.create_session(title=title)
    late = EventLog()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(late.follow, api.client)
        await late.wait_until_count(3)
        for title in ("d", "e", "f"):
            await api.client.create_session(title=title)
        await late.wait_until_count(6)
        nursery.cancel_scope.cancel()
    stored = await _stored(api.client)
    assert late.events == stored == api.log.events[:6]
    seqs = [event["seq"] for event in stored]
    assert seqs == sorted(set(seqs)) and len(seqs) == 6
    assert [e["session"]["title"] for e in stored] == ["a", "b", "c", "d", "e", "f"]


async def test_each_event_is_id_event_and_data_lines(shell_api: Api) -> None:
    """The wire format is what EventSource clients parse: id, event, data (the event's JSON), blank line."""
    session = await shell_api.client.create_session(title="wire")
    async with httpx.AsyncClient(base_url=shell_api.listening.url) as http:
        response = await http.get("/api/event", params={"follow": "false"})
    assert response.headers["content-type"].startswith("text/event-stream")
    block, rest = response.text.split("\n\n", 1)
    assert rest == ""
    lines = block.split("\n")
    assert [line.split(": ", 1)[0] for line in lines] == ["id", "event", "data"]
    data = json.loads(lines[2].removeprefix("data: "))
    assert lines[0] == f"id: {data['seq']}" and lines[1] == "event: session.created"
    assert data["session_id"] == session.id and data["session"]["title"] == "wire"
    assert set(data) == {"seq", "type", "session_id", "at", "session"}


async def test_last_event_id_resumes_after_it_and_the_larger_of_it_and_after_wins(shell_api: Api) -> None:
    """A reconnecting EventSource sends Last-Event-ID; it must neither replay nor skip events."""
    for title in ("a", "b", "c", "d"):
        await shell_api.client.create_session(title=title)
    stored = await _stored(shell_api.client)
    seqs = [event["seq"] for event in stored]

    async def first_seq(after: int, last_event_id: int | None) -> int:
        headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
        async with httpx.AsyncClient(base_url=shell_api.listening.url) as http:
            response = await http.get(
                "/api/event", params={"after": after, "follow": "false"}, headers=headers
            )
        return int(response.text.split("\n", 1)[0].removeprefix("id: "))

    assert await first_seq(0, seqs[1]) == seqs[2]
    assert await first_seq(seqs[0], seqs[2]) == seqs[3]
    assert await first_seq(seqs[2], seqs[0]) == seqs[3]
    assert await first_seq(seqs[1], None) == seqs[2]
    assert await first_seq(seqs[1], 10**30) == seqs[2]  # an id no store could have issued is ignored


async def test_a_session_stream_carries_only_that_session(shell_api: Api) -> None:
    """A session's stream must not leak other sessions' events; an unknown session is a 404."""
    api = shell_api
    mine = await api.client.create_session(title="mine")
    await api.client.create_session(title="other")
    await api.client.prompt(mine.id, "say hi")
    await api.log.wait_for("permission.asked", mine.id)
    followed = EventLog()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(followed.follow, api.client, session_id=mine.id))
        await api.client.interrupt(mine.id)
        await followed.wait_for("session.idle")
        nursery.cancel_scope.cancel()
    assert {event["session_id"] for event in followed.events} == {mine.id}
    assert followed.events == [e for e in api.log.events if e["session_id"] == mine.id]
    assert await _stored(api.client, session_id=mine.id) == followed.events
    with pytest.raises(errors.SessionNotFound):
        await _stored(api.client, session_id="ses_unknown")


async def test_an_idle_stream_gets_keep_alive_comments(tmp_path: Path) -> None:
    """Proxies drop silent connections; a comment line every keep-alive interval keeps them open."""
    config = server_config(tmp_path)
    async with open_coordinator(config, synchronous="normal") as coordinator:
        app = build_app(coordinator, config, keepalive=0.05)
        async with hypercorn_app(app) as url, httpx.AsyncClient(base_url=url) as http:
            seen: list[str] = []
            async with http.stream("GET", "/api/event") as response:
                # Stopped by cancellation, which unwinds httpx's nested line iterators cleanly.
                with trio.fail_after(WAIT_SECONDS), trio.CancelScope() as reading:
                    async for line in response.aiter_lines():
                        seen.append(line)
                        if seen == [": keep-alive"]:
                            await coordinator.create_session(title="after a pause")
                        if line.startswith("data: "):
                            reading.cancel()
    assert seen[0] == ": keep-alive"
    data = next(i for i, line in enumerate(seen) if line.startswith("data: "))
    assert seen[data - 1] == "event: session.created"
    assert json.loads(seen[data].removeprefix("data: "))["session"]["title"] == "after a pause"


async def test_shutdown_sends_the_suspension_then_ends_open_streams_and_a_restart_resumes(
    tmp_path: Path,
) -> None:
    """A graceful stop must not hang on open streams, and their clients must see the turn suspended."""
    async with serve_model([SHELL_CALL]) as mock:
        config = server_config(tmp_path, mock)
        streamed = EventLog()
        async with trio.open_nursery() as nursery:
            async with serving(config) as listening, CoordinatorClient(listening.url) as client:
                nursery.start_soon(streamed.follow_once, listening.url)
                session = await client.create_session(title="long")
                await client.prompt(session.id, "say hi")
                asked = await streamed.wait_for("permission.asked")
            await streamed.wait_ended()
        assert streamed.types()[-1] == "session.execution.suspended"
        assert streamed.events[-1]["reason"] == {"type": "shutdown"}
        assert "session.idle" not in streamed.types()
        request_id = asked["request"]["id"]
        async with serving(config) as listening, CoordinatorClient(listening.url) as client:
            resumed = EventLog()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(resumed.follow, client)
                restored = await resumed.wait_for("permission.asked", count=2)
                nursery.cancel_scope.cancel()
            assert resumed.events[: len(streamed.events)] == streamed.events
            assert "session.execution.resumed" in resumed.types()[len(streamed.events) :]
            assert restored["restored"] is True and restored["request"]["id"] == request_id
            assert [r.id for r in await client.pending_permissions(session.id)] == [request_id]
        assert len(mock.requests) == 1


async def test_a_followed_stream_reconnects_across_a_restart_with_last_event_id(tmp_path: Path) -> None:
    """``events(follow=True)`` must survive a server restart without losing or repeating an event."""
    config = server_config(tmp_path)
    followed = EventLog()
    async with trio.open_nursery() as nursery:
        async with serving(config) as listening:
            url = listening.url
            async with CoordinatorClient(url) as client:
                await client.create_session(title="before")
                nursery.start_soon(_follow_with_new_client, url, followed)
                await followed.wait_until_count(1)
        config = attrs.evolve(config, server=attrs.evolve(config.server, port=listening.port))
        async with serving(config) as listening, CoordinatorClient(listening.url) as client:
            await client.create_session(title="after")
            await followed.wait_until_count(2)
            stored = await _stored(client)
        nursery.cancel_scope.cancel()
    assert followed.events == stored
    assert [e["session"]["title"] for e in followed.events] == ["before", "after"]


async def _follow_with_new_client(url: str, log: EventLog) -> None:
    async with CoordinatorClient(url) as client:
        await log.follow(client)


async def test_what_queued_up_goes_out_as_one_chunk(tmp_path: Path) -> None:
    """A stream writes every event at hand in one body chunk (not one a event), and each event once."""
    config = server_config(tmp_path)
    bodies: list[bytes] = []
    sent = trio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            bodies.append(message["body"])
            sent.set()

    async def receive() -> dict[str, Any]:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with open_coordinator(config, synchronous="normal") as coordinator:
        for n in range(30):
            await coordinator.create_session(title=f"s{n}")
        stream = sse.EventStream(coordinator=coordinator, after=0, session_id=None, follow=True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream, {}, receive, send)
            with trio.fail_after(WAIT_SECONDS):
                await sent.wait()
            await coordinator.shutdown()  # ends the stream after what was published
    first = bodies[0].decode()
    assert first.count("event: session.created\n") == 30
    assert [line for line in first.splitlines() if line.startswith("id: ")] == [
        f"id: {n}" for n in range(1, 31)
    ]
    assert bodies[-1] == b""  # the end of the response
