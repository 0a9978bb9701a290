"""Invariant 10, over sub-agent sessions: a child never outlives its parent's turn; its stop reason is
its parent's (with ``parent`` naming the task call) or its own; and (with ``check_resumes``, which
counts every turn, children included) each resumes exactly once."""

from __future__ import annotations

from typing import Any

from coordinator.chaos.record import PhaseRecord, RunRecord, StoreView, Violation
from coordinator.chaos.timeline import RESUMED, SUSPENDED, TERMINALS, by_turn, phase_of
from coordinator.events import Event
from coordinator.statuses import CallStatus
from coordinator.store.rows import TurnRow

STARTS = ("session.turn.started", RESUMED)
ENDS = (*TERMINALS, SUSPENDED)


def sub_agent_turns(view: StoreView) -> dict[tuple[str, str], TurnRow]:
    """Each task call's sub-agent turn, by the call (its session id and call id)."""
    return {
        (row.task.session_id, row.task.call_id): row for row in view.turns.values() if row.task is not None
    }


def parent_turn_of(view: StoreView, child: TurnRow) -> str | None:
    """The turn of the task call that ran ``child``."""
    assert child.task is not None
    call = view.calls.get((child.task.session_id, child.task.call_id))
    return None if call is None else call.turn_id


def declined_by_its_sub_agent(view: StoreView, session_id: str, call_id: str) -> bool:
    """Whether the task call's sub-agent turn ended declined for its own reason (no ``parent``)."""
    child = sub_agent_turns(view).get((session_id, call_id))
    reason = None if child is None else child.stop_reason
    return reason is not None and reason.outcome == "declined" and reason.parent is None


def failed_with_its_task_call(view: StoreView, turn_id: str) -> bool:
    """Whether ``turn_id`` is a sub-agent's turn that its task call's own failure left to settle
    (``settlement.settle_sub_agent_turn``): a tool error at the call's start after a restart, say."""
    child = view.turns.get(turn_id)
    if child is None or child.task is None:
        return False
    call = view.calls.get((child.task.session_id, child.task.call_id))
    return (
        call is not None
        and call.status == CallStatus.FAILED
        and call.error is not None
        and call.error.type == "error"
    )


def check_sub_agents(record: RunRecord, view: StoreView) -> list[Violation]:
    """10: every sub-agent turn settles inside its parent's turn, with its parent's reason or its own."""
    found: list[Violation] = []
    events = by_turn(view)
    for child in view.turns.values():
        if child.task is None:
            continue
        parent_id = parent_turn_of(view, child)
        if parent_id is None:
            found.append(
                Violation(10, f"{child.id} runs for task call {child.task.call_id}, which has no row")
            )
            continue
        mine, theirs = events.get(child.id, []), events.get(parent_id, [])
        found += _inside(record, child.id, parent_id, mine, theirs)
        found += _reason(child, parent_id, mine, theirs)
    return found


def _inside(
    record: RunRecord, child_id: str, parent_id: str, mine: list[Event], theirs: list[Event]
) -> list[Violation]:
    """At each end of the parent's turn (suspended or terminal), the child's turn has ended too.

    Unless a store failure in that phase left the child's settlement unwritten: the store keeps it
    running, and the parent's resume takes it over as after a crash (check_resumes counts it).
    """
    found: list[Violation] = []
    for end in (e for e in theirs if e.type in ENDS):
        seq = end.stored_seq
        phase = phase_of(record, seq)
        if phase is not None and phase.store_failed:
            continue
        # The child's last start or end before it (a crash ends nothing: the resume that follows it
        # is a start, and the child must have ended again since).
        before = [e for e in mine if e.type in (*STARTS, *ENDS) and e.stored_seq < seq]
        if before and before[-1].type in STARTS and not _left_by_a_crash(record, before[-1], phase):
            found.append(
                Violation(
                    10,
                    f"{child_id} was still running at seq {seq}, when its parent {parent_id} ended {end.type}",
                )
            )
    final = [e for e in theirs if e.type in TERMINALS]
    if final:
        late = [e for e in mine if e.stored_seq > final[-1].stored_seq]
        if late:
            found.append(
                Violation(
                    10,
                    f"seq {late[0].stored_seq} {late[0].type} of {child_id} after its parent {parent_id} ended",
                )
            )
    return found


def _left_by_a_crash(record: RunRecord, start: Event, phase: PhaseRecord | None) -> bool:
    """The child's last start was in an earlier phase that crashed: the child is not running, only left
    by a dead coordinator, and its parent's resumed call takes it over (or a later restart does)."""
    started = phase_of(record, start.stored_seq)
    if started is None or phase is None or started.number >= phase.number:
        return False
    return any(p.end in ("crash", "failed") for p in record.phases[started.number : phase.number])


def _reason(child: TurnRow, parent_id: str, mine: list[Event], theirs: list[Event]) -> list[Violation]:
    """A reason with ``parent`` names the task call and is the parent's own, type and fields."""
    found: list[Violation] = []
    assert child.task is not None
    link = {"session_id": child.task.session_id, "call_id": child.task.call_id}
    parent_reasons = [_bare(e.payload.get("reason")) for e in theirs if e.type in ENDS]
    # A suspension is the shutdown's (checked by check_reasons): the parent itself may have crashed
    # before its own suspension was written.
    for end in (e for e in mine if e.type in TERMINALS):
        reason = end.payload.get("reason")
        if not isinstance(reason, dict) or "parent" not in reason:
            continue  # its own stop: explained like any turn's (check_terminals)
        if reason["parent"] != link:
            found.append(Violation(10, f"{child.id} ended {reason}: its parent is {link}"))
        elif _bare(reason) not in parent_reasons:
            found.append(
                Violation(10, f"{child.id} ended {reason}, but its parent {parent_id} ended {parent_reasons}")
            )
    return found


def _bare(reason: Any) -> Any:
    if not isinstance(reason, dict):
        return reason
    return {key: value for key, value in reason.items() if key != "parent"}
