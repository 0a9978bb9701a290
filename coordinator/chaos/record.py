"""What a run remembers for its invariant checks: faults applied, stop intents, phases, store views.

``StoreView`` is a frozen copy of everything the checks read from the store, so that the checks in
``invariants.py`` are pure functions (and tests can feed them a tampered view).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from coordinator.chaos.faults import Injection
from coordinator.events import Event
from coordinator.models.base import ChatMessage
from coordinator.models.history import conversation_for_model
from coordinator.records import Form, PermissionRequest, Session
from coordinator.store import Reader
from coordinator.store.rows import ClaimRow, ToolCallRow, TurnRow

EVENT_PAGE = 100_000


@attrs.frozen
class Violation:
    """An invariant (numbered as in design/chaos.md) that did not hold, and what was seen."""

    invariant: int
    message: str

    def __str__(self) -> str:
        # 0: the user's scenario failed (``run_chaos``), which is no numbered invariant.
        return (
            f"invariant {self.invariant}: {self.message}" if self.invariant else f"scenario: {self.message}"
        )


@attrs.frozen(kw_only=True)
class Applied:
    """A fault that took effect: where it was scheduled, on which turn, and what it did."""

    injection: Injection
    phase: int
    session_id: str
    turn_id: str
    effect: str


@attrs.frozen(kw_only=True)
class StoreView:
    """The store as the checks see it, read in one go."""

    events: tuple[Event, ...]
    turns: Mapping[str, TurnRow]
    claims: Mapping[str, ClaimRow | None]
    sessions: Mapping[str, Session]
    calls: Mapping[tuple[str, str], ToolCallRow]
    permissions: Mapping[str, PermissionRequest]
    forms: Mapping[str, Form]
    running_steps: Mapping[str, tuple[str, ...]]
    chats: Mapping[str, tuple[ChatMessage, ...]]

    @property
    def last_seq(self) -> int:
        return self.events[-1].stored_seq if self.events else 0


def read_view(read: Reader, session_ids: list[str], turn_ids: list[str]) -> StoreView:
    """Everything the checks need, for the run's sessions and turns."""
    events = tuple(read.events_after(0, limit=EVENT_PAGE))
    permission_ids = {e.payload["request"]["id"] for e in events if e.type == "permission.asked"}
    form_ids = {e.payload["form"]["id"] for e in events if e.type == "form.asked"}
    calls: dict[tuple[str, str], ToolCallRow] = {}
    chats: dict[str, tuple[ChatMessage, ...]] = {}
    for session_id in session_ids:
        session_calls = read.tool_calls_of_session(session_id)
        calls.update({(session_id, c.call_id): c for c in session_calls})
        chats[session_id] = conversation_for_model(read, session_id)
    sessions = {s: read.get_session(s) for s in session_ids}
    return StoreView(
        events=events,
        turns={t: row for t in turn_ids if (row := read.get_turn(t)) is not None},
        claims={s: read.get_claim(s) for s in session_ids},
        sessions={s: v for s, v in sessions.items() if v is not None},
        calls=calls,
        permissions={p: r for p in permission_ids if (r := read.get_permission(p)) is not None},
        forms={f: form for f in form_ids if (form := read.get_form(f)) is not None},
        running_steps={t: tuple(read.running_steps(t)) for t in turn_ids},
        chats=chats,
    )


@attrs.frozen(kw_only=True)
class PhaseRecord:
    """One coordinator's life in a run: how it ended, its seqs, and the store right after."""

    number: int
    end: str  # done | shutdown | crash | wedged | stuck | failed
    instance_id: str
    first_seq: int  # events of this phase have first_seq < seq <= view.last_seq
    shutdown: bool  # a shutdown was applied in this phase
    store_failed: bool  # an injected store failure fired in this phase
    view: StoreView
    # Turns this phase's coordinator took over from itself once its store wrote again (the log's
    # ``turn_recovered`` with ``cause: store_failed``): each resumes once more, after crash.
    retaken: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class Intent:
    """The first stop intent a commit recorded for a turn (``turns.status = stopping``)."""

    reason: Any
    phase: int
    seq: int


@attrs.frozen(kw_only=True)
class Sent:
    """A prompt or a steer a person sent and the coordinator accepted (answered, durable)."""

    kind: str  # prompt | steer
    session_id: str
    id: str  # the prompt's turn id, or the steer's id
    phase: int


@attrs.define(kw_only=True)
class RunRecord:
    """Filled by the injector, the driver and the commit watch while the run goes on."""

    sessions: list[str] = attrs.Factory(list)
    turns: dict[str, str] = attrs.Factory(dict)  # turn id -> session id
    # In-process runs see every commit (``CommitWatch``), so every stop intent; from outside, not.
    track_intents: bool = True
    # A scenario makes the sessions and turns (``run_chaos``): the record takes them from the store.
    discovering: bool = False
    # Stop reasons that may come from the user's side with no fault injected (``World.external``).
    external: frozenset[str] = frozenset()
    checkpoints: list[str] = attrs.Factory(list)  # every checkpoint reached, in order (occurrence - 1)
    decided: list[Injection] = attrs.Factory(list)
    applied: list[Applied] = attrs.Factory(list)
    intents: dict[str, Intent] = attrs.Factory(dict)
    settled: set[str] = attrs.Factory(set)
    # Causes that may justify a stop: sessions interrupted (the API said true), declined call ids,
    # turns live during a deadline, turns that met a model error or a store failure.
    interrupted_sessions: set[str] = attrs.Factory(set)
    declined_calls: set[tuple[str, str]] = attrs.Factory(set)
    timed_turns: set[str] = attrs.Factory(set)
    failed_turns: set[str] = attrs.Factory(set)
    asked: dict[str, list[tuple[str, str]]] = attrs.Factory(dict)  # session -> [(kind, wait id)]
    # What people sent into running turns (invariant 13), and the cancellations they asked for:
    # queued turns by id, and sessions whose whole queue an interrupt cancelled.
    sent: list[Sent] = attrs.Factory(list)
    cancelled_turns: set[str] = attrs.Factory(set)
    queue_cancelled: set[str] = attrs.Factory(set)
    asked_in: dict[str, int] = attrs.Factory(dict)  # wait id -> the phase that first asked it
    phases: list[PhaseRecord] = attrs.Factory(list)
    # Rounds over several nodes: each event's seq -> (the instance that committed it, its session's
    # claim epoch then), from the write audit. Nodes work side by side within a phase, so there "the
    # same coordinator" is the same tenure of a claim, not the same phase (``settling.py``).
    tenures: dict[int, tuple[str, int | None]] = attrs.Factory(dict)
    violations: list[Violation] = attrs.Factory(list)
    reasonless: list[dict[str, Any]] = attrs.Factory(list)
    errors: list[str] = attrs.Factory(list)

    def discover(self, read: Reader) -> None:
        """Take the sessions and turns a scenario made (the driver made none) from the store."""
        for session in read.list_sessions():
            if session.id not in self.sessions:
                self.sessions.append(session.id)
            for turn_id in read.turn_ids_of_session(session.id):
                self.turns.setdefault(turn_id, session.id)

    def live_turns(self) -> set[str]:
        return set(self.turns) - self.settled

    def violate(self, invariant: int, message: str) -> None:
        self.violations.append(Violation(invariant, message))
