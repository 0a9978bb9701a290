"""What people send into a session's turns: a prompt in one of three modes, a cancellation of a
queued turn, and an interrupt that also empties the queue.

- ``queue`` (the default): a new turn, after any running or queued one.
- ``steer``: the text joins the running turn at its next step boundary (``actors/steers.py``); with no
  turn to take it, it becomes a queued turn at once.
- ``interrupt``: the running turn stops (reason interrupt) and this prompt runs next.

Each is one transaction under the session's lock, so against a stop, a start or a delete it lands
wholly before or wholly after. A steer and a stop that race are decided there: a stop committed
first makes the steer a queued turn; a steer committed first waits for the boundary, and the stop's
settlement queues it if the boundary never comes. Never lost, never delivered twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import attrs

from coordinator import errors, events
from coordinator.actors import steers, stops
from coordinator.actors.context import Runtime
from coordinator.clock import now_rfc3339
from coordinator.decisions import existing_session, prompt_text, refuse_if_closing
from coordinator.ids import new_id
from coordinator.logs import get_logger
from coordinator.reasons import Interrupt, StopReason
from coordinator.statuses import TurnStatus
from coordinator.store import Transaction
from coordinator.store.rows import TurnRow

log = get_logger(__name__)

Mode = Literal["queue", "steer", "interrupt"]
MODES: tuple[Mode, ...] = ("queue", "steer", "interrupt")


@attrs.frozen
class Accepted:
    """What a prompt did: the turn it is (or waits for), its steer's id, and the stop it decided
    (``interrupt`` mode) for the caller to apply once committed."""

    turn_id: str
    steer_id: str | None = None
    stopped: tuple[str, StopReason] | None = None
    # The session's next turn as this prompt's transaction left it: what an actor it starts runs first.
    next_turn: TurnRow | None = None


async def send(
    runtime: Runtime,
    session_id: str,
    text: str,
    mode: str,
    expected_turn_id: str | None,
    principal: str | None = None,
) -> Accepted:
    """Accept a prompt in ``mode``; returns what it became.

    **Raises:** ``SessionNotFound``, ``InvalidRequest`` (empty text, unknown mode), ``TurnMismatch``
    (``expected_turn_id`` is not the running turn), ``CoordinatorClosed``.
    """
    if mode not in MODES:
        raise errors.InvalidRequest(message=f"mode must be one of queue, steer, interrupt; got {mode!r}")
    if expected_turn_id is not None and not isinstance(expected_turn_id, str):
        raise errors.InvalidRequest(message="expected_turn_id must be a string")
    accept = {"queue": _queue, "steer": _steer, "interrupt": _interrupting}[mode]

    def body(tx: Transaction) -> tuple[Accepted, Callable[[], TurnRow | None]]:
        refuse_if_closing(runtime)
        tx.hold_session(session_id)
        # Checked in the transaction: a delete committed since the caller looked wins, and a delete
        # after this one finds the queued turn (SessionBusy). Never a turn of a deleted session.
        existing_session(tx, session_id)
        checked = prompt_text(text)  # after the session: an unknown session is the first thing wrong
        if expected_turn_id is not None:
            _check_expected(tx, session_id, expected_turn_id)
        return accept(runtime, tx, session_id, checked, principal), tx.next_turn_later(session_id)

    accepted, next_turn = await runtime.store.write(body)
    accepted = attrs.evolve(accepted, next_turn=next_turn())
    if accepted.stopped is not None:
        stops.apply(runtime, *accepted.stopped)
    if mode != "queue":
        log.info("prompt_accepted", session_id=session_id, mode=mode, turn_id=accepted.turn_id)
    return accepted


def _check_expected(tx: Transaction, session_id: str, expected: str) -> None:
    active = tx.active_turn(session_id)
    if active is None or active.id != expected:
        running = None if active is None else active.id
        raise errors.TurnMismatch(
            message=f"turn {expected!r} is not the running turn of session {session_id!r} "
            f"({'none runs' if running is None else f'{running!r} runs'})",
            expected_turn_id=expected,
            running_turn_id=running,
            turn_id=running,
        )


def _queue(runtime: Runtime, tx: Transaction, session_id: str, text: str, principal: str | None) -> Accepted:
    turn_id = new_id("turn")
    tx.insert_turn(turn_id, session_id, text, now_rfc3339())
    return Accepted(turn_id=turn_id)


def _steer(runtime: Runtime, tx: Transaction, session_id: str, text: str, principal: str | None) -> Accepted:
    steer_id = new_id("steer")
    active = tx.active_turn(session_id)
    now = now_rfc3339()
    if active is None or not _takes_steers(runtime, active):
        # No turn will reach another step boundary: the text runs as a turn of its own.
        tx.insert_steer(steer_id, session_id, None if active is None else active.id, text, now, principal)
        steer = tx.get_steer(steer_id)
        assert steer is not None
        return Accepted(turn_id=steers.queue_as_turn(tx, steer), steer_id=steer_id)
    tx.insert_steer(steer_id, session_id, active.id, text, now, principal)
    return Accepted(turn_id=active.id, steer_id=steer_id)


def _takes_steers(runtime: Runtime, turn: TurnRow) -> bool:
    """Whether the turn may still reach a step boundary: no stop committed for it, none waiting for
    its boundary, and (run here) none decided in this process (a shutdown suspends it: a steer then
    waits for its resume)."""
    if turn.status == TurnStatus.STOPPING or turn.soft_stop is not None:
        return False
    live = runtime.turns.get(turn.id)
    if live is None:
        return True
    reason = live.handle.reason
    return not live.settling and (reason is None or reason.resumable)


def _interrupting(
    runtime: Runtime, tx: Transaction, session_id: str, text: str, principal: str | None
) -> Accepted:
    turn_id = new_id("turn")
    tx.insert_turn(turn_id, session_id, text, now_rfc3339())
    tx.put_turn_first(turn_id, session_id)
    turn = tx.interruptible_turn(session_id)
    if turn is None:
        return Accepted(turn_id=turn_id)
    reason = Interrupt.by_person("api", principal=principal)
    stop = stops.decide_in(tx, turn.id, reason, live=runtime.turns.get(turn.id))
    return Accepted(turn_id=turn_id, stopped=None if stop is None else (turn.id, stop))


async def cancel_queued(runtime: Runtime, session_id: str, turn_id: str) -> None:
    """Cancel a queued turn: it never runs (``session.turn.cancelled``).

    **Raises:** ``SessionNotFound``, ``TurnNotFound``, ``TurnNotQueued`` (it started or ended).
    """

    def cancel(tx: Transaction) -> None:
        tx.hold_session(session_id)
        existing_session(tx, session_id)
        turn = tx.get_turn(turn_id)
        if turn is None or turn.session_id != session_id:
            raise errors.TurnNotFound(
                message=f"no turn {turn_id!r} in session {session_id!r}", turn_id=turn_id
            )
        if not tx.cancel_queued_turn(turn_id):
            raise errors.TurnNotQueued(
                message=f"turn {turn_id!r} is {turn.status}, not queued: only a queued turn is cancelled",
                turn_id=turn_id,
                turn_status=str(turn.status),
            )
        tx.emit(events.turn_cancelled(session_id, turn_id))

    await runtime.store.write(cancel)
    log.info("queued_turn_cancelled", session_id=session_id, turn_id=turn_id)
