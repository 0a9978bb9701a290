"""The session actor: runs a session's turns in order, owns the claim, and settles each turn last.

A turn's life (stored as ``turns.status``)::

    queued ──> running ──> stopping ──> settled          (a stop's intent is committed first)
                  │  └───────────────> settled          (succeeded)
                  └──> suspended ──> running            (shutdown, then resumed at the next start)
    running, its owner dead ──> running                 (crash, resumed at the next start)

The session settles after all its children: one transaction sweeps whatever a child could not settle
(a cleanup that ran out of time), writes the terminal event, releases or suspends the claim by the
reason, and publishes ``session.idle`` (not after a shutdown).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import attrs
import structlog
import trio

from coordinator import events, timeslice
from coordinator.actors import settlement, step, stops, tool_call
from coordinator.actors.context import SETTLE_SECONDS, Runtime, Takeover, TurnScope
from coordinator.clock import now_rfc3339
from coordinator.errors import Fenced, StoreError
from coordinator.ids import new_id
from coordinator.logs import get_logger
from coordinator.reasons import Failure, StopReason, Timeout
from coordinator.statuses import TurnStatus
from coordinator.store import Transaction
from coordinator.store.rows import TurnRow

log = get_logger(__name__)

MAX_STEPS_PER_TURN = 100
RESTART_NOTE = (
    "The server restarted while you were working. Continue from where you left off without repeating "
    "completed work."
)


@attrs.define(eq=False)
class SessionHandle:
    """The registry's view of a live session actor."""

    session_id: str
    turn: TurnScope | None = None
    shutting_down: bool = False
    # How often a turn was queued for the session while this actor lived (``Registry.ensure_running``).
    # The actor's look for its next turn may read a snapshot taken before such a commit (on
    # PostgreSQL the read runs in a thread), so it looks again when this moved during the look.
    nudges: int = 0
    # The session's next turn as the transaction that queued it read it (a prompt's): the actor that
    # prompt starts runs it without a look of its own.
    queued: TurnRow | None = None
    # The actor stopped because the store refused a write: its turn is left as after a crash.
    store_failed: bool = False
    done: trio.Event = attrs.Factory(trio.Event)
    # Shielded: only ``shutdown`` (with a typed reason) stops a session, never an outer cancellation.
    scope: trio.CancelScope = attrs.Factory(lambda: trio.CancelScope(shield=True))

    def shutdown(self) -> None:
        """Suspend the running turn with reason shutdown and run no further turn."""
        self.shutting_down = True
        if self.turn is not None:
            stops.shut_down(self.turn)


async def run(runtime: Runtime, handle: SessionHandle, takeovers: dict[str, Takeover]) -> None:
    """Run the session's unfinished and queued turns, oldest first, then return.

    **Cancellation:** shielded from outer cancellation; ``handle.shutdown()`` suspends the running turn.
    """
    with handle.scope, structlog.contextvars.bound_contextvars(session_id=handle.session_id):
        try:
            # What a look for the next turn would find, known without one: the prompt's that started
            # this actor, then each settlement's (read in its transaction). None: look.
            queued = handle.queued
            known: Callable[[], TurnRow | None] | None = None if queued is None else lambda: queued
            nudges = handle.nudges
            while not handle.shutting_down:
                looked = known is None
                if known is None:
                    nudges = handle.nudges
                    turn = await runtime.store.read(lambda reader: reader.next_turn(handle.session_id))
                else:
                    # A scheduling point, as the look's read is: the chaos campaign's recorded runs
                    # replay by the order of checkpoints across sessions (design/chaos.md).
                    await trio.lowlevel.checkpoint()
                    turn, known = known(), None
                if turn is None:
                    if handle.nudges != nudges:
                        continue  # a turn queued since the look's snapshot: the read may have missed it
                    return  # leaves the registry in this same step: a later turn starts a new actor
                nudges = handle.nudges  # before the settlement's look
                ran = await _run_turn(runtime, handle, turn, takeovers.pop(turn.id, None))
                if ran is None:
                    if looked:
                        return
                    continue  # the turn known without a look moved on meanwhile: look
                known = ran.next_turn  # what the settlement read; None if it was not committed
        except Fenced as exc:
            log.warning("claim_lost", error=str(exc))
        except StoreError as exc:
            # What could not be written stays as the store has it, as after a crash: the registry
            # takes the session over once the store writes again (``Registry.retake_store_failed``).
            handle.store_failed = True
            log.error("session_store_failed", exc_info=exc)
        finally:
            handle.done.set()


