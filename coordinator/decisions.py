"""What people decide: prompts, interrupts, permission replies and form answers.

A decision that stops a turn (an interrupt, a ``reject``, a dismissal) is committed in the same
transaction as the turn's stop intent, before any task is cancelled; a crash in between still ends
the turn as the decision said. Only after the commit is the running turn (if it runs in this process)
cancelled with the typed reason.

Each decision's transaction holds its session's lock (``Transaction.hold_session``) before it reads:
on PostgreSQL it then runs wholly before or wholly after each of the owner's fenced transactions, as
every write does on SQLite. A reply can then never land between the owner's read of a restored wait
and that wait's ``permission.asked`` again, which would show the person an answered dialog as open.
"""

from __future__ import annotations

from typing import Any, cast

import attrs

from coordinator import edited_inputs, errors, events, permissions, wire
from coordinator.actors import steers, stops, wait
from coordinator.actors.context import Runtime
from coordinator.clock import now_rfc3339
from coordinator.ids import new_id
from coordinator.logs import get_logger
from coordinator.mcp.questions import convert_answers
from coordinator.reasons import Declined, Interrupt, StopReason
from coordinator.records import MAX_TEXT, MAX_TITLE, Decision, Form, PermissionRequest, Session, Settlement
from coordinator.statuses import ClaimState, FormStatus, PermissionStatus, TurnStatus
from coordinator.store import Reader, Transaction
from coordinator.store.rows import TurnRow

log = get_logger(__name__)

DECISIONS = ("once", "always", "reject")


