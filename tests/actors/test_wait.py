"""The durable-wait actor (``coordinator/actors/wait.py``): a stopped wait is revoked with its event, and a
deadline stops the turn with its kind's scope, on a real SQLite file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing

from coordinator import decisions
from coordinator.actors import wait
from coordinator.actors.context import TurnScope
from coordinator.config import Config, TimeoutsConfig
from coordinator.reasons import Interrupt, Timeout
from coordinator.records import Question
from tests.actors.turn_harness import Harness, call_row, open_harness, start_step


async def _wait_in_turn(turn: TurnScope, kind: wait.WaitKind[Any, Any], call_id: str) -> None:
    """Run the wait for ``call_id`` as the turn's child, until the turn stops."""
    with turn.handle.scope:
        await wait.run(turn, turn.handle, kind, call_id=call_id, restorable=True)
        raise AssertionError("nobody answered: the wait must end only by the turn's stop")


def _stored_turn(harness: Harness) -> tuple[str, object]:
    row = harness.store.read.get_turn("turn_1")
    assert row is not None
    return row.status, row.stop_reason


async def test_an_interrupted_permission_wait_revokes_its_request_with_one_event(tmp_path: Path) -> None:
    """Seed 003: a request dropped without ``permission.revoked`` leaves the client's dialog up,
    answering 404 forever; the stop's reason goes with the revocation."""
    async with open_harness(tmp_path) as harness:
        turn = harness.live()
        await start_step(harness, call_row("c1", "shell", input={"command": "ls"}))
        asking = wait.PermissionWait(action="shell", resource="ls", restore=None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_wait_in_turn, turn, asking, "c1")
            await trio.testing.wait_all_tasks_blocked()
            assert await decisions.interrupt(harness.runtime, "ses_1", "api")
        await harness.settle()
        [request] = [event.payload["request"] for event in harness.events[:1]]
        assert [(e.type, e.payload.get("request_id"), e.payload.get("reason")) for e in harness.events] == [
            ("permission.asked", None, None),
            ("permission.revoked", request["id"], {"type": "interrupt", "by": "api"}),
        ]
        revoked = harness.store.read.get_permission(request["id"])
        assert revoked is not None
        assert (revoked.status, revoked.reason) == ("revoked", Interrupt(by="api"))


async def test_a_question_deadline_stops_the_turn_as_a_question_timeout(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """The deadline's scope tells a client which wait ran out: a form's is
    ``question``, never ``permission``, in the turn's intent and on the form's revocation."""
    config = Config(base_dir=tmp_path, timeouts=TimeoutsConfig(permission=10, question=30))
    async with open_harness(tmp_path, config=config) as harness:
        turn = harness.live()
        await start_step(harness, call_row("c1", "question"))
        asking = wait.QuestionWait(questions=[Question(id="q", prompt="Go on?")])
        await _wait_in_turn(turn, asking, "c1")
        timeout = Timeout(scope="question", after=30)
        assert turn.handle.reason == timeout
        assert _stored_turn(harness) == ("stopping", timeout)
        await harness.settle()
        [form] = [event.payload["form"] for event in harness.events[:1]]
        assert [(e.type, e.payload.get("form_id"), e.payload.get("reason")) for e in harness.events] == [
            ("form.asked", None, None),
            ("form.revoked", form["id"], {"type": "timeout", "scope": "question", "after": 30}),
        ]
        assert 29 < trio.current_time() <= 30
