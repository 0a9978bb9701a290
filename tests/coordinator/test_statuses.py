"""The stored lifecycles: each allows exactly the moves the store makes, refuses any other with
``InvalidTransition``, and its values are exactly the words and numbers the store holds."""

from __future__ import annotations

import typing

import pytest

from coordinator import records, wire
from coordinator.errors import InvalidTransition
from coordinator.statuses import (
    PENDING_WAIT,
    CallStatus,
    ClaimState,
    FormStatus,
    Parked,
    PermissionStatus,
    SteerStatus,
    StepStatus,
    TurnStatus,
)

Q, R, ST, SU, SE = (
    TurnStatus.QUEUED,
    TurnStatus.RUNNING,
    TurnStatus.STOPPING,
    TurnStatus.SUSPENDED,
    TurnStatus.SETTLED,
)
TURN_MOVES = {
    (Q, R),  # a start runs a queued turn
    (Q, SE),  # a person cancelled it while it was queued
    (R, R),  # a start takes over the turn of a dead owner
    (R, ST),  # a stop's intent
    (SU, ST),  # an interrupt of a parked turn
    (R, SU),  # a shutdown suspends it
    (ST, SU),  # a shutdown's intent, settled
    (R, SE),  # it succeeded
    (ST, SE),  # a stop, settled
    (SU, R),  # resumed at a start
}
CALL_MOVES = {
    (CallStatus.RUNNING, CallStatus.SUCCEEDED),
    (CallStatus.RUNNING, CallStatus.FAILED),
}
PARKED_MOVES = {
    (Parked.NOT_PARKED, Parked.PARKED),  # park_turn
    (Parked.PARKED, Parked.RELEASED),  # release_parked: a resume was asked
    # A stop's intent and a resume clear it, whatever it was.
    (Parked.NOT_PARKED, Parked.NOT_PARKED),
    (Parked.PARKED, Parked.NOT_PARKED),
    (Parked.RELEASED, Parked.NOT_PARKED),
}
PERMISSION_MOVES = {
    (PermissionStatus.PENDING, PermissionStatus.REPLIED),  # reply_permission (an always rule too)
    (PermissionStatus.PENDING, PermissionStatus.REVOKED),  # revoke_permission: a stop
}
FORM_MOVES = {
    (FormStatus.PENDING, FormStatus.SUBMITTED),  # submit_form
    (FormStatus.PENDING, FormStatus.CANCELLED),  # dismiss_form
    (FormStatus.PENDING, FormStatus.REVOKED),  # a stop
}
CLAIM_MOVES = {
    (ClaimState.RELEASED, ClaimState.HELD),  # acquire_claim
    (ClaimState.HELD, ClaimState.HELD),  # a takeover of a dead owner's claim
    (ClaimState.HELD, ClaimState.SUSPENDED),  # a shutdown, or a dead owner's turn parked
    (ClaimState.HELD, ClaimState.RELEASED),  # the turn settled
    (ClaimState.SUSPENDED, ClaimState.HELD),  # a takeover at a resume
    (ClaimState.SUSPENDED, ClaimState.RELEASED),  # a suspended sub-agent's turn settled by its parent
}
STEER_MOVES = {
    (SteerStatus.PENDING, SteerStatus.DELIVERED),  # delivered at a step boundary
    (SteerStatus.PENDING, SteerStatus.QUEUED),  # its turn ended first: a turn of its own
}
LIFECYCLES: list[tuple[type[typing.Any], set[typing.Any]]] = [
    (TurnStatus, TURN_MOVES),
    (CallStatus, CALL_MOVES),
    (Parked, PARKED_MOVES),
    (PermissionStatus, PERMISSION_MOVES),
    (FormStatus, FORM_MOVES),
    (ClaimState, CLAIM_MOVES),
    (SteerStatus, STEER_MOVES),
]


