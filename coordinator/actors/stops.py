"""The stop arbiter: every decision that stops a turn passes here, and only here.

A turn stops for the first reason decided, once. Whoever decides (a person's interrupt, reject or
dismissal; a deadline; the model's failure; an internal error; a sub-agent's decline; the parent's
stop coming down to a sub-agent; the coordinator's shutdown), the same rules apply, in this module:

- **First wins.** A turn that already has a reason, or is settling, takes no other: the later decision
  changes nothing and its caller learns so (an interrupt answers ``false``).
- **Intent before effect.** A reason that ends the turn (every reason but a shutdown) is committed as
  the turn's stop intent, in the same transaction as the decision that caused it, before any task is
  cancelled: a crash in between still ends the turn as decided, never as a resume. In the store the
  intent is a compare-and-set (``record_stop_intent``), so of two processes deciding at once exactly
  one wins there too.
- **Then the cancellation.** The live turn's handle records the typed reason, then cancels its scope
  (``ActorHandle.stop``): every actor below reads why it is torn down.
- **A shutdown decides nothing durable.** It suspends the turn. A person's decision committed
  meanwhile (by another process; this one refuses decisions once it closes) wins at the settlement
  (``settle_reason``): the turn ends as the person said, never resumes. The turn's own stops (a
  deadline firing while its actors are torn down) do not: they decide nothing (chaos F13).

The rest of the code never calls ``ActorHandle.stop`` on a turn or ``record_stop_intent`` itself.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

from coordinator.actors.context import Runtime, TurnScope
from coordinator.actors.handle import ActorHandle
from coordinator.errors import Fenced, ToolFailure
from coordinator.logs import get_logger
from coordinator.reasons import Failure, ParentLink, Shutdown, StopReason, from_parent
from coordinator.statuses import TurnStatus
from coordinator.store import Transaction
from coordinator.store.rows import TurnRow

log = get_logger(__name__)


def admits(live: TurnScope | None) -> bool:
    """Whether a new stop may still be decided for a turn, as this process sees it running: the rule
    of first-wins and of the settling cut-off, in one place.

    A turn that already stops for a reason (a shutdown's suspension included: this process refuses
    decisions once it closes) or is settling takes no other. A turn no actor of this process runs
    (another process's, a parked one) admits one as far as this process knows: the store's
    compare-and-set decides then, and a decision committed there during a shutdown wins at the
    settlement (``settle_reason``).
    """
    return live is None or (not live.settling and live.handle.reason is None)


async def decide(turn: TurnScope, reason: StopReason) -> bool:
    """A stop the turn decides itself (a deadline, the model's failure, a decline read back from the
    store, a sub-agent's decline): commit its intent, then cancel the turn. Returns False, changing
    nothing, when another stop came first.

    **Cancellation:** may be cancelled before the intent's transaction begins; the intent is committed
    atomically or not at all.

    **Raises:** ``Fenced`` when the claim was taken over; ``StoreError`` when the intent cannot be
    committed (nothing is cancelled then: see ``failing_on_error``).
    """
    if not admits(turn):
        return False
    if not reason.resumable:
        # Checked again in the transaction: another stop may have come since. On SQLite the body
        # runs inline, so nothing comes between it and the handle's stop: the intent committed is
        # the reason the actors stop with. On PostgreSQL a stop of this process that records no
        # intent (a shutdown) may land while the commit is out; the settlement reads the intent
        # then (``settle_reason``), and it wins over the suspension.
        decided = functools.partial(decide_in, turn_id=turn.turn_id, reason=reason, live=turn)
        if await turn.journal.write(decided) is None:
            return False
    return turn.handle.stop(reason)


def decide_in(
    tx: Transaction, turn_id: str, reason: StopReason, *, live: TurnScope | None
) -> StopReason | None:
    """Inside the transaction of the decision that stops the turn (a reject, a dismissal, an
    interrupt): record the stop's intent if the turn still takes a stop. ``live`` is the turn as this
    process runs it (None: it runs nowhere here). Returns the reason to ``apply`` once the
    transaction committed, or None when another stop came first.
    """
    if not admits(live):
        return None
    if reason.resumable:
        return reason
    if not tx.record_stop_intent(turn_id, reason):
        return None
    # Its caller waits for the intent to be durable; the disk syncs it while the turn is torn down.
    tx.sync_soon()
    return reason


def soft_stop_due(tx: Transaction, turn: TurnScope, soft: StopReason) -> StopReason | None:
    """At the turn's step boundary, inside the transaction that would start the next step: the soft
    stop recorded for the turn takes effect, its intent committed as the turn's stop (first wins: None
    when another stop came first). ``apply`` it once committed.

    Until its boundary a soft stop holds no stop slot: the step and its calls finish, their waits
    stay open, and a stop that takes effect at once (a plain interrupt, a decline, a deadline) is
    decided as usual and wins.
    """
    return decide_in(tx, turn.turn_id, soft, live=turn)


def apply(runtime: Runtime, turn_id: str, reason: StopReason) -> None:
    """Cancel the live turn (if this process runs it) for ``reason``, whose intent is committed.

    A turn another process runs applies it there (``apply_committed``, from its watch).
    """
    live = runtime.turns.get(turn_id)
    if live is not None:
        live.handle.stop(reason)


def apply_committed(live: TurnScope, row: TurnRow | None) -> None:
    """Apply to a live turn a stop another process (or a crashed predecessor) committed for it."""
    if (
        live.handle.reason is None
        and row is not None
        and row.status == TurnStatus.STOPPING
        and row.stop_reason
    ):
        live.handle.stop(row.stop_reason)


def shut_down(turn: TurnScope) -> None:
    """Suspend the turn: the coordinator shuts down. The only stop that records no intent."""
    turn.handle.stop(Shutdown.of_coordinator())


def abandon(turn: TurnScope) -> None:
    """Tear the turn down unsettled: the coordinator is abandoned and its store refuses writes."""
    turn.handle.stop(Failure.abandoned())


def forward_from_parent(child: TurnScope, parent: ActorHandle, link: ParentLink) -> None:
    """A sub-agent's turn stops because its parent's task call is stopping: with the parent's reason
    and ``parent`` naming the call. The parent's intent is durable; the child records none."""
    child.handle.stop(from_parent(parent.reason_or_failure(), link))


@contextlib.contextmanager
def failing_on_error(turn: TurnScope, what: str) -> Iterator[None]:
    """Turn an unexpected exception into a typed stop *before* it cancels sibling actors.

    The failure records no intent: the store may be what failed. A tool's own failure
    (``ToolFailure``) is expected and passes through untouched. ``Fenced`` (alone or in a nursery's
    group) means the claim was taken over: the turn stops as ``Failure.claim_lost()``, logged at
    info, and the session actor leaves the turn to its new owner, writing nothing.
    """
    try:
        yield
    except ToolFailure:
        raise
    except Exception as exc:
        if _fenced(exc):
            # The claim was taken over: the siblings are torn down with that reason (they write
            # nothing, every write being fenced), and Fenced reaches the session actor, which leaves.
            if turn.handle.stop(Failure.claim_lost()):
                log.info("turn_taken_over", actor=what)
        elif turn.handle.stop(Failure.internal(exc, what)):
            log.error("actor_failed", actor=what, exc_info=exc)
        raise


def _fenced(exc: BaseException) -> bool:
    """Whether ``exc`` is ``Fenced``, or a nursery's group of exceptions holding one."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_fenced(inner) for inner in exc.exceptions)
    return isinstance(exc, Fenced)


def failed_turn(turn: TurnScope, exc: Exception) -> StopReason:
    """The reason of a turn whose actors raised ``exc`` to the turn itself: the reason they were
    already stopping for (``failing_on_error`` records it first), else an internal failure."""
    return turn.handle.reason or Failure.internal(exc)


def sub_agent_reason(sub_turn: TurnRow, stopped_for: StopReason | None, link: ParentLink) -> StopReason:
    """The reason a sub-agent's turn left unsettled by its task call (a crash, a failed commit)
    settles with: its own committed stop if it has one, else the call's stop with ``parent`` naming
    the call, else (the call ended without a stop, and the sub-agent's settlement was lost) a failure
    of its own."""
    if sub_turn.status == TurnStatus.STOPPING and sub_turn.stop_reason is not None:
        return sub_turn.stop_reason
    if stopped_for is not None:
        return from_parent(stopped_for, link)
    return Failure.sub_agent_orphaned(link.call_id)


def settle_reason(tx: Transaction, turn_id: str, reason: StopReason | None) -> StopReason | None:
    """The reason a turn settles with, read in its settlement's transaction (None: succeeded).

    A stop committed as the turn's intent wins over whatever the actors stopped with that recorded
    none: over a shutdown (a decline committed while a shutdown suspends the turn ends it declined,
    never resumed), over a success (an interrupt committed as the last step finished), and over a
    local failure or a parent's stop that another process's committed decision came before (that
    process has answered its client already: ``{interrupted: true}``). When the actors stopped for
    the intent itself, the two are the same reason.
    """
    return tx.stop_intent(turn_id, expected=reason) or reason


def recovered(row: TurnRow, max_resumes: int) -> StopReason | None:
    """The stop a turn found unfinished at a start settles with instead of resuming, if any: one
    decided before the crash or shutdown (a soft stop included: ``commit_found_soft_stop``), or
    ``max_resumes`` reached."""
    if row.status == TurnStatus.STOPPING:
        assert row.stop_reason is not None
        return row.stop_reason
    if row.soft_stop is not None:
        return row.soft_stop  # resumed never: its boundary is now
    if row.resumes >= max_resumes:
        return Failure.resumes_exhausted(row.resumes)
    return None


async def commit_found_soft_stop(turn: TurnScope, row: TurnRow) -> None:
    """A soft stop found at a takeover is due now (its boundary is the resume): its intent is
    committed, as at any boundary, before the turn settles as that stop. Nothing for any other row.

    **Raises:** ``Fenced``, ``StoreError``.
    """
    if row.status != TurnStatus.STOPPING and row.soft_stop is not None:
        await turn.journal.write(
            functools.partial(decide_in, turn_id=row.id, reason=row.soft_stop, live=None)
        )
