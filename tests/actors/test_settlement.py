"""The one settlement path (``coordinator/actors/settlement.py``): a live stop's sweep and a restart's recovery
settle a turn's leftovers in the same order, children before parents, on a real SQLite file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.actors import settlement
from coordinator.reasons import Declined, Failure, Interrupt, Shutdown
from coordinator.records import Form, PermissionRequest, Question
from coordinator.store.rows import ToolCallRow
from tests.actors.turn_harness import AT, Harness, open_harness


def _call(call_id: str, name: str, parent: str | None = None) -> ToolCallRow:
    return ToolCallRow(
        session_id="ses_1",
        call_id=call_id,
        turn_id="turn_1",
        step_id="step_1",
        parent_call_id=parent,
        model_call_id=call_id,
        name=name,
        input={},
        status="running",
        output=None,
        error=None,
        partial=None,
        progress=None,
    )


async def _mid_turn(harness: Harness) -> None:
    """A step that asked for an execute call (one nested shell call, waiting for permission) and a
    question call (waiting for its form), as a process could leave them when it stops or dies."""
    async with harness.store.transaction() as tx:
        tx.insert_step("step_1", "ses_1", "turn_1", AT)
        for call in (_call("c1", "execute"), _call("c2", "question"), _call("c1.1", "shell", parent="c1")):
            tx.insert_tool_call(call, AT)
        tx.insert_permission(
            PermissionRequest(
                id="per_1",
                session_id="ses_1",
                call_id="c1.1",
                action="shell",
                resource="ls",
                status="pending",
                created_at=AT,
            ),
            "turn_1",
            None,
        )
        tx.insert_form(
            Form(
                id="frm_1",
                session_id="ses_1",
                call_id="c2",
                questions=[Question(id="q", prompt="Go?")],
                status="pending",
                created_at=AT,
            ),
            "turn_1",
            None,
        )
    harness.events.clear()


def _settled(harness: Harness) -> list[tuple[str, Any]]:
    """Each event with what it settled: a wait's id, a call's id and error type, a step."""
    out: list[tuple[str, Any]] = []
    for event in harness.events:
        payload = event.payload
        key = payload.get("request_id") or payload.get("form_id") or payload.get("step_id")
        if event.type == "session.tool.failed":
            key = (payload["call_id"], payload["error"]["type"])
        out.append((event.type, key))
    return out


async def test_a_stop_sweeps_waits_then_calls_children_first_then_the_step(tmp_path: Path) -> None:
    """A stop settles in one order: every wait revoked, every call failed (nested first), the step."""
    async with open_harness(tmp_path) as harness:
        await _mid_turn(harness)
        async with harness.store.transaction() as tx:
            settlement.sweep(tx, "ses_1", "turn_1", Interrupt.by_person("api"), tools=harness.turn.tools)
        assert _settled(harness) == [
            ("permission.revoked", "per_1"),
            ("form.revoked", "frm_1"),
            ("session.tool.failed", ("c1.1", "interrupted")),
            ("session.tool.failed", ("c1", "interrupted")),
            ("session.tool.failed", ("c2", "interrupted")),
            ("session.step.failed", "step_1"),
        ]


async def test_a_shutdown_keeps_a_top_level_call_waiting_on_a_person(tmp_path: Path) -> None:
    """The question call and its form stay for the restore; the nested call's wait cannot (its script
    dies with the process), so it is revoked before its call fails."""
    async with open_harness(tmp_path) as harness:
        await _mid_turn(harness)
        async with harness.store.transaction() as tx:
            settlement.sweep(tx, "ses_1", "turn_1", Shutdown.of_coordinator(), tools=harness.turn.tools)
        assert _settled(harness) == [
            ("permission.revoked", "per_1"),
            ("session.tool.failed", ("c1.1", "interrupted")),
            ("session.tool.failed", ("c1", "interrupted")),
            ("session.step.failed", "step_1"),
        ]
        call = harness.store.read.get_tool_call("ses_1", "c2")
        assert call is not None and call.status == "running"


async def test_recovery_settles_through_the_same_sweep_in_the_same_order(tmp_path: Path) -> None:
    """What a dead process left settles as a live stop would, children first, as interrupted by the
    restart; the call waiting on a person is kept and handed back for its restore."""
    async with open_harness(tmp_path) as harness:
        await _mid_turn(harness)
        async with harness.store.transaction() as tx:
            recovered = settlement.recover(tx, "ses_1", "turn_1", tools=harness.turn.tools)
        assert _settled(harness) == [
            ("permission.revoked", "per_1"),
            ("session.tool.failed", ("c1.1", "interrupted")),
            ("session.tool.failed", ("c1", "interrupted")),
            ("session.step.failed", "step_1"),
        ]
        assert [(call.call_id, request) for call, request in recovered.restorable] == [("c2", None)]
        assert recovered.sub_agents == []
        failed = harness.store.read.get_tool_call("ses_1", "c1")
        assert failed is not None and failed.error is not None
        assert failed.error.message == settlement.RESTART_ERROR.message
        revoked = harness.store.read.get_permission("per_1")
        assert revoked is not None and revoked.reason == Failure.restarted()


async def test_an_execute_call_settled_by_the_sweep_keeps_its_finished_nested_calls(tmp_path: Path) -> None:
    """Seed 002: the partial result of a swept execute call lists what its script had finished."""
    async with open_harness(tmp_path) as harness:
        await _mid_turn(harness)
        async with harness.store.transaction() as tx:
            tx.insert_tool_call(_call("c1.2", "shell", parent="c1"), AT)
            tx.settle_tool_call("ses_1", "c1.2", output={"exit_code": 0, "stdout": "hi\n"})
            settlement.sweep(tx, "ses_1", "turn_1", Interrupt.by_person("api"), tools=harness.turn.tools)
        failed = harness.store.read.get_tool_call("ses_1", "c1")
        assert failed is not None and failed.partial is not None
        assert [(c.call_id, c.status) for c in failed.partial.calls] == [("c1.2", "succeeded")]


async def test_a_decline_fails_the_declined_call_and_its_script_declined_and_their_siblings_interrupted(
    tmp_path: Path,
) -> None:
    """The model must learn which call the person declined: that one and the execute call that made
    it fail ``declined``; a sibling was only stopped because of it, so it fails ``interrupted``."""
    async with open_harness(tmp_path) as harness:
        await _mid_turn(harness)
        async with harness.store.transaction() as tx:
            assert tx.reply_permission("per_1", "reject", None)
            settlement.sweep(tx, "ses_1", "turn_1", Declined.by_permission("c1.1"), tools=harness.turn.tools)
        assert _settled(harness) == [
            ("form.revoked", "frm_1"),
            ("session.tool.failed", ("c1.1", "declined")),
            ("session.tool.failed", ("c1", "declined")),
            ("session.tool.failed", ("c2", "interrupted")),
            ("session.step.failed", "step_1"),
        ]


async def test_recovery_never_restores_a_call_that_had_finished(tmp_path: Path) -> None:
    """A resume restores only what was still unsettled: a question answered and its call succeeded
    before the crash must not ask or run again, though its form reads as submitted."""
    async with open_harness(tmp_path) as harness:
        await _mid_turn(harness)
        async with harness.store.transaction() as tx:
            assert tx.settle_form("frm_1", "submitted", answers={"q": "yes"})
            tx.settle_tool_call("ses_1", "c2", output={"q": "yes"})
        harness.events.clear()
        async with harness.store.transaction() as tx:
            recovered = settlement.recover(tx, "ses_1", "turn_1", tools=harness.turn.tools)
        assert (recovered.restorable, recovered.sub_agents) == ([], [])
        assert _settled(harness) == [
            ("permission.revoked", "per_1"),
            ("session.tool.failed", ("c1.1", "interrupted")),
            ("session.tool.failed", ("c1", "interrupted")),
            ("session.step.failed", "step_1"),
        ]
        finished = harness.store.read.get_tool_call("ses_1", "c2")
        assert finished is not None and (finished.status, finished.output) == ("succeeded", {"q": "yes"})


async def test_a_failed_step_settles_after_every_call_it_left_unsettled(tmp_path: Path) -> None:
    """Children before parents: a client never sees a step failed while one of its calls still
    runs (the step's own settlement, when its calls' actors could not settle them)."""
    async with open_harness(tmp_path) as harness:
        async with harness.store.transaction() as tx:
            tx.insert_step("step_1", "ses_1", "turn_1", AT)
            for call in (_call("c1", "execute"), _call("c2", "shell"), _call("c1.1", "shell", parent="c1")):
                tx.insert_tool_call(call, AT)
        harness.events.clear()
        async with harness.store.transaction() as tx:
            settlement.fail_step(
                tx, "ses_1", "turn_1", "step_1", Interrupt.by_person("api"), tools=harness.turn.tools
            )
        assert _settled(harness) == [
            ("session.tool.failed", ("c1.1", "interrupted")),
            ("session.tool.failed", ("c1", "interrupted")),
            ("session.tool.failed", ("c2", "interrupted")),
            ("session.step.failed", "step_1"),
        ]
