"""``[server] resume = "manual"`` through the embedding API: a start parks the
suspended and crashed turns; ``resume`` runs one exactly once, ``interrupt`` settles one as interrupted,
and a parked turn stays parked across restarts whatever the policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from coordinator.chaos import crash
from coordinator.config import Config
from coordinator.errors import NothingToResume
from coordinator.models.scripted import ScriptedModel
from tests.conftest import running
from tests.scenarios.test_crash_resume import crash_at
from tests.scenarios.test_stop_matrix import DONE, SHELL_CALL, SLOW_CALL, CountingModel, config_for

RESUMED_SUCCESS = [
    "session.step.started",
    "session.step.succeeded",
    "session.execution.succeeded",
    "session.idle",
]


def manual(config: Config) -> Config:
    return attrs.evolve(config, server=attrs.evolve(config.server, resume="manual"))


async def suspend_at(config: Config, script: list[dict[str, Any]], wait_for: str) -> tuple[str, list[str]]:
    """Start a turn, wait for ``wait_for``, then shut down gracefully. Returns the id and event types."""
    async with running(config, script) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for(wait_for)
        await trio.testing.wait_all_tasks_blocked()
    return session.id, recorder.types(session.id)


async def test_a_manual_start_parks_a_suspended_wait_and_resume_restores_it_once(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """Nothing runs until the resume; the request keeps its id and is asked again, and a second resume
    finds nothing."""
    config = manual(config_for(tmp_path, tool=0))
    session_id, before = await suspend_at(config, [SHELL_CALL, DONE], "permission.asked")
    assert before[-1] == "session.execution.suspended"
    model = CountingModel(ScriptedModel.from_json([DONE]))
    async with running(config, model=model) as (coord, recorder):
        await trio.testing.wait_all_tasks_blocked()
        assert recorder.types(session_id) == before
        info = await coord.get_session(session_id)
        assert info.status == "suspended" and info.claim is not None
        [pending] = await coord.pending_permissions(session_id)
        turn_id = await coord.resume(session_id)
        with pytest.raises(NothingToResume):
            await coord.resume(session_id)
        restored = await recorder.wait_for("permission.asked", 2)
        assert restored.payload["restored"] is True and restored.payload["request"]["id"] == pending.id
        assert model.requests == []
        await coord.reply_permission(session_id, pending.id, "once")
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id)[len(before) :] == [
            "session.execution.resumed",
            "permission.asked",
            "permission.replied",
            "session.tool.succeeded",
            *RESUMED_SUCCESS,
        ]
        assert recorder.of("session.execution.resumed")[0].payload == {
            "turn_id": turn_id,
            "after": "shutdown",
        }
        assert len(model.requests) == 1
        with pytest.raises(NothingToResume):
            await coord.resume(session_id)


async def test_a_manual_start_parks_a_crashed_tool_call_and_resume_fails_it_once(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """After a crash the turn reads suspended; its resume is a crash's resume: the call fails as
    interrupted, then the model is asked once with the restart note."""
    config = manual(config_for(tmp_path))
    session_id, _, before = await crash_at(config, [SLOW_CALL, DONE], "session.tool.started")
    model = CountingModel(ScriptedModel.from_json([DONE]))
    async with running(config, model=model) as (coord, recorder):
        await trio.testing.wait_all_tasks_blocked()
        assert recorder.types(session_id) == before
        assert (await coord.get_session(session_id)).status == "suspended"
        await coord.resume(session_id)
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id)[len(before) :] == [
            "session.execution.resumed",
            "session.tool.failed",
            "session.step.failed",
            *RESUMED_SUCCESS,
        ]
        assert recorder.of("session.execution.resumed")[0].payload["after"] == "crash"
        assert [m.role for m in model.requests[0].messages] == ["user", "assistant", "tool", "user"]
        info = await coord.get_session(session_id)
        assert (info.status, info.claim, info.last_outcome) == ("idle", None, "succeeded")


async def test_an_interrupt_settles_a_parked_turn_as_interrupted(tmp_path: Path, autojump_clock: Any) -> None:
    """The kept request is revoked with reason interrupt, the call fails, and the session is idle."""
    config = manual(config_for(tmp_path, tool=0))
    session_id, before = await suspend_at(config, [SHELL_CALL, DONE], "permission.asked")
    model = CountingModel(ScriptedModel.from_json([DONE]))
    async with running(config, model=model) as (coord, recorder):
        assert await coord.interrupt(session_id) is True
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id)[len(before) :] == [
            "permission.revoked",
            "session.tool.failed",
            "session.execution.interrupted",
            "session.idle",
        ]
        interrupt = {"type": "interrupt", "by": "embedder"}
        assert recorder.of("permission.revoked")[0].payload["reason"] == interrupt
        assert recorder.of("session.execution.interrupted")[0].payload["reason"] == interrupt
        assert model.requests == []
        assert await coord.interrupt(session_id) is False
        with pytest.raises(NothingToResume):
            await coord.resume(session_id)
        info = await coord.get_session(session_id)
        assert (info.status, info.claim, info.last_outcome) == ("idle", None, "interrupted")


async def test_a_parked_turn_stays_parked_when_the_next_start_is_automatic(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """Parking is the operator's decision, kept in the store: an "auto" start leaves it alone."""
    config = manual(config_for(tmp_path, tool=0))
    session_id, before = await suspend_at(config, [SHELL_CALL, DONE], "permission.asked")
    async with running(config, [DONE]) as (coord, recorder):
        await trio.testing.wait_all_tasks_blocked()
    automatic = config_for(tmp_path, tool=0)
    async with running(automatic, [DONE]) as (coord, recorder):
        await trio.sleep(5)  # a few looks of the watch
        assert recorder.types(session_id) == before
        assert (await coord.get_session(session_id)).status == "suspended"
        await coord.resume(session_id)
        await recorder.wait_for("permission.asked", 2)


