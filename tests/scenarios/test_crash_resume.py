"""A crash (the coordinator dropped with nothing settled): resumed exactly once, as a crash, and
a stop decided before the crash is settled as that stop, never resumed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import trio

from coordinator.chaos import crash
from coordinator.config import PluginConfig
from coordinator.models.scripted import ScriptedModel
from coordinator.reasons import Interrupt
from tests.conftest import running
from tests.scenarios.test_stop_matrix import DONE, SHELL_CALL, SLOW_CALL, CountingModel, config_for


async def crash_at(config: Any, script: list[dict[str, Any]], wait_for: str) -> tuple[str, str, list[str]]:
    """Start a turn, wait for ``wait_for``, then crash the coordinator. Returns ids and event types."""
    async with running(config, script) as (coord, recorder):
        session = await coord.create_session()
        turn_id = await coord.prompt(session.id, "go")
        await recorder.wait_for(wait_for)
        await trio.testing.wait_all_tasks_blocked()
        await crash(coord)
    return session.id, turn_id, recorder.types(session.id)


async def test_a_crash_while_a_permission_waits_restores_the_same_request(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """The pending request is re-published with its id and waits again; the model is not asked again."""
    # No tool deadline: the autojump clock would leap to it while the real shell process runs.
    config = config_for(tmp_path, tool=0)
    session_id, _, before = await crash_at(config, [SHELL_CALL, DONE], "permission.asked")
    assert before[-1] == "permission.asked"  # nothing was settled: a crash writes nothing
    model = CountingModel(ScriptedModel.from_json([DONE]))
    async with running(config, model=model) as (coord, recorder):
        resumed = await recorder.wait_for("session.execution.resumed")
        assert resumed.payload["after"] == "crash"
        restored = await recorder.wait_for("permission.asked", 2)
        assert restored.payload["restored"] is True
        assert model.requests == []
        request_id = restored.payload["request"]["id"]
        assert request_id == recorder.of("permission.asked")[0].payload["request"]["id"]
        await coord.reply_permission(session_id, request_id, "once")
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id)[len(before) :] == [
            "session.execution.resumed",
            "session.step.failed",
            "permission.asked",
            "permission.replied",
            "session.tool.succeeded",
            "session.step.started",
            "session.step.succeeded",
            "session.execution.succeeded",
            "session.idle",
        ]
        assert len(model.requests) == 1


async def test_a_crash_while_a_tool_runs_fails_it_as_interrupted_and_asks_again(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """The running call fails as interrupted, before its step (children first, as in a live stop), and
    the model is asked again with the restart note."""
    config = config_for(tmp_path)
    session_id, _, before = await crash_at(config, [SLOW_CALL, DONE], "session.tool.started")
    model = CountingModel(ScriptedModel.from_json([DONE]))
    async with running(config, model=model) as (_, recorder):
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id)[len(before) :] == [
            "session.execution.resumed",
            "session.tool.failed",
            "session.step.failed",
            "session.step.started",
            "session.step.succeeded",
            "session.execution.succeeded",
            "session.idle",
        ]
        error = recorder.of("session.tool.failed")[0].payload["error"]
        assert error["type"] == "interrupted" and "restarted" in error["message"]
        messages = model.requests[0].messages
        assert [m.role for m in messages] == ["user", "assistant", "tool", "user"]
        assert "restarted" in (messages[-1].content or "")


async def test_a_stop_decided_before_a_crash_is_settled_as_that_stop(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """An interrupt committed but never applied (the crash came first) ends the turn interrupted."""
    config = config_for(tmp_path)
    async with running(config, [SHELL_CALL, DONE]) as (coord, recorder):
        session = await coord.create_session()
        turn_id = await coord.prompt(session.id, "go")
        await recorder.wait_for("permission.asked")
        assert await coord.store.write(lambda tx: tx.record_stop_intent(turn_id, Interrupt(by="api")))
        await crash(coord)
    model = CountingModel(ScriptedModel.from_json([DONE]))
    async with running(config, model=model) as (coord, recorder):
        await recorder.wait_for("session.idle")
        assert recorder.types(session.id)[-6:] == [
            "permission.asked",
            "permission.revoked",
            "session.tool.failed",
            "session.step.failed",
            "session.execution.interrupted",
            "session.idle",
        ]
        assert "session.execution.resumed" not in recorder.types()
        assert recorder.of("session.execution.interrupted")[0].payload["reason"] == {
            "type": "interrupt",
            "by": "api",
        }
        assert model.requests == []
        info = await coord.get_session(session.id)
        assert (info.status, info.claim, info.last_outcome) == ("idle", None, "interrupted")


async def test_a_turn_that_keeps_crashing_is_failed_after_max_resumes(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """After ``max_resumes`` resumes the turn fails with reason error instead of resuming again."""
    config = config_for(tmp_path)
    config = attrs.evolve(config, server=attrs.evolve(config.server, max_resumes=2))
    session_id, _, _ = await crash_at(config, [SLOW_CALL], "session.tool.started")
    for attempt in range(2):
        async with running(config, [SLOW_CALL]) as (coord, recorder):
            await recorder.wait_for("session.tool.started", attempt + 2)
            await trio.testing.wait_all_tasks_blocked()
            await crash(coord)
    async with running(config, [DONE]) as (coord, recorder):
        failed = await recorder.wait_for("session.execution.failed")
        assert "resumed 2 times" in failed.payload["reason"]["message"]
        await recorder.wait_for("session.idle")
        info = await coord.get_session(session_id)
        assert (info.status, info.claim, info.last_outcome) == ("idle", None, "failed")


async def test_a_crash_resume_kills_the_process_group_the_dead_coordinator_left(tmp_path: Path) -> None:
    """A tool's processes outlive a killed coordinator; the next start kills them (same boot) before it
    resumes the turn, and deletes their record."""
    from coordinator.store import open_store
    from coordinator.tools.process_group import GroupOwner, ProcessGroup
    from tests.processes import is_gone

    config = config_for(tmp_path)
    session_id, turn_id, _ = await crash_at(config, [SLOW_CALL, DONE], "session.tool.started")
    orphan = await trio.lowlevel.open_process(["sleep", "60"], start_new_session=True)
    try:
        with open_store(config.server.db, synchronous="normal") as store:

            def record_the_orphan(tx: Any) -> str:
                claim = tx.get_claim(session_id)  # held by the dead coordinator's instance
                call_id: str = tx.tool_calls_of_turn(turn_id)[0].call_id
                owner = GroupOwner(instance_id=claim.owner, session_id=session_id, call_id=call_id)
                tx.record_process_group(owner.row(ProcessGroup.of(orphan.pid)), "now")
                return call_id

            call_id = await store.write(record_the_orphan)
        async with running(config, [DONE]) as (coord, recorder):
            await recorder.wait_for("session.idle")
            assert await coord.store.read(lambda r: r.process_group_of(session_id, call_id)) is None
        with trio.fail_after(5):
            assert await orphan.wait() == -9
        assert is_gone(orphan.pid)
    finally:
        orphan.kill()
        with trio.move_on_after(5, shield=True):
            await orphan.wait()


COUNTING_PLUGIN = """
from pathlib import Path