def _text(value: object, what: str, *, empty_ok: bool, limit: int = MAX_TEXT) -> str:
    """``value`` as text the store can keep (UTF-8: no lone surrogates). **Raises:** ``InvalidRequest``.

    A text that must not be empty may still be only white space: it is what the person sent, and
    the published schema of a body can say "not empty" (``minLength``) but not "not blank".
    """
    if not isinstance(value, str) or (not empty_ok and not value):
        raise errors.InvalidRequest(message=f"{what} must be a {'' if empty_ok else 'non-empty '}string")
    if len(value) > limit:
        raise errors.InvalidRequest(message=f"{what}: longer than {limit} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise errors.InvalidRequest(message=f"{what} is not valid UTF-8 text: {exc.reason}") from exc
    return value


def prompt_text(value: object) -> str:
    """A prompt's or a steer's text. **Raises:** ``InvalidRequest`` (not a string, empty, too long)."""
    return _text(value, "text", empty_ok=False)


async def create_session(runtime: Runtime, title: str, owner: str | None = None) -> Session:
    title = _text(title, "title", empty_ok=True, limit=MAX_TITLE)
    if owner is not None and not isinstance(owner, str):
        raise errors.InvalidRequest(message="owner must be a principal's name")
    session_id = new_id("ses")

    def create(tx: Transaction) -> Session:
        tx.insert_session(session_id, title, now_rfc3339(), owner=owner)
        session = tx.get_session(session_id)
        assert session is not None
        tx.emit(events.session_created(session))
        return session

    return await runtime.store.write(create)


async def queue_prompt(runtime: Runtime, session_id: str, text: str) -> str:
    """Queue a turn for ``text``; returns its id.

    **Raises:** ``SessionNotFound`` (checked first), ``InvalidRequest`` (empty text).
    """
    turn_id = new_id("turn")

    def queue(tx: Transaction) -> None:
        tx.hold_session(session_id)
        # Checked in the transaction: a delete committed since the caller looked wins, and a delete
        # after this one finds the queued turn (SessionBusy). Never a turn of a deleted session.
        existing_session(tx, session_id)
        tx.insert_turn(turn_id, session_id, prompt_text(text), now_rfc3339())

    await runtime.store.write(queue)
    return turn_id


async def delete_session(runtime: Runtime, session_id: str) -> list[str]:
    """Delete a session whose turns are all settled, with everything it owns and its sub-agent
    sessions at every depth (their ids are returned, the session's first). One transaction: it
    happens whole or not at all.

    **Raises:** ``SessionNotFound``; ``SessionBusy`` (nothing changed) while a turn of the session or
    of one of its sub-agents is queued, running, stopping or suspended, or a claim is still held.
    """

    def delete(tx: Transaction) -> tuple[list[str], int]:
        tx.hold_session(session_id)
        existing_session(tx, session_id)
        sessions = [session_id, *tx.descendants(session_id)]
        for each in sessions:
            _refuse_if_busy(tx, each, session_id)
        return sessions, sum(tx.delete_session(each) for each in reversed(sessions))

    sessions, deleted = await runtime.store.write(delete)
    log.info("session_deleted", session_id=session_id, sub_agents=len(sessions) - 1, events=deleted)
    return sessions


def _refuse_if_busy(tx: Transaction, session_id: str, deleting: str) -> None:
    statuses = tx.unsettled_turn_statuses(session_id)
    claim = tx.get_claim(session_id)
    if statuses or (claim is not None and claim.state != ClaimState.RELEASED):
        whose = "" if session_id == deleting else f" (its sub-agent {session_id!r})"
        raise errors.SessionBusy(
            message=f"session {deleting!r}{whose} has a turn that is not settled "
            f"({', '.join(statuses) or 'its claim is held'}); interrupt it first",
            session_id=deleting,
            turns=statuses,
        )


def existing_session(tx: Transaction, session_id: str) -> None:
    if not tx.session_exists(session_id):
        raise errors.SessionNotFound(message=f"no session {session_id!r}", session_id=session_id)


async def interrupt(
    runtime: Runtime,
    session_id: str,
    by: str,
    *,
    soft: bool = False,
    cancel_queued: bool = False,
    principal: str | None = None,
) -> bool:
    """Record an interrupt of the session's running turn, then cancel it. False if none to stop.

    ``soft``: the running step and its calls finish, and the turn stops at its next step boundary
    (``stops.soft_stop_due``); a parked turn has no step to finish and stops at once.
    ``cancel_queued``: every queued turn of the session is cancelled too, and every steer still
    pending for the running turn (each with its events), whether or not a turn was stopped.

    The turn may run in another process sharing the database: the intent is durable, and that
    process applies it (``apply_remote_decisions``; a soft stop is read at the boundary itself).
    """
    if by not in ("api", "embedder"):
        raise errors.InvalidRequest(message=f"interrupt 'by' must be api or embedder, not {by!r}")
    reason = Interrupt.by_person(by, soft=soft, principal=principal)  # type: ignore[arg-type]

    running_here = runtime.live_turn_of(session_id)

    def decide(tx: Transaction) -> tuple[str | None, StopReason | None, bool]:
        tx.hold_session(session_id)
        existing_session(tx, session_id)
        # A parked turn (resume = "manual") is interruptible too: it then settles as interrupted.
        turn = tx.interruptible_turn_status(
            session_id, None if running_here is None else running_here.turn_id
        )
        if cancel_queued:
            _cancel_every_queued(tx, session_id, None if turn is None else turn[0])
        if turn is None:
            return None, None, False
        turn_id, status = turn
        live = runtime.turns.get(turn_id)
        if soft and status == TurnStatus.RUNNING:
            # Recorded for the boundary, nothing cancelled now (a parked turn has no step to finish).
            return turn_id, None, stops.admits(live) and tx.record_soft_stop(turn_id, reason)
        return turn_id, stops.decide_in(tx, turn_id, reason, live=live), False

    turn_id, stop, soft_recorded = await runtime.store.write(decide)
    if soft_recorded:
        log.info("soft_stop_recorded", session_id=session_id, by=by)
        return True
    if turn_id is None or stop is None:
        return False
    stops.apply(runtime, turn_id, stop)
    log.info("interrupt_recorded", session_id=session_id, turn_id=turn_id, by=by, soft=soft)
    return True


def _cancel_every_queued(tx: Transaction, session_id: str, running: str | None) -> list[str]:
    """Inside an interrupt's transaction: cancel every queued turn of the session, and the steers
    still pending for its running turn (each queued, then cancelled, with its events)."""
    if running is not None:
        steers.queue_pending(tx, running)
    cancelled = []
    for turn in tx.queued_turns(session_id):
        if tx.cancel_queued_turn(turn.id):
            tx.emit(events.turn_cancelled(session_id, turn.id))
            cancelled.append(turn.id)
    return cancelled


async def reply_permission(
    runtime: Runtime,
    session_id: str,
    request_id: str,
    decision: str,
    message: str | None,
    edited_input: Any = None,
    principal: str | None = None,
) -> PermissionRequest:
    """Answer a permission request; ``edited_input`` (with ``once`` or ``always``): the call runs
    with it instead of the model's input, checked against the tool's input schema first."""
    if decision not in DECISIONS:
        raise errors.InvalidRequest(message=f"decision must be one of once, always, reject; got {decision!r}")
    if message is not None and not isinstance(message, str):
        raise errors.InvalidRequest(message="message must be a string")
    if decision == "reject":
        edited_input = None  # a declined call runs with no input: one sent with the reject means nothing
    # An empty message is no message: a reject without one is a declined stop, everywhere it is read
    # (here, and by a restored wait reading the stored reply back).
    message = message or None

    def reply(tx: Transaction) -> tuple[PermissionRequest, str, list[PermissionRequest], StopReason | None]:
        refuse_if_closing(runtime)
        tx.hold_session(session_id)
        request = _pending_request(tx, session_id, request_id)
        if edited_input is not None:
            edited_inputs.check(runtime.tools.for_session(session_id), request.action, edited_input)
        turn_id = _wait_turn(tx, request_id)
        if (stopping := _stop_of(tx, turn_id)) is not None:
            raise errors.PermissionAlreadySettled(
                message=f"permission request {request_id!r} is revoked: its turn is stopping",
                request_id=request_id,
                settlement=_revoked_for(stopping),
            )
        if not tx.reply_permission(request_id, decision, message, edited_input):
            # Settled since it was read, by a transaction the store ran alongside this one
            # (PostgreSQL); the compare-and-set decides, and this one answers as a late reply does.
            _pending_request(tx, session_id, request_id)
        if edited_input is not None:
            tx.set_edited_input(session_id, request.call_id, edited_input)
        # It was pending as read, and this reply settled it.
        replied = attrs.evolve(
            request, status=PermissionStatus.REPLIED, decision=cast(Decision, decision), input=edited_input
        )
        tx.emit(events.permission_replied(replied, principal))
        also = _apply_always(runtime, tx, replied, principal) if decision == "always" else []
        stop = None
        if decision == "reject" and message is None:
            declined = Declined.by_permission(request.call_id)
            stop = stops.decide_in(tx, turn_id, declined, live=runtime.turns.get(turn_id))
        return replied, turn_id, also, stop

    replied, turn_id, also, stop = await runtime.store.write(reply)
    runtime.waits.resolve(request_id, _replied(decision, message, edited_input))
    for other in also:
        runtime.waits.resolve(other.id, _replied("always", None))
    if stop is not None:
        stops.apply(runtime, turn_id, stop)
    return replied


def _replied(decision: str, message: str | None, edited_input: Any = None) -> wait.Replied:
    return wait.Replied(decision=decision, message=message, input=edited_input)  # type: ignore[arg-type]


def refuse_if_closing(runtime: Runtime) -> None:
    """Inside the decision's transaction: between it and the stop it implies nothing awaits, so a
    decision either lands before a shutdown suspends the turn or is refused (the wait is kept and
    answered after the restart)."""
    if runtime.closing:
        raise errors.CoordinatorClosed(message="the coordinator is shutting down")


async def resume(runtime: Runtime, session_id: str) -> TurnRow:
    """Release the session's parked turn for its resume (its takeover comes next); returns it.

    **Raises:** ``NothingToResume`` when no turn of the session is parked; ``CoordinatorClosed``.
    """

    def release(tx: Transaction) -> TurnRow:
        refuse_if_closing(runtime)
        tx.hold_session(session_id)
        turn = tx.parked_turn(session_id)
        if turn is None or not tx.release_parked(turn.id):
            raise errors.NothingToResume(
                message=f"session {session_id!r} has no suspended turn to resume", session_id=session_id
            )
        return turn

    turn = await runtime.store.write(release)
    log.info("resume_requested", session_id=session_id, turn_id=turn.id)
    return turn


def _pending_request(tx: Transaction, session_id: str, request_id: str) -> PermissionRequest:
    request = tx.get_permission(request_id)
    if request is None or request.session_id != session_id:
        raise errors.PermissionNotFound(
            message=f"no permission request {request_id!r} in session {session_id!r}", request_id=request_id
        )
    if request.status != PermissionStatus.PENDING:
        raise errors.PermissionAlreadySettled(
            message=f"permission request {request_id!r} is already {request.status}",
            request_id=request_id,
            settlement=wire.unstructure(request.settlement()),
        )
    return request


def _stop_of(tx: Transaction, turn_id: str) -> StopReason | None:
    """The stop committed for the wait's turn, if any: its waits are as good as revoked with that
    reason (their revocation may be deferred to the turn's settlement), so an answer is refused with
    the settlement it is about to get, never accepted and then ignored."""
    turn = tx.get_turn(turn_id)
    return turn.stop_reason if turn is not None and turn.status == TurnStatus.STOPPING else None


def _revoked_for(stopping: StopReason) -> Any:
    """The settlement a wait of a stopping turn is about to get, as a 409 reports it: its revocation
    with the stop's reason (written by the turn's settlement, ``coordinator/actors/revocation.py``)."""
    # A form's word for it is the same (``FormStatus.REVOKED``).
    return wire.unstructure(Settlement(status=PermissionStatus.REVOKED.value, reason=stopping))


def _wait_turn(tx: Transaction, request_id: str) -> str:
    row = tx.permission_wait_row(request_id)
    assert row is not None
    return row.turn_id


def _apply_always(
    runtime: Runtime, tx: Transaction, request: PermissionRequest, principal: str | None
) -> list[PermissionRequest]:
    """Add the session rule, then resolve every other pending request of the session it now allows."""
    tx.add_session_rule(request.session_id, permissions.always_rule(request.action, request.resource))
    session_rules = tx.session_rules(request.session_id)
    resolved = []
    for other in tx.pending_permissions(session_id=request.session_id):
        verdict = permissions.evaluate(runtime.config.permission, session_rules, other.action, other.resource)
        if verdict.effect == "allow" and tx.reply_permission(other.id, "always", None):
            now = tx.get_permission(other.id)
            assert now is not None
            tx.emit(events.permission_replied(now, principal))
            resolved.append(now)
    return resolved


async def submit_form(
    runtime: Runtime, session_id: str, form_id: str, answers: dict[str, Any], principal: str | None = None
) -> Form:

    def submit(tx: Transaction) -> Form:
        refuse_if_closing(runtime)
        tx.hold_session(session_id)
        form = _pending_form(tx, session_id, form_id)
        _refuse_if_form_stopping(tx, form_id)
        checked = _checked_answers(form, answers)
        if not tx.settle_form(form_id, FormStatus.SUBMITTED, answers=checked):
            _pending_form(tx, session_id, form_id)  # settled since it was read: answers 409
        submitted = tx.get_form(form_id)
        assert submitted is not None
        tx.emit(events.form_submitted(submitted, principal))
        return submitted

    submitted = await runtime.store.write(submit)
    runtime.waits.resolve(form_id, submitted)
    return submitted


async def dismiss_form(
    runtime: Runtime, session_id: str, form_id: str, message: str | None, principal: str | None = None
) -> Form:

    def dismiss(tx: Transaction) -> tuple[Form, str, StopReason | None]:
        refuse_if_closing(runtime)
        tx.hold_session(session_id)
        form = _pending_form(tx, session_id, form_id)
        turn_id = _refuse_if_form_stopping(tx, form_id)
        if not tx.settle_form(form_id, FormStatus.CANCELLED, message=message or None):
            _pending_form(tx, session_id, form_id)  # settled since it was read: answers 409
        cancelled = tx.get_form(form_id)
        assert cancelled is not None
        tx.emit(events.form_cancelled(cancelled, principal))
        stop = None
        if not message:
            stop = stops.decide_in(
                tx, turn_id, Declined.by_form(form.call_id), live=runtime.turns.get(turn_id)
            )
        return cancelled, turn_id, stop

    cancelled, turn_id, stop = await runtime.store.write(dismiss)
    runtime.waits.resolve(form_id, cancelled)
    if stop is not None:
        stops.apply(runtime, turn_id, stop)
    return cancelled


def _pending_form(tx: Transaction, session_id: str, form_id: str) -> Form:
    form = tx.get_form(form_id)
    if form is None or form.session_id != session_id:
        raise errors.FormNotFound(message=f"no form {form_id!r} in session {session_id!r}", form_id=form_id)
    if form.status != FormStatus.PENDING:
        raise errors.FormAlreadySettled(
            message=f"form {form_id!r} is already {form.status}",
            form_id=form_id,
            settlement=wire.unstructure(form.settlement()),
        )
    return form


def _refuse_if_form_stopping(tx: Transaction, form_id: str) -> str:
    """The form's turn; ``FormAlreadySettled`` (revoked, with the stop's reason) while it stops."""
    turn_id = _form_turn(tx, form_id)
    if (stopping := _stop_of(tx, turn_id)) is not None:
        raise errors.FormAlreadySettled(
            message=f"form {form_id!r} is revoked: its turn is stopping",
            form_id=form_id,
            settlement=_revoked_for(stopping),
        )
    return turn_id


def _form_turn(tx: Transaction, form_id: str) -> str:
    row = tx.form_wait_row(form_id)
    assert row is not None
    return row.turn_id


def _checked_answers(form: Form, answers: dict[str, Any]) -> dict[str, Any]:
    """The answers to store: a server's form's converted to its schema's types and checked by it;
    a ``question`` form's as given, each question answered with a string, options respected.

    **Raises:** ``InvalidRequest`` naming every question whose answer is refused.
    """
    if form.schema is not None:
        converted, problems = convert_answers(form.schema, answers)
        if problems:
            raise errors.InvalidRequest(message="; ".join(problems))
        return converted
    _validate_answers(form, answers)
    return answers


def _validate_answers(form: Form, answers: dict[str, Any]) -> None:
    """Every question answered with a string, no unknown id, options respected."""
    known = {q.id: q for q in form.questions}
    problems = [f"unknown question id {qid!r}" for qid in answers if qid not in known]
    for question in form.questions:
        answer = answers.get(question.id)
        if answer is None:
            problems.append(f"question {question.id!r} is not answered")
        elif not isinstance(answer, str):
            problems.append(f"the answer to {question.id!r} must be a string")
        elif question.options is not None and answer not in question.options:
            problems.append(f"the answer to {question.id!r} must be one of {question.options}")
    if problems:
        raise errors.InvalidRequest(message="; ".join(problems))


async def apply_remote_decisions(runtime: Runtime) -> None:
    """Apply what another process committed for the turns and waits that run here.

    Several coordinator processes may share a database: a reply or an interrupt may be committed by a
    process that does not run the turn. Its intent is durable; this makes it take effect here. One
    read of the store for every live turn and wait; applied on the trio thread.
    """
    turn_ids, wait_ids = list(runtime.turns), list(runtime.waits.by_id)
    rows, answers = await runtime.store.read(lambda reader: _committed_decisions(reader, turn_ids, wait_ids))
    for row in rows:
        live = runtime.turns.get(row.id)
        if live is not None:
            stops.apply_committed(live, row)
    for wait_id, answer in answers.items():
        runtime.waits.resolve(wait_id, answer)


def _committed_decisions(
    reader: Reader, turn_ids: list[str], wait_ids: list[str]
) -> tuple[list[TurnRow], dict[str, Any]]:
    """The live turns whose stop is committed, and the answers stored for live waits (a reply, a
    form's answer): a few statements however many turns and waits run here."""
    replied, settled = reader.decided_waits(wait_ids)
    answers: dict[str, Any] = {form.id: form for form in settled}
    answers |= {
        wait_id: _replied(decision, message, edited)
        for wait_id, (decision, message, edited) in replied.items()
    }
    return reader.stopping_turns(turn_ids), answers
