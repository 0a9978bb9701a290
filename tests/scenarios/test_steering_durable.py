"""Steers and soft stops are durable: across a crash, a shutdown and two coordinators on one
database, a steer is delivered once or queued once, never lost, and a soft stop is never resumed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing

from coordinator import Coordinator
from coordinator.chaos import crash
from tests.conftest import ASK_SHELL, RecordingModel, make_config, running
from tests.scenarios.test_stop_matrix import DONE, SHELL_CALL, config_for


async def _steered_then(config: Any, stop: str) -> tuple[str, str, str]:
    """A turn waiting for permission, a steer sent into it, then ``stop`` ("crash" or "shutdown")."""
    async with running(config, [SHELL_CALL, DONE]) as (coord, recorder):
        session = await coord.create_session()
        turn_id = await coord.prompt(session.id, "go")
        await recorder.wait_for("permission.asked")
        steered = await coord.steer(session.id, "and then this")
        await trio.testing.wait_all_tasks_blocked()
        if stop == "crash":
            await crash(coord)
    return session.id, turn_id, steered.steer_id


async def _resumed_and_answered(config: Any, session_id: str) -> tuple[list[str], RecordingModel, Any]:
    model = RecordingModel.from_json([DONE])
    async with running(config, model=model) as (coord, recorder):
        restored = await recorder.wait_for("permission.asked", 2)
        await coord.reply_permission(session_id, restored.payload["request"]["id"], "once")
        await recorder.wait_for("session.idle")
        steers = await coord.store.read(lambda r: r.steers_of_session(session_id))
    return recorder.types(session_id), model, steers


async def test_a_steer_accepted_before_a_crash_is_delivered_once_after_the_resume(
    tmp_path: Path, autojump_clock: Any
) -> None:
    config = config_for(tmp_path, tool=0)  # no tool deadline for the jumping clock to leap to
    session_id, _, steer_id = await _steered_then(config, "crash")
    types, model, steers = await _resumed_and_answered(config, session_id)
    assert types.count("session.turn.steered") == 1
    assert types.index("session.turn.steered") > types.index("session.tool.succeeded")
    assert [m.content for m in model.requests[0].messages if m.role == "user"][-1] == "and then this"
    assert [(s.id, s.status) for s in steers] == [(steer_id, "delivered")]


async def test_a_steer_accepted_before_a_shutdown_is_delivered_once_after_the_resume(
    tmp_path: Path, autojump_clock: Any
) -> None:
    config = config_for(tmp_path, tool=0)
    session_id, _, steer_id = await _steered_then(config, "shutdown")
    types, _, steers = await _resumed_and_answered(config, session_id)
    assert "session.execution.suspended" in types and types.count("session.turn.steered") == 1
    assert [(s.id, s.status) for s in steers] == [(steer_id, "delivered")]


async def test_a_soft_stop_before_a_crash_is_settled_never_resumed(
    tmp_path: Path, autojump_clock: Any
) -> None:
    config = config_for(tmp_path, tool=0)
    async with running(config, [SHELL_CALL, DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("permission.asked")
        steered = await coord.steer(session.id, "later")
        assert await coord.interrupt(session.id, when="after_step")
        await trio.testing.wait_all_tasks_blocked()
        await crash(coord)
    async with running(config, [DONE]) as (coord, recorder):
        await recorder.wait_for("session.idle", 2)  # the stopped turn's, then the steer's own turn's
        types = recorder.types(session.id)
        assert "session.execution.resumed" not in types
        interrupted = recorder.of("session.execution.interrupted")[0].payload["reason"]
        assert interrupted == {"type": "interrupt", "by": "embedder", "soft": True}
        assert recorder.of("permission.revoked")  # the kept wait settles with the stop
        queued = recorder.of("session.turn.queued")[0].payload
        assert queued["from_steer"] == steered.steer_id
        assert recorder.of("session.turn.started")[-1].payload["prompt"] == "later"


async def test_a_steer_sent_to_another_coordinator_is_delivered_by_the_one_running_the_turn(
    tmp_path: Path, autojump_clock: Any
) -> None:
    config = config_for(tmp_path, tool=0)
    async with running(config, [SHELL_CALL, DONE]) as (a, a_events), running(config, [DONE]) as (b, b_events):
        session = await a.create_session()
        turn_id = await a.prompt(session.id, "go")
        asked = await b_events.wait_for("permission.asked")
        steered = await b.steer(session.id, "from b", expected_turn_id=turn_id)
        assert steered.turn_id == turn_id
        await b.reply_permission(session.id, asked.payload["request"]["id"], "once")
        await a_events.wait_for("session.idle")
        await b_events.wait_for("session.idle")
        assert a_events.types(session.id).count("session.turn.steered") == 1
        assert len(a_events.of("session.turn.started")) == 1


async def _race(a: Coordinator, b: Coordinator, session_id: str) -> dict[str, Any]:
    """A steer into ``a`` and an interrupt into ``b`` of the session's turn, at once."""
    answers: dict[str, Any] = {}

    async def steer() -> None:
        answers["steer"] = await a.steer(session_id, "race")

    async def interrupt() -> None:
        answers["interrupt"] = await b.interrupt(session_id, by="api")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(steer)
        nursery.start_soon(interrupt)
    return answers


async def test_a_steer_racing_an_interrupt_from_another_client_is_queued_once(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """Fifty races of a steer (into A) against an interrupt (into B): the interrupt stops the turn
    every time, and the steer becomes a queued turn exactly once: queued at once when the interrupt
    came first, or by the stop's settlement when the steer did. It never reaches the stopped turn."""
    config = make_config(tmp_path, rules=ASK_SHELL)
    outcomes: set[str] = set()
    async with running(config, [SHELL_CALL, DONE]) as (a, events), running(config, [DONE]) as (b, _):
        for _ in range(50):
            session = await a.create_session()
            turn_id = await a.prompt(session.id, "go")
            await events.wait_until(
                lambda e, s=session.id: e.type == "permission.asked" and e.session_id == s
            )
            answers = await _race(a, b, session.id)
            assert answers["interrupt"] is True
            await events.wait_until(
                lambda e, s=session.id: (
                    e.type == "session.idle" and e.session_id == s and e.payload["outcome"] == "succeeded"
                )
            )
            mine = [e for e in events.events if e.session_id == session.id]
            queued = [e for e in mine if e.type == "session.turn.queued"]
            assert [e.payload["from_steer"] for e in queued] == [answers["steer"].steer_id]
            assert not [e for e in mine if e.type == "session.turn.steered"]
            outcomes.add("steer first" if answers["steer"].turn_id == turn_id else "interrupt first")
            assert [e.payload["prompt"] for e in mine if e.type == "session.turn.started"] == ["go", "race"]
    assert outcomes <= {"steer first", "interrupt first"}
