"""The stored lifecycles: a turn's status, a tool call's (and a model step's), a turn's parking, a
permission request's, a question form's, and a session's claim.

Each lifecycle is an enum whose values are exactly what the store holds (``turns.status``,
``tool_calls.status``, ``steps.status``, ``turns.parked``, ``permission_requests.status``,
``forms.status``, ``claims.state``), so a member compares equal to the stored word or number.
Its ``_NEXT`` table says where each state may move, and ``state.transition(target)`` raises
``InvalidTransition`` for any other move.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

from coordinator.errors import InvalidTransition

# A state of any of the lifecycles (each move stays within one).
State = TypeVar(
    "State",
    "TurnStatus",
    "CallStatus",
    "Parked",
    "PermissionStatus",
    "FormStatus",
    "ClaimState",
    "SteerStatus",
)


class TurnStatus(enum.StrEnum):
    """Where a turn is in its life (``turns.status``)."""

    QUEUED = "queued"  # prompted, waiting for the session's earlier turns
    RUNNING = "running"  # an actor runs it (or ran it: its owner died, and a start takes it over)
    STOPPING = "stopping"  # a stop's intent (its reason) is committed; its settlement comes next
    SUSPENDED = "suspended"  # stopped by a shutdown with its claim kept; resumed (or stopped) later
    SETTLED = "settled"  # finished with an outcome; nothing moves it any more

    def next_states(self) -> frozenset[TurnStatus]:
        """The states a turn may move to from this one."""
        return _TURN_NEXT[self]

    def transition(self, target: TurnStatus) -> TurnStatus:
        """``target``, when a turn may move there from this state.

        Raises:
            InvalidTransition: the move is not in the lifecycle.
        """
        return _check("turn", _TURN_NEXT, self, target)


class CallStatus(enum.StrEnum):
    """Where a tool call is in its life (``tool_calls.status``); a model step lives the same way."""

    RUNNING = "running"  # started and not settled
    SUCCEEDED = "succeeded"  # settled with an output
    FAILED = "failed"  # settled with an error (its own failure, or a stop's)

    def next_states(self) -> frozenset[CallStatus]:
        """The states a call may move to from this one."""
        return _CALL_NEXT[self]

    def transition(self, target: CallStatus) -> CallStatus:
        """``target``, when a call may move there from this state.

        Raises:
            InvalidTransition: the move is not in the lifecycle.
        """
        return _check("tool call", _CALL_NEXT, self, target)


# A model step (``steps.status``) runs, then succeeds or fails, as a tool call does.
StepStatus = CallStatus


class Parked(enum.IntEnum):
    """Whether a suspended or crashed turn waits for a person's resume (``turns.parked``; only with
    ``[server] resume = "manual"``)."""

    NOT_PARKED = 0  # a start resumes it (or it needs no resuming)
    PARKED = 1  # every start leaves it alone until it is resumed or interrupted
    RELEASED = 2  # a resume was asked: any instance takes it over, and no one parks it again

    def next_states(self) -> frozenset[Parked]:
        """The states a turn's parking may move to from this one."""
        return _PARKED_NEXT[self]

    def transition(self, target: Parked) -> Parked:
        """``target``, when a turn's parking may move there from this state.

        Raises:
            InvalidTransition: the move is not in the lifecycle.
        """
        return _check("parking", _PARKED_NEXT, self, target)


class PermissionStatus(enum.StrEnum):
    """Where a permission request is in its life (``permission_requests.status``)."""

    PENDING = "pending"  # asked; waits for a person's reply (kept pending across a shutdown)
    REPLIED = "replied"  # a person replied (once, always or reject), or an always rule answered it
    REVOKED = "revoked"  # a stop revoked it before any reply

    def next_states(self) -> frozenset[PermissionStatus]:
        """The states a request may move to from this one."""
        return _PERMISSION_NEXT[self]

    def transition(self, target: PermissionStatus) -> PermissionStatus:
        """``target``, when a request may move there from this state.

        Raises:
            InvalidTransition: the move is not in the lifecycle.
        """
        return _check("permission request", _PERMISSION_NEXT, self, target)


class FormStatus(enum.StrEnum):
    """Where a question form is in its life (``forms.status``)."""

    PENDING = "pending"  # asked; waits for a person's answer (kept pending across a shutdown)
    SUBMITTED = "submitted"  # answered
    CANCELLED = "cancelled"  # dismissed, with a feedback message or without (a decline)
    REVOKED = "revoked"  # a stop revoked it before any answer

    def next_states(self) -> frozenset[FormStatus]:
        """The states a form may move to from this one."""
        return _FORM_NEXT[self]

    def transition(self, target: FormStatus) -> FormStatus:
        """``target``, when a form may move there from this state.

        Raises:
            InvalidTransition: the move is not in the lifecycle.
        """
        return _check("form", _FORM_NEXT, self, target)


