"""Deltas over real SSE: opt-in, no ``id:`` line, in order, and the catch-up of a late subscriber."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from tests.coordinator.server.harness import WAIT_SECONDS, Api, running_api, server_config
from tests.model_server import Text, serve_model

STORY = "Once upon a time, a coordinator streamed its model's text to every client."


@attrs.define
class Frames:
    """The raw frames of one SSE stream: each a list of its lines, comments left out."""

    frames: list[list[str]] = attrs.Factory(list)
    _changed: trio.Event = attrs.Factory(trio.Event)

    def events(self) -> list[tuple[dict[str, str], dict[str, Any]]]:
        out = []
        for frame in self.frames:
            fields = dict(line.split(": ", 1) for line in frame)
            out.append((fields, json.loads(fields["data"])))
        return out

    def types(self) -> list[str]:
        return [data["type"] for _, data in self.events()]

    async def wait_for(self, type: str) -> None:
        with trio.fail_after(WAIT_SECONDS):
            while type not in self.types():
                await self._changed.wait()

    async def follow(self, url: str, path: str, headers: dict[str, str] | None = None, **params: str) -> None:
        async with (
            httpx.AsyncClient(base_url=url, timeout=None) as http,
            http.stream("GET", path, params=params, headers=headers or {}) as response,
        ):
            frame: list[str] = []
            lines = response.aiter_lines()
            async with contextlib.aclosing(lines):  # type: ignore[type-var]
                async for line in lines:
                    if line:
                        if not line.startswith(":"):
                            frame.append(line)
                        continue
                    if frame:
                        self.frames.append(frame)
                        frame = []
                        self._changed.set()
                        self._changed = trio.Event()


@contextlib.asynccontextmanager
async def story_api(tmp_path: Path, chunk_delay: float) -> AsyncIterator[Api]:
    """A server whose OpenAI-compatible model streams ``STORY`` four characters a chunk."""
    async with (
        serve_model([Text(text=STORY, chunk_delay=chunk_delay)]) as mock,
        running_api(server_config(tmp_path, mock), mock) as api,
    ):
        yield api


def deltas_of(frames: Frames) -> list[dict[str, Any]]:
    return [data for _, data in frames.events() if data["type"] == "session.text.delta"]


async def test_deltas_stream_over_sse_without_an_id_line(tmp_path: Path) -> None:
    """Each delta frame is event + data only, so Last-Event-ID never moves for it; offsets join up."""
    async with story_api(tmp_path, chunk_delay=0.01) as api:
        session = await api.client.create_session(title="sse")
        with_deltas, without = Frames(), Frames()
        async with trio.open_nursery() as nursery:
            path = f"/api/session/{session.id}/event"
            nursery.start_soon(lambda: with_deltas.follow(api.listening.url, path, deltas="true"))
            nursery.start_soon(lambda: without.follow(api.listening.url, path))
            await with_deltas.wait_for("session.created")
            await without.wait_for("session.created")
            await api.client.prompt(session.id, "a story")
            await with_deltas.wait_for("session.idle")
            await without.wait_for("session.idle")
            nursery.cancel_scope.cancel()
    for fields, data in with_deltas.events():
        if data["type"] == "session.text.delta":
            assert list(fields) == ["event", "data"]
            assert fields["event"] == "session.text.delta" and data["seq"] is None
            assert set(data) == {"seq", "type", "session_id", "at", "turn_id", "step_id", "offset", "delta"}
        else:
            assert list(fields) == ["id", "event", "data"] and fields["id"] == str(data["seq"])
    deltas = deltas_of(with_deltas)
    assert len(deltas) > 1
    assert [d["offset"] for d in deltas] == [
        sum(len(x["delta"]) for x in deltas[:i]) for i in range(len(deltas))
    ]
    assert "".join(d["delta"] for d in deltas) == STORY
    # Coalesced: 19 chunks 10 ms apart, at most one delta every 20 ms (``at`` has milliseconds).
    times = [datetime.fromisoformat(d["at"].replace("Z", "+00:00")).timestamp() for d in deltas]
    assert all(later - earlier >= 0.018 for earlier, later in itertools.pairwise(times))
    assert len(deltas) < len(STORY) // 4
    types = with_deltas.types()
    stored = [t for t in types if t != "session.text.delta"]
    assert stored == without.types()  # without the flag: exactly the stored events, nothing else
    assert without.frames == [f for f in with_deltas.frames if not f[0].startswith("event: session.text")]
    first, last = types.index("session.text.delta"), len(types) - 1 - types[::-1].index("session.text.delta")
    assert types[first - 1] == "session.step.started" and types[last + 1] == "session.step.succeeded"
    succeeded = next(d for _, d in with_deltas.events() if d["type"] == "session.step.succeeded")
    assert succeeded["message"] == {"text": STORY, "tool_calls": []}
    assert set(succeeded["usage"]) == {"input_tokens", "output_tokens"}
    request = api.mock.requests[0]
    assert request["stream_options"] == {"include_usage": True}


async def test_a_subscriber_that_reconnects_mid_step_catches_up_first(tmp_path: Path) -> None:
    """Reconnecting with Last-Event-ID while the model streams: the replay, then one delta at offset 0
    with all the text so far, then live deltas that continue it."""
    async with story_api(tmp_path, chunk_delay=0.05) as api:
        session = await api.client.create_session(title="late")
        early = Frames()
        path = f"/api/session/{session.id}/event"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: early.follow(api.listening.url, path, deltas="true"))
            await early.wait_for("session.created")
            await api.client.prompt(session.id, "a story")
            with trio.fail_after(WAIT_SECONDS):
                while len(deltas_of(early)) < 3:
                    await early.wait_for("session.text.delta")
                    await trio.sleep(0.01)
            started = next(d for _, d in early.events() if d["type"] == "session.step.started")
            late = Frames()
            headers = {"Last-Event-ID": str(started["seq"])}
            nursery.start_soon(lambda: late.follow(api.listening.url, path, headers, deltas="true"))
            await late.wait_for("session.idle")
            nursery.cancel_scope.cancel()
    late_deltas = deltas_of(late)
    assert late.types()[0] == "session.text.delta"  # nothing to replay after step.started but the text
    catch_up = late_deltas[0]
    assert catch_up["offset"] == 0 and len(catch_up["delta"]) >= 12
    assert STORY.startswith(catch_up["delta"])
    text = catch_up["delta"]
    for delta in late_deltas[1:]:
        assert delta["offset"] == len(text)
        text += delta["delta"]
    assert text == STORY
    assert late.types()[-3:] == ["session.step.succeeded", "session.execution.succeeded", "session.idle"]