@pytest.mark.parametrize(("lifecycle", "moves"), LIFECYCLES, ids=lambda x: getattr(x, "__name__", ""))
def test_every_allowed_move_passes_and_every_other_raises(
    lifecycle: typing.Any, moves: set[typing.Any]
) -> None:
    """The table is the lifecycle the store writes: an allowed move returns its target, and any
    other raises ``InvalidTransition`` naming both ends, instead of writing a state that cannot be."""
    assert {(a, b) for a in lifecycle for b in a.next_states()} == moves
    for current in lifecycle:
        for target in lifecycle:
            if (current, target) in moves:
                assert current.transition(target) is target
            else:
                with pytest.raises(InvalidTransition) as raised:
                    current.transition(target)
                assert (raised.value.current, raised.value.target) == (str(current.value), str(target.value))


def test_a_settled_turn_moves_nowhere() -> None:
    """Settled is final: a second settlement of a turn is a bug, not a write."""
    with pytest.raises(InvalidTransition, match="turn: settled -> running"):
        TurnStatus.SETTLED.transition(TurnStatus.RUNNING)
    assert TurnStatus.SETTLED.next_states() == frozenset()


def test_the_stored_values_are_the_words_and_numbers_the_store_holds() -> None:
    """The enums are the columns' values: rows written before them read back as equal members, and
    the SQL built from them is unchanged."""
    assert [s.value for s in TurnStatus] == ["queued", "running", "stopping", "suspended", "settled"]
    assert [s.value for s in CallStatus] == ["running", "succeeded", "failed"]
    assert StepStatus is CallStatus
    assert [p.value for p in Parked] == [0, 1, 2]
    assert [s.value for s in PermissionStatus] == ["pending", "replied", "revoked"]
    assert [s.value for s in FormStatus] == ["pending", "submitted", "cancelled", "revoked"]
    assert [s.value for s in ClaimState] == ["held", "suspended", "released"]
    assert PENDING_WAIT == {"pending"}
    assert TurnStatus("stopping") == "stopping" and f"{TurnStatus.STOPPING}" == "stopping"
    assert Parked(2) == 2 and f"{Parked.RELEASED}" == "2"
    assert all(type(s.value) is str for s in (*TurnStatus, *CallStatus, *PermissionStatus, *FormStatus))
    assert all(type(s.value) is str for s in ClaimState)
    assert all(type(p.value) is int for p in Parked)


def test_a_tool_parts_state_is_a_call_status() -> None:
    """The wire's Literal of a tool part's state holds exactly the call statuses."""
    assert set(typing.get_args(records.CallState)) == {s.value for s in CallStatus}


def test_a_settled_wait_moves_nowhere() -> None:
    """A reply, an answer or a revocation is final: the store's compare-and-set on a pending wait is
    the lifecycle's only move, and a second settlement is a bug, not a write."""
    with pytest.raises(InvalidTransition, match="permission request: revoked -> replied"):
        PermissionStatus.REVOKED.transition(PermissionStatus.REPLIED)
    with pytest.raises(InvalidTransition, match="form: submitted -> revoked"):
        FormStatus.SUBMITTED.transition(FormStatus.REVOKED)
    with pytest.raises(InvalidTransition, match="form: pending -> pending"):
        FormStatus.PENDING.transition(FormStatus.PENDING)


def test_records_hold_their_status_as_a_member_and_the_wire_as_its_word() -> None:
    """A request or form read from the store compares as a member, while what a client or an event
    carries stays the plain word it always was."""
    request = records.PermissionRequest(
        id="per_1", session_id="s", call_id="c", action="a", resource="r", status="pending", created_at="t"
    )
    assert request.status is PermissionStatus.PENDING
    body = wire.unstructure(request)
    assert body["status"] == "pending" and type(body["status"]) is str
    assert type(wire.unstructure(request.settlement())["status"]) is str
    nested = records.NestedCall(call_id="c.1", name="shell", status=CallStatus.SUCCEEDED)
    assert type(nested.status) is str
