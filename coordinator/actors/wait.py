"""The durable-wait actor: owns one wait on a person until it is answered or revoked.

A wait is a permission request (may this tool call run?) or a question form (the ``question`` tool).
The actor is one skeleton; what differs between the two is data, a ``WaitKind`` passed in
(``PermissionWait``, ``QuestionWait``): what is asked and stored, how a stored answer is read back,
the deadline's scope, what a restore publishes again, the span, the revocation.

It returns the person's answer and never a stop: an answer that stops the turn (a ``reject`` or a
dismissal without a message) is a stop the decision path commits and applies; a deadline is a stop
this actor decides itself (``Timeout(scope="permission" | "question")``). Either way the actor leaves
through its cleanup, which revokes the wait with the turn's reason (``permission.revoked``,
``form.revoked``) unless the reason is a shutdown and the call can be restored: then the wait stays
pending in the store, and the next start restores it with the same id.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

import attrs
import trio

from coordinator import clock, events, timeslice, tracing
from coordinator.actors import revocation, stops
from coordinator.actors.context import SETTLE_SECONDS, TurnScope, Waiter
from coordinator.actors.handle import ActorHandle
from coordinator.clock import now_rfc3339
from coordinator.events import Draft
from coordinator.ids import new_id
from coordinator.logs import get_logger
from coordinator.reasons import Declined, StopReason, Timeout
from coordinator.records import Decision, Form, PermissionRequest, Question
from coordinator.statuses import PENDING_WAIT, FormStatus, PermissionStatus
from coordinator.store import Reader, Transaction
from coordinator.store.rows import WaitRow
from coordinator.tools.base import ServerAsks
from coordinator.tracing import ActorSpan, Tracing

log = get_logger(__name__)

# What is stored and published for a wait, and what the wait returns.
Asked = TypeVar("Asked", PermissionRequest, Form)
Answer = TypeVar("Answer")

WaitScope = Literal["permission", "question"]


class WaitKind(Protocol[Asked, Answer]):
    """What one kind of wait asks, stores and publishes, and how its answer is read."""

    # The ``[timeouts]`` key of its deadline, and the scope of the ``Timeout`` it decides.
    scope: ClassVar[WaitScope]
    # The kind of the actor's handle, and the named await point of the live wait.
    actor: ClassVar[str]
    checkpoint: ClassVar[str]
    # The log line of a wait kept for the restore, and the key its id is logged under.
    kept_log: ClassVar[str]
    id_key: ClassVar[str]

    def answered_at_restore(self) -> Asked | None:
        """A kept wait answered while no wait was live, known before anything is opened."""

    def kept(self, tx: Transaction, session_id: str, call_id: str) -> Asked | None:
        """The kept wait of a restored call, pending or answered while no wait was live."""

    def new(self, session_id: str, call_id: str) -> Asked:
        """A new pending wait, not stored yet."""

    def insert(self, tx: Transaction, asked: Asked, turn_id: str, deadline_at: float | None) -> None: ...

    def asked(self, asked: Asked, *, restored: bool) -> Draft:
        """Its ``*.asked`` event (``restored`` when a restore publishes it again)."""

    def wait_row(self, read: Reader, asked: Asked) -> WaitRow | None: ...

    def answered(self, read: Reader, asked: Asked) -> Asked | None:
        """The wait as stored, if a person answered it already."""

    def answer_of(self, answered: Asked, wait: WaitRow | None) -> tuple[Answer, StopReason | None]:
        """The answer a stored settlement means, and the turn's stop it implies (a decline), if any."""

    def span(
        self, spans: Tracing, asked: Asked, source: ActorHandle
    ) -> contextlib.AbstractContextManager[ActorSpan]: ...

    def trace_answer(self, span: ActorSpan, answer: Answer) -> None: ...

    def revoke(self, tx: Transaction, asked: Asked, reason: StopReason) -> None:
        """Revoke the wait if it is still pending, with its ``*.revoked`` event."""


