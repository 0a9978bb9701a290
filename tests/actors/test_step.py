"""A step's success is carried by the turn's next transaction: whatever comes next writes it first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coordinator.actors import session
from coordinator.records import Rule
from tests.conftest import make_config, running

ALLOW_ALL = (Rule(action="*", resource="*", effect="allow"),)
STEP_WITH_A_CALL = [
    "session.step.started",
    "session.tool.started",
    "session.tool.succeeded",
    "session.step.succeeded",
]


def _echo(call_id: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": "shell", "input": {"command": f"echo {call_id}"}}]}


async def test_a_stop_decided_right_after_a_steps_success_writes_that_success_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn's step limit is decided between one step's success and the next step's start: the
    intent's transaction writes the success it carries, so the last step ends succeeded, its event
    before the turn's failure, and the settlement's sweep finds no running step to fail."""
    monkeypatch.setattr(session, "MAX_STEPS_PER_TURN", 2)
    async with running(make_config(tmp_path, rules=ALLOW_ALL), [_echo("call_1"), _echo("call_2")]) as (
        coord,
        events,
    ):
        created = await coord.create_session()
        turn_id = await coord.prompt(created.id, "go")
        idle = await events.wait_for("session.idle")
        assert idle.payload == {"turn_id": turn_id, "outcome": "failed"}
        assert [e.type for e in events.events] == [
            "session.created",
            "session.turn.started",
            *STEP_WITH_A_CALL,
            *STEP_WITH_A_CALL,
            "session.execution.failed",
            "session.idle",
        ]
        assert [e.payload["step_id"] for e in events.of("session.step.succeeded")] == [
            e.payload["step_id"] for e in events.of("session.step.started")
        ]
        assert coord.store.read.running_steps(turn_id) == []
        failed = events.of("session.execution.failed")[0]
        assert failed.payload["reason"] == {
            "type": "error",
            "message": "the turn took more than 2 model steps",
        }