async def _run_turn(
    runtime: Runtime, handle: SessionHandle, turn: TurnRow, takeover: Takeover | None
) -> TurnScope | None:
    """Run one turn to its settlement; returns its scope. None when the session must not go on
    (claim elsewhere)."""
    begun = await _begin(runtime, turn, takeover)
    if begun is None:
        return None
    scope, turn = begun
    handle.turn = scope
    if handle.shutting_down:
        stops.shut_down(scope)  # the shutdown arrived while this turn was starting
    try:
        await run_turn(runtime, scope, turn, takeover)
    finally:
        handle.turn = None
    return scope


async def run_turn(runtime: Runtime, scope: TurnScope, turn: TurnRow, takeover: Takeover | None) -> None:
    """Run a begun turn (its claim taken, its start published) to its one settlement.

    The session actor runs its turns so; a ``task`` call runs its sub-agent's turn so (coordinator/actors/task.py,
    through ``Runtime.run_turn``).

    **Cancellation:** stop it through ``scope.handle``; the settlement is shielded and bounded.
    """
    runtime.turns[turn.id] = scope
    resumed_after = None if takeover is None else takeover.after
    try:
        with (
            structlog.contextvars.bound_contextvars(turn_id=turn.id, session_id=turn.session_id),
            runtime.tracing.turn(turn.session_id, turn.id, scope.handle, resumed_after=resumed_after) as span,
        ):
            scope.span = span
            reason = await _execute(runtime, scope, turn, takeover)
            scope.settling = True  # from here on an interrupt answers false
            # A stop no handle decided (found stored at a takeover, or an actor's crash) is decided now.
            decided_at = scope.handle.stopped_at or time.perf_counter()
            with trio.move_on_after(SETTLE_SECONDS, shield=True) as settling:
                reason = await _settle(scope, reason)
                runtime.metrics.turn_settled(reason, decided_at)
            if settling.cancelled_caught:
                log.error("turn_settlement_timed_out", reason=None if reason is None else reason.type)
            span.settled(reason)
    finally:
        runtime.turns.pop(turn.id, None)
        _forget_texts(runtime, turn.id)


def _forget_texts(runtime: Runtime, turn_id: str) -> None:
    """Drop what is left of the turn's streamed texts once the turn settled (or could not)."""
    for step_id in [s for s, text in runtime.step_texts.items() if text.turn_id == turn_id]:
        del runtime.step_texts[step_id]


async def _begin(
    runtime: Runtime, turn: TurnRow, takeover: Takeover | None
) -> tuple[TurnScope, TurnRow] | None:
    """Take the claim and publish the turn's start (or resumption) in one transaction.

    Returns the scope and the turn as that transaction read it: another instance may have started,
    or even settled, the turn since it was read (design/model/README.md, finding 2).
    """
    if turn.status != TurnStatus.QUEUED and takeover is None:
        log.info("turn_left_to_its_owner", turn_id=turn.id, status=turn.status)
        return None
    begun = await runtime.store.write(functools.partial(_claim, runtime.instance_id, turn, takeover))
    if begun is None:
        return None
    turn, epoch = begun
    return TurnScope.of_claimed(runtime, turn.session_id, turn.id, epoch()), turn