async def run(
    turn: TurnScope,
    parent: ActorHandle,
    kind: WaitKind[Asked, Answer],
    *,
    call_id: str,
    restorable: bool,
) -> Answer:
    """Ask a person (or, after a restart, ask again) for the call ``call_id``, and wait for the answer.

    Returns the answer: a permission's ``Replied``, a question's settled ``Form`` (``submitted`` with
    answers, or ``cancelled`` with a feedback message). An answer that landed while no wait was live
    is applied as it is, never asked again.

    **Cancellation:** the wait is revoked with the turn's reason (one ``*.revoked`` event), or kept
    pending for a shutdown when ``restorable`` (a top-level call, which the next start can restore);
    in a shielded scope bounded by ``SETTLE_SECONDS``.

    **Raises:** ``Fenced`` if the claim was taken over.
    """
    turn.waits.began(call_id)  # first: its row may be committed before anything else runs
    answered = kind.answered_at_restore()
    if answered is not None:
        # Answered while no wait was live (the turn suspended, or its owner dead): nothing to open.
        turn.waits.forget(call_id)
        wait = await turn.runtime.store.read(lambda reader: kind.wait_row(reader, answered))
        return await _answered_meanwhile(turn, kind, answered, wait)
    opened = await _open(turn, kind, call_id)
    asked = opened.asked
    handle = parent.child(kind.actor, asked.id)
    # A reply committed after the open's read and before this (by another node, on PostgreSQL)
    # resolves no waiter; the watch applies it (``decisions.apply_remote_decisions``).
    waiter = turn.runtime.waits.expect(asked.id)
    with kind.span(turn.runtime.tracing, asked, handle) as span, turn.waits.open(call_id):
        try:
            return await _wait(turn, kind, opened, waiter, span)
        except BaseException:
            with (
                turn.waits.settling(call_id),
                trio.move_on_after(SETTLE_SECONDS, shield=True),
            ):
                await _settle(turn, kind, handle, asked, restorable)
            raise
        finally:
            turn.runtime.waits.forget(asked.id)


@attrs.frozen
class _Opened(Generic[Asked]):
    """A wait as its opening transaction left it: the wait, its wall-clock deadline (a restored one
    keeps the deadline it was asked with), and an answer that landed while no wait was live."""

    asked: Asked
    deadline_at: float | None
    answered: Asked | None = None
    answered_wait: WaitRow | None = None


async def _open(turn: TurnScope, kind: WaitKind[Asked, Any], call_id: str) -> _Opened[Asked]:
    """Store the pending wait and publish it as asked, or publish a restored call's kept wait again;
    in the same transaction, read whether it was answered meanwhile."""
    limit = turn.runtime.config.timeouts.limit(kind.scope)
    asked = kind.new(turn.session_id, call_id)
    deadline_at = None if limit is None else clock.wall() + limit

    def open_wait(tx: Transaction) -> _Opened[Asked]:
        kept = kind.kept(tx, turn.session_id, call_id)
        if kept is None:
            kind.insert(tx, asked, turn.turn_id, deadline_at)
            tx.emit(kind.asked(asked, restored=False))
            return _Opened(asked, deadline_at)
        # A pending wait is shown again; one answered while no wait was live is returned as it is
        # by the wait (``_answered_meanwhile``), never asked again.
        if kept.status in PENDING_WAIT:
            tx.emit(kind.asked(kept, restored=True))
        wait = kind.wait_row(tx, kept)
        answered = kind.answered(tx, kept)
        answered_wait = None if answered is None else kind.wait_row(tx, answered)
        return _Opened(kept, None if wait is None else wait.deadline_at, answered, answered_wait)

    return await turn.journal.write(open_wait)


