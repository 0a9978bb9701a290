"""The question-form actor: owns one pending form until it is submitted, cancelled or revoked.

Like the permission wait, it returns the person's answer and never a stop: a dismissal without a
message is a stop the dismiss path commits and applies (``Declined(via="question")``); the question
deadline is one this actor decides (``Timeout(scope="question")``). Its cleanup revokes the form with
the turn's reason (``form.revoked``), except for a shutdown, which keeps it pending for the next start.
"""

from __future__ import annotations

import structlog
import trio

from actors import stops
from actors.context import SETTLE_SECONDS, TurnScope
from actors.handle import ActorHandle
from coordinator import clock, events, tracing
from coordinator.clock import now_rfc3339
from coordinator.ids import new_id
from coordinator.reasons import Declined, Timeout
from coordinator.records import Form, Question

log = structlog.get_logger()


async def run(
    turn: TurnScope, parent: ActorHandle, *, call_id: str, questions: list[Question], restorable: bool
) -> Form:
    """Show a form (or, after a restart, show its pending form again) and wait for the answer.

    Returns the settled form: ``submitted`` with answers, or ``cancelled`` with a feedback message.

    **Cancellation:** the form is revoked with the turn's reason (one ``form.revoked``), or kept pending
    for a shutdown; shielded, bounded by ``SETTLE_SECONDS``.
    """
    form, deadline = await _open(turn, call_id=call_id, questions=questions)
    handle = parent.child("question_form", form.id)
    waiter = turn.runtime.waits.expect(form.id)
    with turn.runtime.tracing.question_wait(form, handle) as span, turn.wait_opened(call_id):
        try:
            current = turn.runtime.store.read.get_form(form.id)
            if current is not None and current.status != "pending":
                settled = await _already_settled(turn, current)
                span.set(tracing.FORM_STATUS, settled.status)
                return settled
            with trio.move_on_at(deadline):
                await turn.checkpoint("form.wait")
                answered: Form = await waiter.wait()
                span.set(tracing.FORM_STATUS, answered.status)
                return answered
            limit = turn.runtime.config.timeouts.question
            await stops.decide(turn, Timeout.deadline("question", limit))
            await trio.lowlevel.checkpoint()
            raise AssertionError("a stopped turn did not cancel its question form")
        except BaseException:
            with (
                turn.settled_by_its_call_unless_done(call_id),
                trio.move_on_after(SETTLE_SECONDS, shield=True),
            ):
                await _settle(turn, handle, form, restorable)
            raise
        finally:
            turn.runtime.waits.forget(form.id)


async def _open(turn: TurnScope, *, call_id: str, questions: list[Question]) -> tuple[Form, float]:
    """Store the pending form and publish ``form.asked``, or re-publish a restored one.

    Returns the form and its trio deadline: a restored form keeps the deadline it was asked with.
    """
    limit = turn.runtime.config.timeouts.limit("question")
    async with turn.write() as tx:
        restored = tx.latest_form_of_call(turn.session_id, call_id)
        if restored is not None and restored.status != "revoked":
            # A restored call: a pending form is shown again; one answered while no wait was live is
            # returned as it is by the caller (``_already_settled``), never asked again.
            if restored.status == "pending":
                tx.emit(events.form_asked(restored, restored=True))
            wait = tx.form_wait_row(restored.id)
            return restored, clock.trio_deadline(None if wait is None else wait.deadline_at)
        form = Form(
            id=new_id("frm"),
            session_id=turn.session_id,
            call_id=call_id,
            questions=questions,
            status="pending",
            created_at=now_rfc3339(),
        )
        deadline_at = None if limit is None else clock.wall() + limit
        tx.insert_form(form, turn.turn_id, deadline_at)
        tx.emit(events.form_asked(form, restored=False))
    return form, clock.trio_deadline(deadline_at)


async def _already_settled(turn: TurnScope, form: Form) -> Form:
    """A settlement that landed while no wait was live (between a restart and this restore)."""
    wait = turn.runtime.store.read.form_wait_row(form.id)
    if form.status == "cancelled" and (wait is None or not wait.message):
        await stops.decide(turn, Declined.by_form(form.call_id))
        await trio.lowlevel.checkpoint()
    return form


async def _settle(turn: TurnScope, handle: ActorHandle, form: Form, restorable: bool) -> None:
    reason = handle.reason_or_failure()
    if reason.resumable and restorable:
        log.info("form_kept", form_id=form.id, reason=reason.type)
        return
    async with turn.write() as tx:
        if tx.settle_form(form.id, "revoked", reason=reason):
            tx.emit(events.form_revoked(form, reason))
