"""What a session keeps beyond one call, and tools that come and go while the coordinator runs.

A tool keeps a real process for its session (``keep_for_session``): every call of the session's turns
gets the same one, and it is gone once the session is deleted, once the coordinator shut down, or once
the session idled. A provider adds a tool while the coordinator runs: the next model request offers
it and a call runs it; withdrawn, the next request no longer offers it and a call to it fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from coordinator import Coordinator
from coordinator.actors import session_life
from coordinator.models.base import ToolSpec
from coordinator.models.scripted import ScriptedModel
from coordinator.tools.base import Tool, ToolContext, any_resource
from tests.conftest import Recorder, make_config, running
from tests.scenarios.test_stop_matrix import CountingModel

PID_TOOL = ToolSpec(name="kept_pid", description="The pid of the session's kept process.", parameters={})


@contextlib.asynccontextmanager
async def a_kept_process() -> AsyncIterator[trio.Process]:
    """A real process held for a session; killed and reaped when the session's life closes it."""
    process = await trio.lowlevel.open_process(["sleep", "3600"], start_new_session=True)
    try:
        yield process
    finally:
        with trio.move_on_after(5, shield=True):
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()


async def kept_pid(ctx: ToolContext, input: dict[str, Any]) -> int:
    assert ctx.keep_for_session is not None
    process = await ctx.keep_for_session("sleeper", a_kept_process)
    return int(process.pid)


PID = Tool(spec=PID_TOOL, resource=any_resource, run=kept_pid)
CALL = {"tool_calls": [{"id": "c1", "name": "kept_pid", "input": {}}]}
DONE = {"text": "done"}


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: neither gone nor a zombie (killed, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def one_turn(coord: Coordinator, recorder: Recorder, session_id: str, turn: int) -> Any:
    """Prompt, wait for the turn's ``session.idle``, and return what ``kept_pid`` answered in it."""
    await coord.prompt(session_id, "go")
    await recorder.wait_for("session.idle", turn)
    return recorder.of("session.tool.succeeded")[turn - 1].payload["output"]


async def test_a_kept_process_serves_every_turn_of_its_session_and_goes_with_the_session(
    tmp_path: Path,
) -> None:
    """Two turns get the same process; a delete closes it before it returns; another session's is
    its own, and the shutdown closes it."""
    async with running(make_config(tmp_path), [CALL, DONE, CALL, DONE, CALL, DONE]) as (coord, recorder):
        coord._runtime.tools.provide("tests", [PID])
        session = await coord.create_session()
        first = await one_turn(coord, recorder, session.id, 1)
        assert await one_turn(coord, recorder, session.id, 2) == first and alive(first)
        other = await coord.create_session()
        theirs = await one_turn(coord, recorder, other.id, 3)
        assert theirs != first
        await coord.delete_session(session.id)
        assert not alive(first) and alive(theirs)
    assert not alive(theirs)


async def test_a_kept_process_is_closed_once_its_session_idled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No turn for the idle period: the process is closed, and the next turn opens a new one.

    On the real clock (the process is reaped in real time), with an idle period of a second.
    """
    monkeypatch.setattr(session_life, "IDLE_SECONDS", 1.0)
    async with running(make_config(tmp_path), [CALL, DONE, CALL, DONE]) as (coord, recorder):
        coord._runtime.tools.provide("tests", [PID])
        session = await coord.create_session()
        first = await one_turn(coord, recorder, session.id, 1)
        await trio.sleep(0.5)
        assert alive(first)
        await trio.sleep(1.5)
        assert not alive(first)
        second = await one_turn(coord, recorder, session.id, 2)
        assert second != first and alive(second)


async def test_a_provided_tool_is_offered_and_runs_until_it_is_withdrawn(tmp_path: Path) -> None:
    """Provided: the next request offers it and the call runs; withdrawn: not offered, and a call
    the model still makes fails as a call to an unknown tool (the turn goes on)."""
    model = CountingModel(ScriptedModel.from_json([CALL, DONE, CALL, DONE]))
    async with running(make_config(tmp_path), model=model) as (coord, recorder):
        session = await coord.create_session()
        tables = coord._runtime.tools
        tables.provide("tests", [PID])
        await one_turn(coord, recorder, session.id, 1)
        tables.withdraw("tests")
        await coord.prompt(session.id, "again")
        await recorder.wait_for("session.idle", 2)
    offered = [[spec.name for spec in request.tools] for request in model.requests]
    assert all("kept_pid" in names for names in offered[:2])
    assert all("kept_pid" not in names for names in offered[2:])
    failed = recorder.of("session.tool.failed")
    assert [e.payload["error"] for e in failed] == [
        {"type": "error", "message": "unknown tool 'kept_pid'", "started": False}
    ]
    assert recorder.types(session.id)[-2:] == ["session.execution.succeeded", "session.idle"]


async def test_a_tool_provided_to_one_session_is_not_offered_to_another(tmp_path: Path) -> None:
    """A session's own tools are its own; the others see the fixed table."""
    model = CountingModel(ScriptedModel.from_json([DONE, DONE]))
    async with running(make_config(tmp_path), model=model) as (coord, recorder):
        mine, theirs = await coord.create_session(), await coord.create_session()
        coord._runtime.tools.provide("tests", [PID], session_id=mine.id)
        await coord.prompt(mine.id, "go")
        await recorder.wait_for("session.idle", 1)
        await coord.prompt(theirs.id, "go")
        await recorder.wait_for("session.idle", 2)
    offered = {request.session_id: [spec.name for spec in request.tools] for request in model.requests}
    assert "kept_pid" in offered[mine.id] and "kept_pid" not in offered[theirs.id]