async def _wait(
    turn: TurnScope,
    kind: WaitKind[Asked, Answer],
    opened: _Opened[Asked],
    waiter: Waiter,
    span: ActorSpan,
) -> Answer:
    """The live wait: the answer, or the deadline, which stops the turn (``stops.decide``)."""
    if opened.answered is not None:
        meanwhile = await _answered_meanwhile(turn, kind, opened.answered, opened.answered_wait)
        kind.trace_answer(span, meanwhile)
        return meanwhile
    with trio.move_on_at(clock.trio_deadline(opened.deadline_at)) as timer:
        await turn.checkpoint(kind.checkpoint)
        answer: Answer = await waiter.wait()
        kind.trace_answer(span, answer)
        return answer
    assert timer.cancelled_caught
    # The configured value itself, as the reason has always carried it.
    limit = getattr(turn.runtime.config.timeouts, kind.scope)
    await stops.decide(turn, Timeout.deadline(kind.scope, limit))
    await timeslice.checkpoint()
    raise AssertionError(f"a stopped turn did not cancel its {kind.actor}")


async def _answered_meanwhile(
    turn: TurnScope, kind: WaitKind[Asked, Answer], answered: Asked, wait: WaitRow | None
) -> Answer:
    """An answer that landed while no wait was live (before this restore, or before this wait opened).

    A decline in it (no message) stops the turn, decided here: the person's decision was committed
    while no actor could apply it.
    """
    answer, decline = kind.answer_of(answered, wait)
    if decline is not None:
        await stops.decide(turn, decline)
        await timeslice.checkpoint()
    return answer


async def _settle(
    turn: TurnScope, kind: WaitKind[Asked, Any], handle: ActorHandle, asked: Asked, restorable: bool
) -> None:
    reason = handle.reason_or_failure()
    if reason.resumable and restorable:
        log.info(kind.kept_log, **{kind.id_key: asked.id}, reason=reason.type)
        return
    await turn.journal.settled(lambda tx: kind.revoke(tx, asked, reason))


@attrs.frozen
class Replied:
    """The person's answer: ``once``/``always`` let the call run; ``reject`` with a message is feedback."""

    decision: Decision
    message: str | None = None
    # ``once``/``always`` with the input the person changed the call's to (None: the model's).
    input: Any = None


@attrs.frozen(kw_only=True)
class PermissionWait:
    """May the call run ``action`` on ``resource``? Answered by a reply (``Replied``).

    ``restore``: a resumed call's kept request, asked again (pending) or applied (replied meanwhile).
    """

    scope: ClassVar[WaitScope] = "permission"
    actor: ClassVar[str] = "permission_wait"
    checkpoint: ClassVar[str] = "permission.wait"
    kept_log: ClassVar[str] = "permission_kept"
    id_key: ClassVar[str] = "request_id"

    action: str
    resource: str
    restore: PermissionRequest | None

    def answered_at_restore(self) -> PermissionRequest | None:
        return (
            self.restore
            if self.restore is not None and self.restore.status == PermissionStatus.REPLIED
            else None
        )

    def kept(self, tx: Transaction, session_id: str, call_id: str) -> PermissionRequest | None:
        # As it is now: a reply may have landed since the resume read it (another node's, say), and a
        # replied request must not be published as asked again.
        if self.restore is None:
            return None
        return tx.get_permission(self.restore.id) or self.restore

    def new(self, session_id: str, call_id: str) -> PermissionRequest:
        return PermissionRequest(
            id=new_id("per"),
            session_id=session_id,
            call_id=call_id,
            action=self.action,
            resource=self.resource,
            status=PermissionStatus.PENDING,
            created_at=now_rfc3339(),
        )

    def insert(
        self, tx: Transaction, asked: PermissionRequest, turn_id: str, deadline_at: float | None
    ) -> None:
        tx.insert_permission(asked, turn_id, deadline_at)

    def asked(self, asked: PermissionRequest, *, restored: bool) -> Draft:
        return events.permission_asked(asked, restored=restored)

    def wait_row(self, read: Reader, asked: PermissionRequest) -> WaitRow | None:
        return read.permission_wait_row(asked.id)

    def answered(self, read: Reader, asked: PermissionRequest) -> PermissionRequest | None:
        current = read.get_permission(asked.id)
        replied = (
            current is not None
            and current.status == PermissionStatus.REPLIED
            and current.decision is not None
        )
        return current if replied else None

    def answer_of(
        self, answered: PermissionRequest, wait: WaitRow | None
    ) -> tuple[Replied, StopReason | None]:
        message = None if wait is None else wait.message
        assert answered.decision is not None
        declined = answered.decision == "reject" and message is None
        decline = Declined.by_permission(answered.call_id) if declined else None
        replied = Replied(decision=answered.decision, message=message, input=answered.input)
        return replied, decline

    def span(
        self, spans: Tracing, asked: PermissionRequest, source: ActorHandle
    ) -> contextlib.AbstractContextManager[ActorSpan]:
        return spans.permission_wait(asked, source)

    def trace_answer(self, span: ActorSpan, answer: Replied) -> None:
        span.set(tracing.PERMISSION_DECISION, answer.decision)

    def revoke(self, tx: Transaction, asked: PermissionRequest, reason: StopReason) -> None:
        revocation.revoke_permission(tx, asked, reason)


