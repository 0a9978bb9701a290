"""The step's streamed text as deltas: coalesced on trio's clock, ordered around the step's events."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import trio
import trio.testing

from coordinator.actors.step_text import COALESCE_SECONDS
from coordinator.events import Event
from tests.conftest import ASK_SHELL, make_config
from tests.scenarios.test_streaming_stops import counting, streaming


async def run_turn(tmp_path: Path, *items: dict[str, Any]) -> tuple[list[tuple[float, Event]], str]:
    """One turn answered by ``items``; every event a delta subscriber saw, with when it saw it."""
    seen: list[tuple[float, Event]] = []
    async with streaming(make_config(tmp_path, rules=ASK_SHELL), counting(*items)) as (coord, recorder):
        session = await coord.create_session()
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for event in coord.subscribe(after=0, session_id=session.id, deltas=True):
                    seen.append((trio.current_time(), event))

            nursery.start_soon(watch)
            await coord.prompt(session.id, "go")
            await recorder.wait_for("session.idle")
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    return seen, session.id


async def test_a_fast_stream_is_coalesced_to_one_delta_every_20_ms(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """200 chunks in one second become at most one delta every 20 ms, with every character in order."""
    chunks = [f"w{i} " for i in range(200)]
    seen, _ = await run_turn(tmp_path, {"chunks": chunks, "chunk_delay": 0.005})
    deltas = [(at, e) for at, e in seen if e.type == "session.text.delta"]
    times = [at for at, _ in deltas]
    assert all(b - a >= COALESCE_SECONDS - 1e-9 for a, b in itertools.pairwise(times))
    assert 20 <= len(deltas) <= 1 + 1.0 / COALESCE_SECONDS + 1
    text, offset = "", 0
    for _, event in deltas:
        assert event.payload["offset"] == offset
        offset += len(event.payload["delta"])
        text += event.payload["delta"]
    assert text == "".join(chunks)
    types = [e.type for _, e in seen]
    first, last = types.index("session.text.delta"), len(types) - 1 - types[::-1].index("session.text.delta")
    assert types[first - 1] == "session.step.started"
    assert types[last + 1] == "session.step.succeeded"
    succeeded = next(e for _, e in seen if e.type == "session.step.succeeded")
    assert succeeded.payload["message"] == {"text": text, "tool_calls": []}
    assert succeeded.payload["usage"] == {"input_tokens": 0, "output_tokens": len(text) // 4}


async def test_offsets_count_characters_and_never_split_one(tmp_path: Path, autojump_clock: Any) -> None:
    """Offsets are character indices, so text with accents and emoji joins back exactly."""
    chunks = ["Ça ", "va 🙂", " très", " bien ☕"]
    seen, _ = await run_turn(tmp_path, {"chunks": chunks, "chunk_delay": 0.05})
    deltas = [e.payload for _, e in seen if e.type == "session.text.delta"]
    assert [d["delta"] for d in deltas] == chunks
    assert [d["offset"] for d in deltas] == [0, 3, 7, 12]


async def test_a_step_with_tool_calls_reports_its_message(tmp_path: Path, autojump_clock: Any) -> None:
    """step.succeeded names the calls by the coordinator's call ids, next to the text."""
    item = {"text": "Let me check.", "tool_calls": [{"id": "c1", "name": "slowless", "input": {}}]}
    seen, _ = await run_turn(tmp_path, item, {"text": "done"})
    succeeded = next(e.payload for _, e in seen if e.type == "session.step.succeeded")
    assert len([e for _, e in seen if e.type == "session.step.succeeded"]) == 2
    assert succeeded["message"] == {
        "text": "Let me check.",
        "tool_calls": [{"call_id": "c1", "name": "slowless", "input": {}}],
    }
    assert succeeded["usage"] == {"input_tokens": 0, "output_tokens": 3}
