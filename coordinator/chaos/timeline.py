"""Reading a run's event log: which turn, which phase, which wait an event belongs to."""

from __future__ import annotations

from typing import Any

from coordinator import wire
from coordinator.chaos.record import PhaseRecord, RunRecord, StoreView
from coordinator.events import Event
from coordinator.reasons import StopReason

TERMINALS = ("session.execution.succeeded", "session.execution.interrupted", "session.execution.failed")
SUSPENDED = "session.execution.suspended"
RESUMED = "session.execution.resumed"
CALL_SETTLED = ("session.tool.succeeded", "session.tool.failed")
WAIT_SETTLED = {
    "permission.replied": "request_id",
    "permission.revoked": "request_id",
    "form.submitted": "form_id",
    "form.cancelled": "form_id",
    "form.revoked": "form_id",
}


def turn_of(event: Event) -> str | None:
    value = event.payload.get("turn_id")
    return value if isinstance(value, str) else None


def by_turn(view: StoreView) -> dict[str, list[Event]]:
    grouped: dict[str, list[Event]] = {}
    for event in view.events:
        turn_id = turn_of(event)
        if turn_id is not None:
            grouped.setdefault(turn_id, []).append(event)
    return grouped


def phase_of(record: RunRecord, seq: int) -> PhaseRecord | None:
    return next((p for p in record.phases if p.first_seq < seq <= p.view.last_seq), None)


def reason_dict(reason: StopReason | None) -> Any:
    return None if reason is None else wire.converter.unstructure(reason, StopReason)


def wait_id_of(event: Event) -> str | None:
    if event.type == "permission.asked":
        return str(event.payload["request"]["id"])
    if event.type == "form.asked":
        return str(event.payload["form"]["id"])
    key = WAIT_SETTLED.get(event.type)
    return None if key is None else str(event.payload[key])


def terminal_reasons(view: StoreView) -> dict[str, Any]:
    """The reason each turn ended with, for the turns that stopped (not those that succeeded)."""
    return {
        str(e.payload["turn_id"]): e.payload["reason"]
        for e in view.events
        if e.type in TERMINALS and e.payload.get("reason") is not None
    }