def _claim(
    instance_id: str, read: TurnRow, takeover: Takeover | None, tx: Transaction
) -> tuple[TurnRow, Callable[[], int]] | None:
    """The claim's transaction: the turn as it reads now, and the claim's new epoch; None when the
    turn moved on, is parked, or its claim is held elsewhere.

    The turn is read under the session's lock: on PostgreSQL a read sees what was committed when it
    ran, so a turn read before the lock could be settled by the owner's commit the lock waited for
    (a frozen owner thawing), and then claimed and run a second time.
    """
    turn_id = read.id
    tx.hold_session(read.session_id)
    current = tx.queued_turn(read) if takeover is None else tx.get_turn(turn_id)
    if current is None or current.status not in _STARTABLE[takeover is not None]:
        log.info("turn_moved_on", turn_id=turn_id, status=None if current is None else current.status)
        return None
    if takeover is not None and tx.is_parked(turn_id):
        # Parked (resume = "manual") after this takeover was decided: only a resume releases it. (A
        # queued turn is never parked: only a turn that ran can be.)
        log.info("turn_left_parked", turn_id=turn_id)
        return None
    since = now_rfc3339()
    previous = None if takeover is None else takeover.previous_owner
    epoch = tx.acquire_claim_later(current.session_id, instance_id, since, takeover_from=previous)
    if epoch is None:
        log.info("claim_held_elsewhere", turn_id=turn_id)
        return None
    if takeover is None:
        tx.set_turn_status(turn_id, TurnStatus.RUNNING)
        message_id = new_id("msg")
        tx.insert_message(message_id, current.session_id, turn_id, "user", since)
        tx.add_text_part(message_id, current.prompt)
        tx.emit(events.turn_started(current.session_id, turn_id, current.prompt))
    return current, epoch


# The statuses a turn may still have when its claim is taken: queued for a start, unfinished for a
# takeover (a turn settled meanwhile must not be settled twice).
_STARTABLE = {
    False: frozenset({TurnStatus.QUEUED}),
    True: frozenset({TurnStatus.RUNNING, TurnStatus.STOPPING, TurnStatus.SUSPENDED}),
}


async def _execute(
    runtime: Runtime, scope: TurnScope, turn: TurnRow, takeover: Takeover | None
) -> StopReason | None:
    """Drive the turn; returns its stop reason, or None when it succeeded."""
    if takeover is not None:
        # A stop decided before the crash (or max_resumes reached): settle as that stop, never resume.
        recovered = stops.recovered(turn, runtime.config.server.max_resumes)
        if recovered is not None:
            await stops.commit_found_soft_stop(scope, turn)
            return recovered
    try:
        with scope.handle.scope:
            await scope.checkpoint("turn.start")
            async with trio.open_nursery() as nursery:
                scope.background = nursery
                limit = runtime.config.timeouts.limit("turn")
                if limit is not None:
                    nursery.start_soon(_turn_deadline, scope, limit)
                if takeover is not None:
                    await _resume(scope, takeover)
                await _drive(scope)
                nursery.cancel_scope.cancel(reason="turn finished: stop the deadline timer")
    except Exception as exc:
        fenced = _find(exc, Fenced)
        if fenced is not None:
            raise fenced from exc
        log.error("turn_failed", exc_info=exc)
        return stops.failed_turn(scope, exc)
    if scope.handle.scope.cancelled_caught:
        return scope.handle.reason_or_failure()
    return scope.handle.reason