async def test_a_prompt_to_a_parked_session_waits_behind_the_parked_turn(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """The parked turn is still the session's current one: a new prompt is queued (202) and runs only
    after the resumed turn has finished."""
    config = manual(config_for(tmp_path, tool=0))
    session_id, before = await suspend_at(config, [SHELL_CALL, DONE], "permission.asked")
    async with running(config, [DONE]) as (coord, recorder):
        queued = await coord.prompt(session_id, "next")
        await trio.sleep(5)
        assert recorder.types(session_id) == before
        assert (await coord.get_session(session_id)).status == "suspended"
        await coord.resume(session_id)
        request = (await recorder.wait_for("permission.asked", 2)).payload["request"]
        await coord.reply_permission(session_id, request["id"], "once")
        await recorder.wait_for("session.idle", 2)
        started = recorder.of("session.turn.started")
        assert [e.payload["turn_id"] for e in started][-1] == queued
        assert recorder.types(session_id)[-6:] == [
            "session.idle",
            "session.turn.started",
            "session.step.started",
            "session.step.succeeded",
            "session.execution.succeeded",
            "session.idle",
        ]


async def test_a_manual_resume_counts_toward_max_resumes(tmp_path: Path, autojump_clock: Any) -> None:
    """``max_resumes`` holds whoever resumes: a turn resumed that often fails with reason error when
    resumed by hand again, and its kept request is revoked."""
    config = manual(config_for(tmp_path, tool=0))
    config = attrs.evolve(config, server=attrs.evolve(config.server, max_resumes=1))
    session_id, _ = await suspend_at(config, [SHELL_CALL, DONE], "permission.asked")
    async with running(config, [DONE]) as (coord, recorder):
        await coord.resume(session_id)
        await recorder.wait_for("permission.asked", 2)
        await trio.testing.wait_all_tasks_blocked()
    async with running(config, [DONE]) as (coord, recorder):
        await coord.resume(session_id)
        failed = await recorder.wait_for("session.execution.failed")
        assert "resumed 1 times" in failed.payload["reason"]["message"]
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id)[-5:] == [
            "session.execution.suspended",
            "permission.revoked",
            "session.tool.failed",
            "session.execution.failed",
            "session.idle",
        ]
        info = await coord.get_session(session_id)
        assert (info.status, info.claim, info.last_outcome) == ("idle", None, "failed")


async def test_a_reply_while_parked_is_applied_by_the_resume(tmp_path: Path, autojump_clock: Any) -> None:
    """An approval given while the turn is parked runs nothing then; the resume runs the tool once,
    without asking again."""
    config = manual(config_for(tmp_path, tool=0))
    session_id, before = await suspend_at(config, [SHELL_CALL, DONE], "permission.asked")
    model = CountingModel(ScriptedModel.from_json([DONE]))
    async with running(config, model=model) as (coord, recorder):
        [pending] = await coord.pending_permissions(session_id)
        assert (await coord.reply_permission(session_id, pending.id, "once")).status == "replied"
        await trio.sleep(5)
        assert recorder.types(session_id) == [*before, "permission.replied"]
        assert (await coord.get_session(session_id)).status == "suspended"
        await coord.resume(session_id)
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id)[len(before) :] == [
            "permission.replied",
            "session.execution.resumed",
            "session.tool.succeeded",
            *RESUMED_SUCCESS,
        ]
        assert len(recorder.of("permission.asked")) == 1
        assert len(model.requests) == 1


async def test_a_reject_while_parked_settles_the_turn_declined_at_once(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A reject is a stop decided while the turn is down: it ends the turn declined, never resumed."""
    config = manual(config_for(tmp_path, tool=0))
    session_id, before = await suspend_at(config, [SHELL_CALL, DONE], "permission.asked")
    model = CountingModel(ScriptedModel.from_json([DONE]))
    async with running(config, model=model) as (coord, recorder):
        [pending] = await coord.pending_permissions(session_id)
        await coord.reply_permission(session_id, pending.id, "reject")
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id)[len(before) :] == [
            "permission.replied",
            "session.tool.failed",
            "session.execution.interrupted",
            "session.idle",
        ]
        declined = {"type": "declined", "via": "permission", "call_id": "call_1"}
        assert recorder.of("session.execution.interrupted")[0].payload["reason"] == declined
        assert recorder.of("session.tool.failed")[0].payload["error"]["type"] == "declined"
        with pytest.raises(NothingToResume):
            await coord.resume(session_id)
        info = await coord.get_session(session_id)
        assert (info.status, info.claim, info.last_outcome) == ("idle", None, "declined")
        assert model.requests == []


async def test_a_resume_asked_before_a_crash_is_carried_out_by_the_next_start(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """The resume was committed but its instance died before taking the turn over: the next start,
    even a manual one, resumes it (the person asked for it), exactly once."""
    config = manual(config_for(tmp_path, tool=0))
    session_id, before = await suspend_at(config, [SHELL_CALL, DONE], "permission.asked")
    async with running(config, [DONE]) as (coord, recorder):
        [turn_id] = await coord.store.read(lambda reader: reader.parked_turn_ids())
        assert await coord.store.write(lambda tx: tx.release_parked(turn_id))  # what resume commits first
        await crash(coord)
    async with running(config, [DONE]) as (coord, recorder):
        await recorder.wait_for("permission.asked", 2)
        assert recorder.types(session_id)[len(before) :] == ["session.execution.resumed", "permission.asked"]
        with pytest.raises(NothingToResume):
            await coord.resume(session_id)
