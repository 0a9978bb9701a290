"""A stop's reason travels with its cancellation; a missing one is a loud error, never a shutdown."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio

from coordinator import Coordinator
from coordinator.actors.handle import ActorHandle
from coordinator.logs import captured
from coordinator.reasons import REASONLESS, Failure, Interrupt, Shutdown
from coordinator.records import Session
from tests.conftest import ASK_SHELL, Recorder, make_config, running


async def test_the_first_reason_wins_and_children_read_it_through_their_parent() -> None:
    turn = ActorHandle(kind="turn", id="t")
    call = turn.child("tool_call", "c")
    assert turn.stop(Interrupt(by="api")) is True
    assert turn.stop(Shutdown()) is False
    assert call.reason_or_failure() == Interrupt(by="api")
    assert call.scope.cancel_called is False  # trio cancels the child through the parent's scope


def test_a_reasonless_cancellation_settles_as_error_and_is_logged() -> None:
    with captured() as logs:
        reason = ActorHandle(kind="step", id="s").reason_or_failure()
    assert reason == Failure(message=REASONLESS)
    assert logs == [{"event": "reasonless_cancel", "log_level": "error", "actor": "step", "actor_id": "s"}]


async def test_a_turn_cancelled_without_a_reason_fails_and_is_never_suspended(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A bug that cancels a turn without a reason ends it failed, releasing the claim: never a shutdown."""
    async with _waiting_on_a_permission(tmp_path) as (coord, recorder, session, turn_id):
        with captured() as logs:
            coord._runtime.turns[turn_id].handle.scope.cancel()  # the bug: no typed reason
            await recorder.wait_for("session.idle")
        failed = recorder.of("session.execution.failed")[0]
        assert failed.payload["reason"] == {"type": "error", "message": REASONLESS}
        assert "session.execution.suspended" not in recorder.types()
        assert any(entry["event"] == "reasonless_cancel" for entry in logs)
        info = await coord.get_session(session.id)
        assert (info.claim, info.last_outcome) == (None, "failed")
        await trio.testing.wait_all_tasks_blocked()


async def test_the_actors_state_renders_in_a_line_each_in_a_traceback(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """Every actor's frames hold the runtime, its turn and handles: a traceback that renders the frames'
    locals (structlog's default, with rich) rendered the whole coordinator and each chain of parent
    handles once a frame, 3.6 MB and 20 s of the trio thread for one failed call of ``execute``."""
    async with _waiting_on_a_permission(tmp_path) as (coord, recorder, session, turn_id):
        runtime = coord._runtime
        turn = runtime.turns[turn_id]
        step = turn.handle.child("step", "step_1")
        call = step.child("tool_call", "c1")
        assert repr(runtime) == f"Runtime(instance_id={runtime.instance_id!r}, turns=1, closing=False)"
        assert "Runtime(" not in repr(turn) and repr(turn).count("ActorHandle(") == 1
        assert turn_id in repr(turn) and len(repr(turn)) < 500
        assert repr(call) == (
            "ActorHandle(kind='tool_call', id='c1', parent='step step_1', reason=None, cancel_called=False)"
        )
        await coord.interrupt(session.id)
        await recorder.wait_for("session.idle")


@contextlib.asynccontextmanager
async def _waiting_on_a_permission(
    tmp_path: Path,
) -> AsyncIterator[tuple[Coordinator, Recorder, Session, str]]:
    """A coordinator whose one turn waits on the permission of a shell call."""
    config = make_config(tmp_path, rules=ASK_SHELL)
    script = [{"tool_calls": [{"id": "c1", "name": "shell", "input": {"command": "echo"}}]}]
    async with running(config, script) as (coord, recorder):
        session = await coord.create_session()
        turn_id = await coord.prompt(session.id, "go")
        await recorder.wait_for("permission.asked")
        yield coord, recorder, session, turn_id
