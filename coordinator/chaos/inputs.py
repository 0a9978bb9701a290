"""Invariant 13, over what people send into running turns: every prompt or steer the coordinator
accepted ends in exactly one of delivered once (a turn ran it, or a running turn received it at a
step boundary), queued (a turn of its own, which then ran or was cancelled), or cancelled by a
person. Never dropped, never delivered twice, never delivered to a turn that had stopped."""

from __future__ import annotations

from collections import Counter

from coordinator.chaos.record import RunRecord, StoreView, Violation
from coordinator.chaos.timeline import TERMINALS

STEERED = "session.turn.steered"
QUEUED = "session.turn.queued"
CANCELLED = "session.turn.cancelled"
STARTED = "session.turn.started"


def cancelled_turns(view: StoreView) -> set[str]:
    """The turns a person cancelled while they were queued (they never ran)."""
    return {str(e.payload["turn_id"]) for e in view.events if e.type == CANCELLED}


def check_inputs(record: RunRecord, view: StoreView) -> list[Violation]:
    """13: each accepted prompt and steer is delivered once, or queued and then run or cancelled."""
    found: list[Violation] = []
    started = Counter(str(e.payload["turn_id"]) for e in view.events if e.type == STARTED)
    cancelled = Counter(str(e.payload["turn_id"]) for e in view.events if e.type == CANCELLED)
    for sent in record.sent:
        if sent.kind == "prompt":
            found += _ran_or_cancelled(sent.id, f"prompt {sent.id}", started, cancelled)
            continue
        steered = [e for e in view.events if e.type == STEERED and e.payload["steer_id"] == sent.id]
        queued = [e for e in view.events if e.type == QUEUED and e.payload.get("from_steer") == sent.id]
        if len(steered) + len(queued) != 1:
            found.append(
                Violation(
                    13, f"steer {sent.id} was delivered {len(steered)} and queued {len(queued)} time(s)"
                )
            )
            continue
        if queued:
            found += _ran_or_cancelled(
                str(queued[0].payload["turn_id"]), f"steer {sent.id}", started, cancelled
            )
        else:
            found += _before_its_stop(
                record, view, sent.id, str(steered[0].payload["turn_id"]), steered[0].stored_seq
            )
    found += _cancelled_by_a_person(record, view)
    return found


def _ran_or_cancelled(
    turn_id: str, what: str, started: Counter[str], cancelled: Counter[str]
) -> list[Violation]:
    runs, cancels = started[turn_id], cancelled[turn_id]
    if runs + cancels != 1:
        return [
            Violation(13, f"{what}: its turn {turn_id} started {runs} and was cancelled {cancels} time(s)")
        ]
    return []


def _before_its_stop(
    record: RunRecord, view: StoreView, steer_id: str, turn_id: str, seq: int
) -> list[Violation]:
    """A steer reaches a turn only while no stop is committed for it: its delivery comes before the
    turn's first stop intent and its end."""
    intent = record.intents.get(turn_id)
    ends = [e.stored_seq for e in view.events if e.type in TERMINALS and e.payload.get("turn_id") == turn_id]
    if intent is not None and intent.seq < seq:
        return [
            Violation(
                13, f"steer {steer_id} was delivered at seq {seq}, after {turn_id}'s stop (seq {intent.seq})"
            )
        ]
    if ends and ends[0] < seq:
        return [Violation(13, f"steer {steer_id} was delivered at seq {seq}, after {turn_id} ended")]
    return []


def _cancelled_by_a_person(record: RunRecord, view: StoreView) -> list[Violation]:
    """No queued turn is cancelled but by a person: its own cancellation, or an interrupt that
    cancelled its session's queue."""
    return [
        Violation(13, f"queued turn {e.payload['turn_id']} was cancelled, but no person cancelled it")
        for e in view.events
        if e.type == CANCELLED
        and e.payload["turn_id"] not in record.cancelled_turns
        and e.session_id not in record.queue_cancelled
    ]