def _find(exc: BaseException, kind: type[Fenced]) -> Fenced | None:
    """The ``kind`` exception in ``exc`` or in the exception groups nurseries wrapped it in."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find(inner, kind)
            if found is not None:
                return found
    return None


async def _turn_deadline(scope: TurnScope, limit: float) -> None:
    await trio.sleep(limit)
    # If the timeout's intent cannot be committed (the store fails), the turn still stops, with that
    # failure as its typed reason: the exception would otherwise cancel the turn's actors with none
    # (chaos F16).
    with stops.failing_on_error(scope, "the turn deadline"):
        await stops.decide(scope, Timeout.deadline("turn", limit))


async def _drive(scope: TurnScope) -> None:
    """Model steps until the model answers without asking for tools."""
    for _ in range(MAX_STEPS_PER_TURN):
        if not await step.run(scope):
            return
    await stops.decide(scope, Failure.too_many_steps(MAX_STEPS_PER_TURN))
    await timeslice.checkpoint()


async def _resume(scope: TurnScope, takeover: Takeover) -> None:
    """Continue a turn left by a shutdown or a crash: restore its waits, fail what was running.

    A stop decided while the turn was down (a reject of its kept request) wins: it is not resumed.
    """
    scope.resumed_after = takeover.after
    tools = scope.tools

    def resume(tx: Transaction) -> settlement.Recovered | TurnRow | None:
        if not tx.mark_resumed(scope.turn_id, takeover.after):
            return tx.get_turn(scope.turn_id)  # a stop was decided meanwhile
        tx.emit(events.execution_resumed(scope.session_id, scope.turn_id, takeover.after))
        # What the previous process left running settles as a live stop would settle it, in the
        # same order (settlement.sweep); what a start can continue is kept and restored below.
        recovered = settlement.recover(tx, scope.session_id, scope.turn_id, tools=tools)
        note_id = new_id("msg")
        tx.insert_message(note_id, scope.session_id, scope.turn_id, "user", now_rfc3339())
        tx.add_text_part(note_id, RESTART_NOTE)
        return recovered

    resumed = await scope.journal.write(resume)
    if not isinstance(resumed, settlement.Recovered):
        stops.apply_committed(scope, resumed)
        return
    recovered = resumed
    scope.waits.kept(call.call_id for call, _ in recovered.restorable)
    async with trio.open_nursery() as nursery:
        # Every kept call's actor starts, even when a stop arrives meanwhile: each settles its own
        # kept wait, and every call's failure waits for all of them (``WaitBook.settled``), so one
        # left unstarted would hold the others until their cleanup's bound. A start does not block:
        # an actor is started before its first await.
        with trio.CancelScope(shield=True):
            for call, request in recovered.restorable:
                # Asked again by the rules as they are now (a deny added meanwhile wins).
                restore = functools.partial(
                    tool_call.run, scope, scope.handle, call, restore=request, restored=True
                )
                await nursery.start(restore)
            for call in recovered.sub_agents:
                # A task call resumes its sub-agent's turn inside it (or reads how it ended): permitted
                # before the restart, so it asks no one again.
                await nursery.start(
                    functools.partial(tool_call.run, scope, scope.handle, call, permitted=True)
                )


async def _settle(scope: TurnScope, reason: StopReason | None) -> StopReason | None:
    """The session's own settlement, last of all, in one transaction. Returns the reason it settled
    with (None: succeeded).

    A stop whose intent was committed wins over what the actors settled with: a decline committed
    while a shutdown was suspending the turn ends the turn declined, never resumed.
    """
    await scope.checkpoint("settle.turn")
    texts = {
        step_id: text.unrecorded()
        for step_id, text in scope.runtime.step_texts.items()
        if text.turn_id == scope.turn_id
    }
    tools = scope.tools

    def settle(tx: Transaction) -> tuple[StopReason | None, Callable[[], TurnRow | None]]:
        settled_as = stops.settle_reason(tx, scope.turn_id, reason)
        if settled_as is None:
            tx.emit(events.execution_succeeded(scope.session_id, scope.turn_id))
            _finish(tx, scope, "succeeded")
        else:
            settlement.sweep(tx, scope.session_id, scope.turn_id, settled_as, texts, tools=tools)
            settlement.end_turn(tx, scope.session_id, scope.turn_id, settled_as)
        # The session actor's look for its next turn, read here rather than in a read of its own.
        return settled_as, tx.next_turn_later(scope.session_id)

    settled, scope.next_turn = await scope.journal.settle_turn(settle)
    if settled is None:
        log.info("turn_succeeded")
    else:
        log.info("turn_stopped", reason=settled.type)
    return settled


def _finish(tx: Transaction, scope: TurnScope, outcome: str) -> None:
    settlement.finish_turn(tx, scope.session_id, scope.turn_id, outcome, None)
