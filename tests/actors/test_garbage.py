"""A finished turn leaves none of its actors' objects to the cycle collector.

Objects in a reference cycle outlive their turn until a collection finds them, and the oldest
generation's collections, which garbage in cycles brings on, stall the trio thread for 10-60 ms
(design/benchmarks.md). A call's tool context and its services once referred to each other, which
kept every call's handles, scopes and rows alive after it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import trio

from coordinator.records import Rule
from tests.conftest import make_config, running

ALLOW = (Rule(action="*", resource="*", effect="allow"),)
TURN = [
    {"tool_calls": [{"id": "c1", "name": "shell", "input": {"command": "echo hi"}}]},
    {"text": "done"},
]
OURS = ("coordinator.", "actors.")


@contextmanager
def _garbage() -> Iterator[list[object]]:
    """What the collector finds unreachable meanwhile, kept instead of freed."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    found: list[object] = []
    try:
        yield found
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


async def test_a_finished_turn_with_a_tool_call_leaves_no_cycle_of_the_actors_objects(tmp_path: Path) -> None:
    async with running(make_config(tmp_path, rules=ALLOW), TURN * 4) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "warm up")
        await recorder.wait_for("session.idle", 1)
        with _garbage() as garbage:
            for turn in range(3):
                await coord.prompt(session.id, f"turn {turn}")
                with trio.fail_after(10):
                    await recorder.wait_for("session.idle", 2 + turn)
        assert [e.payload["outcome"] for e in recorder.of("session.idle")] == ["succeeded"] * 4
    ours = sorted({type(o).__qualname__ for o in garbage if type(o).__module__.startswith(OURS)})
    assert ours == []