async def counted(label: str, log: str) -> str:
    \"\"\"Note one run in the log, then answer.\"\"\"
    with Path(log).open("a") as runs:
        runs.write(label + "\\n")
    return "ran " + label
"""


async def test_a_resume_never_runs_a_call_that_had_finished_before_the_crash(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """Of two calls of one step, the one that finished keeps its result and is not run again; only the
    one that was running fails, and the model gets both results with the restart note."""
    (tmp_path / "counting.py").write_text(COUNTING_PLUGIN)
    config = config_for(tmp_path)
    config = attrs.evolve(config, plugin=(*config.plugin, PluginConfig(entry="counting:counted")))
    both = {
        "tool_calls": [
            {
                "id": "call_fast",
                "name": "counted",
                "input": {"label": "fast", "log": str(tmp_path / "runs.log")},
            },
            {"id": "call_slow", "name": "slow", "input": {"seconds": 1000}},
        ]
    }
    session_id, _, before = await crash_at(config, [both, DONE], "session.tool.succeeded")
    model = CountingModel(ScriptedModel.from_json([DONE]))
    async with running(config, model=model) as (_, recorder):
        await recorder.wait_for("session.idle")
        assert (tmp_path / "runs.log").read_text().splitlines() == ["fast"]
        assert recorder.types(session_id)[len(before) :] == [
            "session.execution.resumed",
            "session.tool.failed",
            "session.step.failed",
            "session.step.started",
            "session.step.succeeded",
            "session.execution.succeeded",
            "session.idle",
        ]
        assert [e.payload["call_id"] for e in recorder.of("session.tool.failed")] == ["call_slow"]
        tool_results = {m.tool_call_id: m.content for m in model.requests[0].messages if m.role == "tool"}
        assert set(tool_results) == {"call_fast", "call_slow"}
        assert "ran fast" in (tool_results["call_fast"] or "")
        assert "restarted" in (tool_results["call_slow"] or "")