@attrs.frozen(kw_only=True)
class QuestionWait:
    """The ``question`` tool's form of ``questions``. Answered by the settled form (``Form``).

    A restored call finds its kept form itself (the call's latest form that is not revoked).
    """

    scope: ClassVar[WaitScope] = "question"
    actor: ClassVar[str] = "question_form"
    checkpoint: ClassVar[str] = "form.wait"
    kept_log: ClassVar[str] = "form_kept"
    id_key: ClassVar[str] = "form_id"

    questions: list[Question]
    # An MCP server's question: the form names the server and keeps the schema of its answers.
    server_asks: ServerAsks | None = None

    def answered_at_restore(self) -> Form | None:
        return None

    def kept(self, tx: Transaction, session_id: str, call_id: str) -> Form | None:
        # A server asks one call many questions: only a call restored after a restart has one kept.
        if self.server_asks is not None and not self.server_asks.restoring:
            return None
        latest = tx.form_of_call(session_id, call_id, pending=False)
        return latest if latest is not None and latest.status != FormStatus.REVOKED else None

    def new(self, session_id: str, call_id: str) -> Form:
        return Form(
            id=new_id("frm"),
            session_id=session_id,
            call_id=call_id,
            questions=self.questions,
            status=FormStatus.PENDING,
            created_at=now_rfc3339(),
            source=None if self.server_asks is None else {"mcp": self.server_asks.server},
            schema=None if self.server_asks is None else self.server_asks.schema,
            prompt=None if self.server_asks is None else self.server_asks.prompt,
        )

    def insert(self, tx: Transaction, asked: Form, turn_id: str, deadline_at: float | None) -> None:
        resume = None if self.server_asks is None else self.server_asks.resume
        tx.insert_form(asked, turn_id, deadline_at, resume)

    def asked(self, asked: Form, *, restored: bool) -> Draft:
        return events.form_asked(asked, restored=restored)

    def wait_row(self, read: Reader, asked: Form) -> WaitRow | None:
        return read.form_wait_row(asked.id)

    def answered(self, read: Reader, asked: Form) -> Form | None:
        current = read.get_form(asked.id)
        return current if current is not None and current.status != FormStatus.PENDING else None

    def answer_of(self, answered: Form, wait: WaitRow | None) -> tuple[Form, StopReason | None]:
        dismissed = answered.status == FormStatus.CANCELLED and (wait is None or not wait.message)
        return answered, Declined.by_form(answered.call_id) if dismissed else None

    def span(
        self, spans: Tracing, asked: Form, source: ActorHandle
    ) -> contextlib.AbstractContextManager[ActorSpan]:
        return spans.question_wait(asked, source)

    def trace_answer(self, span: ActorSpan, answer: Form) -> None:
        span.set(tracing.FORM_STATUS, answer.status.value)

    def revoke(self, tx: Transaction, asked: Form, reason: StopReason) -> None:
        revocation.revoke_form(tx, asked, reason)
