"""The seven invariants of the brief, checked after a run: pure functions of its record and the store.

Each check returns the violations it found (an empty list when the invariant held). The numbers are
the brief's: 1 terminal events and their causes, 2 claims, 3 resumes, 4 waits and 5 tool calls and the
history sent to the model (in ``settling.py``), 6 nothing outlives its session and nothing settles
without a reason, 7 the event log agrees with itself and with the stored state.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from coordinator.chaos.inputs import cancelled_turns, check_inputs
from coordinator.chaos.record import PhaseRecord, RunRecord, StoreView, Violation
from coordinator.chaos.settling import check_calls, check_requests, check_stop_order, check_waits
from coordinator.chaos.streaming import Streamed, check_streamed_text
from coordinator.chaos.sub_agents import (
    check_sub_agents,
    declined_by_its_sub_agent,
    failed_with_its_task_call,
)
from coordinator.chaos.timeline import (
    RESUMED,
    SUSPENDED,
    TERMINALS,
    by_turn,
    phase_of,
    reason_dict,
    turn_of,
)
from coordinator.events import Event
from coordinator.models.base import ChatMessage
from coordinator.reasons import REASONLESS, reason_class
from coordinator.statuses import ClaimState, TurnStatus

# How a turn found unfinished is resumed (its ``session.execution.resumed``'s ``after``).
_RESUMED_AFTER = {TurnStatus.SUSPENDED: "shutdown", TurnStatus.RUNNING: "crash"}


# What a turn taken over may be when its phase ended early (see ``check_resumes``).
_CUT_SHORT = frozenset({TurnStatus.RUNNING, TurnStatus.SUSPENDED, TurnStatus.STOPPING})


def check_run(
    record: RunRecord,
    view: StoreView,
    *,
    requests: Sequence[Sequence[ChatMessage]] = (),
    rebuilt: Sequence[Sequence[ChatMessage]] = (),
    leftovers: Iterable[str] = (),
    streams: Sequence[Streamed] = (),
) -> list[Violation]:
    """Every violation of the run: those seen while it ran, then the checks over the final store."""
    found = list(record.violations)
    for check in CHECKS:
        found += check(record, view)
    found += check_requests(requests, rebuilt)
    found += check_streamed_text(record, view, streams)
    found += [Violation(6, f"a process outlived its session: {p}") for p in leftovers]
    return found


def check_terminals(record: RunRecord, view: StoreView) -> list[Violation]:
    """1: each turn has one terminal event, as its first durable stop intent said and a fault caused."""
    found: list[Violation] = []
    events = by_turn(view)
    cancelled = cancelled_turns(view)
    for turn_id, session_id in record.turns.items():
        mine = events.get(turn_id, [])
        terminals = [e for e in mine if e.type in TERMINALS]
        if not terminals and turn_id in cancelled:
            continue  # cancelled while queued, never run: invariant 13 checks it
        if len(terminals) != 1:
            found.append(
                Violation(1, f"{turn_id} has {len(terminals)} terminal events: {[e.type for e in mine]}")
            )
            continue
        reason = terminals[0].payload.get("reason")
        if isinstance(reason, dict) and "parent" in reason:
            continue  # a sub-agent stopped by its parent's stop: check_sub_agents
        intent = record.intents.get(turn_id)
        if intent is not None and reason_dict(intent.reason) != reason:
            found.append(
                Violation(
                    1,
                    f"{turn_id}: its stop was decided first as {reason_dict(intent.reason)} (phase {intent.phase}, "
                    f"seq {intent.seq}) but it ended {terminals[0].type} {reason}",
                )
            )
        elif record.track_intents and intent is None and reason is not None and reason["type"] != "error":
            found.append(Violation(1, f"{turn_id} ended {reason} without a stop intent committed first"))
        uncaused = _uncaused(record, view, turn_id, session_id, reason)
        if uncaused:
            found.append(Violation(1, f"{turn_id} ended {reason}, but {uncaused}"))
        for suspended in (e for e in mine if e.type == SUSPENDED):
            phase = phase_of(record, suspended.stored_seq)
            if phase is None or not phase.shutdown:
                found.append(
                    Violation(1, f"{turn_id} was suspended at seq {suspended.stored_seq} with no shutdown")
                )
    return found


def _uncaused(record: RunRecord, view: StoreView, turn_id: str, session_id: str, reason: Any) -> str | None:
    """Why no injected fault explains ``reason``; None when one does."""
    if reason is None:
        return None
    kind = reason["type"]
    if kind in record.external:
        return None  # the user's own deadline, or their scenario's own interrupt or reject
    if kind == "interrupt" and session_id not in record.interrupted_sessions:
        return "no interrupt of its session was accepted"
    if kind == "declined" and reason["via"] == "task":
        if declined_by_its_sub_agent(view, session_id, reason["call_id"]):
            return None
        return f"the sub-agent of {reason['call_id']} did not end declined on its own"
    if kind == "declined" and (session_id, reason["call_id"]) not in record.declined_calls:
        return f"no decline of {reason['call_id']} was accepted"
    if kind == "timeout" and turn_id not in record.timed_turns:
        return "no deadline was made to fire while it ran"
    if kind == "error" and reason["message"] == REASONLESS:
        return "it was settled without a reason"
    if kind == "error" and failed_with_its_task_call(view, turn_id):
        return None  # its task call failed on its own (a tool error there, say): the sub-agent with it
    if kind == "error" and turn_id not in record.failed_turns and "resumed" not in reason["message"]:
        return "no model error or store failure reached it"
    return None


def _takeover_failed_on_the_store(record: RunRecord, phase: PhaseRecord, owner: str | None) -> bool:
    """Still held by a dead earlier phase's coordinator because this phase's takeover met an injected
    store failure (the claim's commit rolled back): the next watch tick or start takes it over."""
    earlier = {p.instance_id for p in record.phases if p.number < phase.number}
    return phase.store_failed and owner in earlier


def check_claims(record: RunRecord, view: StoreView) -> list[Violation]:
    """2: at each phase end, a claim is held (crash), suspended (shutdown) or released, as its turns say."""
    found: list[Violation] = []
    for phase in record.phases:
        for session_id in record.sessions:
            statuses = {
                str(row.status)  # the stored word, as a violation shows it
                for turn_id, s in record.turns.items()
                if s == session_id and (row := phase.view.turns.get(turn_id)) is not None
            }
            claim = phase.view.claims.get(session_id)
            state = ClaimState.RELEASED if claim is None else claim.state
            expected = ClaimState.RELEASED
            left = _left_for_its_parent(
                record, phase.view, session_id, None if claim is None else claim.owner
            )
            if statuses & {TurnStatus.RUNNING, TurnStatus.STOPPING}:
                expected = ClaimState.HELD
                if phase.end not in ("crash", "failed") and not phase.store_failed and not left:
                    found.append(
                        Violation(2, f"phase {phase.number} ended {phase.end} with {session_id} running")
                    )
            elif TurnStatus.SUSPENDED in statuses:
                expected = ClaimState.SUSPENDED
                if phase.end in ("crash", "failed") and state == ClaimState.HELD:
                    expected = (
                        ClaimState.HELD
                    )  # taken over by this coordinator, which crashed before resuming it
            if state != expected:
                found.append(
                    Violation(
                        2, f"phase {phase.number} ({phase.end}): {session_id} turns {statuses}, claim {state}"
                    )
                )
            elif (
                expected == ClaimState.HELD
                and claim is not None
                and claim.owner != phase.instance_id
                and not _left_for_its_parent(record, phase.view, session_id, claim.owner)
                and not _takeover_failed_on_the_store(record, phase, claim.owner)
            ):
                found.append(
                    Violation(2, f"phase {phase.number}: {session_id} held by {claim.owner}, not its owner")
                )
    return found


def _left_for_its_parent(record: RunRecord, view: StoreView, session_id: str, owner: str | None) -> bool:
    """A sub-agent's turn left by a dead coordinator is taken over only inside its parent's resumed
    task call: a phase that ended before that call ran leaves it held by its earlier owner."""
    earlier = {p.instance_id for p in record.phases if p.end in ("crash", "failed")}
    return owner in earlier and any(
        row.task is not None and row.session_id == session_id for row in view.turns.values()
    )


def check_resumes(record: RunRecord, view: StoreView) -> list[Violation]:
    """3: a restart resumes exactly the turns a shutdown suspended or a crash left running, each once."""
    found: list[Violation] = []
    resumed = [e for e in view.events if e.type == RESUMED]
    ends: dict[str, list[Event]] = {}
    for event in view.events:
        if event.type in TERMINALS and (ended := turn_of(event)) is not None:
            ends.setdefault(ended, []).append(event)
    phases = record.phases
    if phases:
        first = Counter(turn_of(e) for e in resumed if e.stored_seq <= phases[0].view.last_seq)
        if first - Counter(phases[0].retaken):  # only its own store's recoveries resume turns
            found.append(Violation(3, "a turn was resumed by the first coordinator, before any restart"))
    for before, phase in itertools.pairwise(phases):
        counts = Counter(
            (turn_of(e), e.payload["after"])
            for e in resumed
            if phase.first_seq < e.stored_seq <= phase.view.last_seq
        )
        for turn_id in record.turns:
            row = before.view.turns.get(turn_id)
            status = None if row is None else row.status
            expected = None if status is None else _RESUMED_AFTER.get(status)
            for after in ("shutdown", "crash"):
                want, got = int(expected == after), counts[(turn_id, after)]
                # Each time the phase's coordinator retook the turn after its own store failed, it
                # may resume it once more (or not: the store may fail again before the resumption).
                retaken = phase.retaken.count(turn_id) if after == "crash" else 0
                # A takeover whose resumption could not be committed (an injected store failure) fails;
                # a crash or a shutdown may come before the resumption is committed, and the next
                # restart resumes the turn (still running, or suspended again), or, when a stop was
                # decided at the start of the takeover and its settlement was cut off, settles it as
                # that stop (still stopping: checked below).
                after_row = phase.view.turns.get(turn_id)
                cut_short = phase.end in ("crash", "failed", "stuck", "shutdown") and (
                    after_row is not None and after_row.status in _CUT_SHORT
                )
                failed = phase.store_failed and turn_id in record.failed_turns
                # A stop at the very start of the takeover settles the turn before it resumes.
                stopped = any(
                    phase.first_seq < e.stored_seq <= phase.view.last_seq for e in ends.get(turn_id, [])
                )
                excused = got == want - 1 and (cut_short or failed or stopped)
                if not want <= got <= want + retaken and not excused:
                    found.append(
                        Violation(
                            3,
                            f"phase {phase.number}: {turn_id} was {status} after phase {before.number} "
                            f"({before.end}); resumed after {after} {got} time(s), expected {want}"
                            + (f" (and up to {retaken} more, retaken in process)" if retaken else ""),
                        )
                    )
            if row is not None and row.status == TurnStatus.STOPPING:
                found += _settled_as(view, turn_id, reason_dict(row.stop_reason))
    return found


def _settled_as(view: StoreView, turn_id: str, reason: Any) -> list[Violation]:
    ends = [e for e in view.events if turn_of(e) == turn_id and e.type in TERMINALS]
    if ends and ends[-1].payload.get("reason") != reason:
        got = ends[-1].payload.get("reason")
        return [Violation(3, f"{turn_id} was stopping ({reason}) at a restart but settled as {got}")]
    return []


def check_reasons(record: RunRecord, view: StoreView) -> list[Violation]:
    """6: no settlement without a reason (logged ``reasonless_cancel``, or settled as such).

    And no reason is made up: ``shutdown`` comes only from a coordinator's shutdown (brief: only two
    paths produce it), never from a stop that starts inside a session.
    """
    found = [Violation(6, f"reasonless_cancel logged: {entry}") for entry in record.reasonless]
    for event in view.events:
        reason = event.payload.get("reason")
        if not isinstance(reason, dict):
            continue
        if reason.get("message") == REASONLESS:
            found.append(Violation(6, f"seq {event.stored_seq} {event.type} settled without a reason"))
        phase = phase_of(record, event.stored_seq)
        if reason.get("type") == "shutdown" and (phase is None or not phase.shutdown):
            found.append(
                Violation(
                    6, f"seq {event.stored_seq} {event.type} gives reason shutdown, but none was applied"
                )
            )
    return found


def check_log(record: RunRecord, view: StoreView) -> list[Violation]:
    """7: seqs are gap-free and increasing; steps, turns and sessions agree with their events."""
    found: list[Violation] = []
    seqs = [e.stored_seq for e in view.events]
    if seqs != list(range(1, len(seqs) + 1)):
        found.append(Violation(7, f"the event log's seqs are not 1..{len(seqs)} in order"))
    steps = Counter(e.payload["step_id"] for e in view.events if e.type.startswith("session.step."))
    found += [Violation(7, f"step {s} has {n - 1} settlement events") for s, n in steps.items() if n != 2]
    found += [Violation(7, f"{t} has steps still running: {s}") for t, s in view.running_steps.items() if s]
    for turn_id, row in view.turns.items():
        if row.status != TurnStatus.SETTLED:
            found.append(Violation(7, f"{turn_id} is {row.status} at the end"))
    found += _idle(record, view)
    found += _after_terminal(view)
    return found


def _idle(record: RunRecord, view: StoreView) -> list[Violation]:
    found: list[Violation] = []
    last: dict[str, str] = {}
    for event in view.events:
        if event.type == "session.idle":
            last[str(event.session_id)] = event.payload["outcome"]
    for session_id, session in view.sessions.items():
        if session.status != "idle" or session.last_outcome != last.get(session_id):
            found.append(
                Violation(
                    7,
                    f"{session_id} is {session.status}/{session.last_outcome}, its last idle said {last.get(session_id)}",
                )
            )
    events = by_turn(view)
    for turn_id in record.turns:
        mine = events.get(turn_id, [])
        ends = [e for e in mine if e.type in TERMINALS]
        idles = [e for e in mine if e.type == "session.idle"]
        if len(ends) != 1 or len(idles) != 1:
            continue  # reported by check_terminals
        reason = ends[0].payload.get("reason")
        outcome = "succeeded" if reason is None else reason_class(reason["type"]).outcome
        if idles[0].stored_seq < ends[0].stored_seq or idles[0].payload["outcome"] != outcome:
            found.append(
                Violation(7, f"{turn_id}: session.idle {idles[0].payload['outcome']} does not follow its end")
            )
    return found


def _after_terminal(view: StoreView) -> list[Violation]:
    """Children settle before parents: nothing of a turn is published after its terminal event."""
    owner: dict[tuple[str, str], str] = {}
    ended: dict[str, int] = {}
    found: list[Violation] = []
    for event in view.events:
        session_id = str(event.session_id)
        turn_id = turn_of(event)
        if event.type == "session.tool.started" and turn_id is not None:
            owner[(session_id, event.payload["call_id"])] = turn_id
        elif turn_id is None and "call_id" in event.payload:
            turn_id = owner.get((session_id, event.payload["call_id"]))
        if turn_id is None:
            continue
        if event.type in TERMINALS:
            ended[turn_id] = event.stored_seq
        elif turn_id in ended and event.type != "session.idle":
            found.append(
                Violation(7, f"seq {event.stored_seq} {event.type} of {turn_id} after its terminal event")
            )
    return found


CHECKS: tuple[Callable[[RunRecord, StoreView], list[Violation]], ...] = (
    check_terminals,
    check_claims,
    check_resumes,
    check_waits,
    check_stop_order,
    check_calls,
    check_reasons,
    check_log,
    check_sub_agents,
    check_inputs,
)