class ClaimState(enum.StrEnum):
    """Who may run a session's turns (``claims.state``)."""

    HELD = "held"  # an instance runs (or ran: it died) the session's turn
    SUSPENDED = "suspended"  # a shutdown suspended the turn, or a dead owner's turn was parked
    RELEASED = "released"  # no turn runs: any instance may take the claim

    def next_states(self) -> frozenset[ClaimState]:
        """The states a claim may move to from this one."""
        return _CLAIM_NEXT[self]

    def transition(self, target: ClaimState) -> ClaimState:
        """``target``, when a claim may move there from this state.

        Raises:
            InvalidTransition: the move is not in the lifecycle.
        """
        return _check("claim", _CLAIM_NEXT, self, target)


class SteerStatus(enum.StrEnum):
    """Where a text sent into a running turn is (``steers.status``)."""

    PENDING = "pending"  # accepted; waits for its turn's next step boundary
    DELIVERED = "delivered"  # a user message of its turn, given to the model at a boundary
    QUEUED = "queued"  # its turn ended or stopped first: it became a queued turn of its own

    def next_states(self) -> frozenset[SteerStatus]:
        """The states a steer may move to from this one."""
        return _STEER_NEXT[self]

    def transition(self, target: SteerStatus) -> SteerStatus:
        """``target``, when a steer may move there from this state.

        Raises:
            InvalidTransition: the move is not in the lifecycle.
        """
        return _check("steer", _STEER_NEXT, self, target)


# A wait on a person of either kind that still waits (both lifecycles begin with the same word).
PENDING_WAIT: frozenset[PermissionStatus | FormStatus] = frozenset(
    {PermissionStatus.PENDING, FormStatus.PENDING}
)


_TURN_NEXT: dict[TurnStatus, frozenset[TurnStatus]] = {
    # Settled without running: a person cancelled it while it was queued (outcome ``cancelled``).
    TurnStatus.QUEUED: frozenset({TurnStatus.RUNNING, TurnStatus.SETTLED}),
    # Running again: a start takes over the turn of a dead owner (a crash), its status unchanged.
    TurnStatus.RUNNING: frozenset(
        {TurnStatus.RUNNING, TurnStatus.STOPPING, TurnStatus.SUSPENDED, TurnStatus.SETTLED}
    ),
    TurnStatus.STOPPING: frozenset({TurnStatus.SUSPENDED, TurnStatus.SETTLED}),
    # Resumed at a start, or stopped (an interrupt of a parked turn) without running again.
    TurnStatus.SUSPENDED: frozenset({TurnStatus.RUNNING, TurnStatus.STOPPING}),
    TurnStatus.SETTLED: frozenset(),
}

_CALL_NEXT: dict[CallStatus, frozenset[CallStatus]] = {
    CallStatus.RUNNING: frozenset({CallStatus.SUCCEEDED, CallStatus.FAILED}),
    CallStatus.SUCCEEDED: frozenset(),
    CallStatus.FAILED: frozenset(),
}

_PARKED_NEXT: dict[Parked, frozenset[Parked]] = {
    # A stop's intent and a resume clear the parking whatever it was: clearing a clear one is no move.
    Parked.NOT_PARKED: frozenset({Parked.NOT_PARKED, Parked.PARKED}),
    Parked.PARKED: frozenset({Parked.NOT_PARKED, Parked.RELEASED}),
    Parked.RELEASED: frozenset({Parked.NOT_PARKED}),
}


_PERMISSION_NEXT: dict[PermissionStatus, frozenset[PermissionStatus]] = {
    PermissionStatus.PENDING: frozenset({PermissionStatus.REPLIED, PermissionStatus.REVOKED}),
    PermissionStatus.REPLIED: frozenset(),
    PermissionStatus.REVOKED: frozenset(),
}

_FORM_NEXT: dict[FormStatus, frozenset[FormStatus]] = {
    FormStatus.PENDING: frozenset({FormStatus.SUBMITTED, FormStatus.CANCELLED, FormStatus.REVOKED}),
    FormStatus.SUBMITTED: frozenset(),
    FormStatus.CANCELLED: frozenset(),
    FormStatus.REVOKED: frozenset(),
}

_CLAIM_NEXT: dict[ClaimState, frozenset[ClaimState]] = {
    ClaimState.RELEASED: frozenset({ClaimState.HELD}),
    # Held again: a start takes over the claim of a dead owner (its epoch one more).
    ClaimState.HELD: frozenset({ClaimState.HELD, ClaimState.SUSPENDED, ClaimState.RELEASED}),
    # Taken over at a resume; or released with no owner between, when a parent's settlement settles
    # a sub-agent's suspended turn.
    ClaimState.SUSPENDED: frozenset({ClaimState.HELD, ClaimState.RELEASED}),
}


_STEER_NEXT: dict[SteerStatus, frozenset[SteerStatus]] = {
    SteerStatus.PENDING: frozenset({SteerStatus.DELIVERED, SteerStatus.QUEUED}),
    SteerStatus.DELIVERED: frozenset(),
    SteerStatus.QUEUED: frozenset(),
}


def _check(lifecycle: str, table: Mapping[State, frozenset[State]], current: State, target: State) -> State:
    if target not in table[current]:
        raise InvalidTransition(lifecycle, str(current.value), str(target.value))
    return target
