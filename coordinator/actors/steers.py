"""Steers: texts a person sends into a running turn, delivered at the turn's next step boundary.

The boundary is the start of a step: the previous step's tool calls have settled and the model is
about to be asked again. The transaction that starts the step delivers every pending steer of the
turn, oldest first, each as a user message of the turn with ``session.turn.steered``, so the
request that follows carries them (``deliver``). A steer is pending (accepted, durable) until then.

A steer whose turn ends before a boundary delivers it (the model answered without tools, a stop,
a shutdown that becomes a stop at the next start) becomes a queued turn of its own with
``session.turn.queued {from_steer}`` in the transaction that settles the turn (``queue_pending``);
one sent when no turn can take it becomes one at once. Each move is a compare-and-set from pending,
so a steer is delivered once or queued once, never both and never lost (design/steering.md).
"""

from __future__ import annotations

from coordinator import events
from coordinator.clock import now_rfc3339
from coordinator.ids import new_id
from coordinator.store import Transaction
from coordinator.store.rows import SteerRow


def deliver(tx: Transaction, session_id: str, turn_id: str, pending: list[SteerRow]) -> int:
    """Deliver the turn's ``pending`` steers (as read in this transaction) as user messages of the
    turn; returns how many."""
    delivered = 0
    for steer in pending:
        if not tx.deliver_steer(steer.id):
            continue
        message_id = new_id("msg")
        tx.insert_message(message_id, session_id, turn_id, "user", now_rfc3339())
        tx.add_text_part(message_id, steer.text)
        tx.emit(events.turn_steered(session_id, turn_id, steer.id, steer.text, steer.sent_by))
        delivered += 1
    return delivered


def queue_pending(tx: Transaction, turn_id: str) -> list[str]:
    """Queue every steer still pending for the turn (it ended, or stops) as a turn of its own, in
    the order they were sent; returns the new turns' ids."""
    return [queue_as_turn(tx, steer) for steer in tx.pending_steers(turn_id)]


def queue_as_turn(tx: Transaction, steer: SteerRow) -> str:
    """The pending ``steer`` as a queued turn of its session, after the turns queued before it."""
    queued_id = new_id("turn")
    tx.insert_turn(queued_id, steer.session_id, steer.text, now_rfc3339())
    if not tx.queue_steer(steer.id, queued_id):
        raise AssertionError(f"steer {steer.id!r} was read pending in this very transaction")
    tx.emit(events.turn_queued(steer.session_id, queued_id, steer.text, steer.id))
    return queued_id
