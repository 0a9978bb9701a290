"""Revoking a wait (``coordinator/actors/revocation.py``): every path revokes a pending permission
request or form once, with one event, and leaves a settled one as it is, on a real SQLite file."""

from __future__ import annotations

from pathlib import Path

from coordinator.actors import revocation, settlement, wait
from coordinator.reasons import Interrupt, Timeout
from coordinator.records import Form, PermissionRequest, Question
from tests.actors.turn_harness import AT, Harness, open_harness

REQUEST = PermissionRequest(
    id="per_1",
    session_id="ses_1",
    call_id="c1",
    action="shell",
    resource="ls",
    status="pending",
    created_at=AT,
)
FORM = Form(
    id="frm_1",
    session_id="ses_1",
    call_id="c2",
    questions=[Question(id="q", prompt="Go?")],
    status="pending",
    created_at=AT,
)


async def _pending(harness: Harness) -> None:
    async with harness.store.transaction() as tx:
        tx.insert_permission(REQUEST, "turn_1", None)
        tx.insert_form(FORM, "turn_1", None)
    harness.events.clear()


async def test_a_wait_revoked_by_every_path_in_turn_is_revoked_once_with_one_event(tmp_path: Path) -> None:
    """A wait's own cleanup, its call's settlement and the turn's sweep may each reach the same wait:
    the first revokes it with its reason and event, the others find it settled and publish nothing,
    so a client sees one ``*.revoked`` and the reason of the stop that came first."""
    interrupt = Interrupt.by_person("api")
    async with open_harness(tmp_path) as harness:
        await _pending(harness)
        async with harness.store.transaction() as tx:
            wait.PermissionWait(action="shell", resource="ls", restore=None).revoke(tx, REQUEST, interrupt)
            wait.QuestionWait(questions=FORM.questions).revoke(tx, FORM, interrupt)
            later = Timeout.deadline("turn", 60)
            settlement.revoke_waits_of_call(tx, "ses_1", "c1", later)
            settlement.revoke_waits_of_call(tx, "ses_1", "c2", later)
            settlement.sweep(tx, "ses_1", "turn_1", later, tools=harness.runtime.tools)
        assert [(e.type, e.payload["reason"]) for e in harness.events] == [
            ("permission.revoked", {"type": "interrupt", "by": "api"}),
            ("form.revoked", {"type": "interrupt", "by": "api"}),
        ]
        request, form = harness.store.read.get_permission("per_1"), harness.store.read.get_form("frm_1")
        assert request is not None and (request.status, request.reason) == ("revoked", interrupt)
        assert form is not None and (form.status, form.reason) == ("revoked", interrupt)


async def test_an_answered_wait_is_left_answered(tmp_path: Path) -> None:
    """A reply or an answer that landed first wins: revoking it afterwards changes nothing and
    publishes nothing."""
    async with open_harness(tmp_path) as harness:
        await _pending(harness)
        async with harness.store.transaction() as tx:
            assert tx.reply_permission("per_1", "once", None)
            assert tx.settle_form("frm_1", "submitted", answers={"q": "yes"})
            revocation.revoke_permission(tx, REQUEST, Interrupt.by_person("api"))
            revocation.revoke_form(tx, FORM, Interrupt.by_person("api"))
        assert harness.events == []
        request, form = harness.store.read.get_permission("per_1"), harness.store.read.get_form("frm_1")
        assert request is not None and (request.status, request.decision) == ("replied", "once")
        assert form is not None and (form.status, form.answers) == ("submitted", {"q": "yes"})
