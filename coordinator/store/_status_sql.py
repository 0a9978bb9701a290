"""The stored lifecycles' words as SQL lists (``coordinator/statuses.py``), and the source lists of
the store's compare-and-set updates, each move checked against its lifecycle once, at import."""

from __future__ import annotations

from coordinator.statuses import (
    CallStatus,
    ClaimState,
    Parked,
    PermissionStatus,
    State,
    SteerStatus,
    StepStatus,
    TurnStatus,
)


def sql_list(*states: State) -> str:
    """``states`` as an SQL list of their stored values: ``('running', 'stopping')``."""
    return "(" + ", ".join(repr(state.value) for state in states) + ")"


def sql_states(target: State, *sources: State) -> str:
    """The SQL list of ``sources``, the statuses a conditional update moves to ``target``: its WHERE
    says the current one is among them, so each move is checked against the lifecycle here, once."""
    for source in sources:
        source.transition(target)
    return sql_list(*sources)


# A turn that began and has not settled: its owner runs it, settles its stop, or left it suspended.
UNFINISHED_TURN = sql_list(TurnStatus.RUNNING, TurnStatus.STOPPING, TurnStatus.SUSPENDED)

# A stop's intent, and a resume, move a turn that runs (or ran: its owner died) or a suspended one.
STOPPABLE = sql_states(TurnStatus.STOPPING, TurnStatus.RUNNING, TurnStatus.SUSPENDED)
RESUMABLE = sql_states(TurnStatus.RUNNING, TurnStatus.RUNNING, TurnStatus.SUSPENDED)
# A cancelled queued turn settles without running.
CANCELLABLE_TURN = sql_states(TurnStatus.SETTLED, TurnStatus.QUEUED)
# A soft stop is recorded for a turn that runs (or ran) or is suspended, until its boundary.
SOFT_STOPPABLE = sql_list(TurnStatus.RUNNING, TurnStatus.SUSPENDED)
# A steer moves once, from pending: delivered at a boundary, or queued as a turn of its own.
DELIVERABLE_STEER = sql_states(SteerStatus.DELIVERED, SteerStatus.PENDING)
QUEUEABLE_STEER = sql_states(SteerStatus.QUEUED, SteerStatus.PENDING)
PARKABLE = sql_states(Parked.PARKED, Parked.NOT_PARKED)
RELEASABLE = sql_states(Parked.RELEASED, Parked.PARKED)
SUCCEEDABLE_STEP = sql_states(StepStatus.SUCCEEDED, StepStatus.RUNNING)
SETTLEABLE_CALL = sql_states(CallStatus.SUCCEEDED, CallStatus.RUNNING)
REPLIABLE = sql_states(PermissionStatus.REPLIED, PermissionStatus.PENDING)
REVOCABLE = sql_states(PermissionStatus.REVOKED, PermissionStatus.PENDING)
# A dead owner's claim is suspended; one released, or taken over meanwhile, is left as it is.
SUSPENDABLE_CLAIM = sql_states(ClaimState.SUSPENDED, ClaimState.HELD)
