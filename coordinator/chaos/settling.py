"""Invariants 4 and 5: every wait and every tool call settles once, in order, keeping what it did.

Pure functions of a run's record and the store, like the others in ``invariants.py``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

from coordinator import wire
from coordinator.chaos.record import RunRecord, StoreView, Violation
from coordinator.chaos.timeline import CALL_SETTLED, phase_of, terminal_reasons, turn_of, wait_id_of
from coordinator.events import Event
from coordinator.models.base import ChatMessage
from coordinator.models.history import NO_RESULT
from coordinator.reasons import StopReason
from coordinator.statuses import PENDING_WAIT

NO_RESULT_TEXT = json.dumps(NO_RESULT, ensure_ascii=False, separators=(",", ":"))


def check_waits(record: RunRecord, view: StoreView) -> list[Violation]:
    """4: every request and form settles once, never while its call runs on, and is restored if kept."""
    found: list[Violation] = []
    asked: dict[str, list[Event]] = {}
    settled: dict[str, list[Event]] = {}
    for event in view.events:
        wait_id = wait_id_of(event)
        if wait_id is not None:
            (asked if event.type.endswith(".asked") else settled).setdefault(wait_id, []).append(event)
    calls = _call_settlements(view)
    for wait_id, asks in asked.items():
        ends = settled.get(wait_id, [])
        stored = view.permissions.get(wait_id) or view.forms.get(wait_id)
        status = None if stored is None else stored.status
        if len(ends) != 1 or status in PENDING_WAIT:
            kept = _kept(record, wait_id, view.last_seq)
            found.append(Violation(4, f"{wait_id} ({status}{kept}) has {len(ends)} settlement events"))
        elif not ends[0].type.endswith(status or "?"):
            found.append(Violation(7, f"{wait_id} is {status} in the store but its event is {ends[0].type}"))
        found += _restores(record, wait_id, asks, ends)
        if stored is not None and ends:
            call_end = calls.get((stored.session_id, stored.call_id))
            if call_end is not None and call_end.stored_seq < ends[0].stored_seq:
                kept = _kept(record, wait_id, call_end.stored_seq)
                message = (
                    f"{wait_id}{kept} settled (seq {ends[0].stored_seq}) after its call {stored.call_id}"
                )
                found.append(Violation(4, f"{message} (seq {call_end.stored_seq})"))
    return found


def _kept(record: RunRecord, wait_id: str, seq: int) -> str:
    """ ", kept across a restart" when the wait was asked by an earlier coordinator than the one at ``seq``."""
    phase = phase_of(record, seq)
    asked = record.asked_in.get(wait_id)
    kept = phase is not None and asked is not None and asked < phase.number
    return ", kept across a restart" if kept else ""


def _named(record: RunRecord, wait_id: str, seq: int) -> str:
    kept = _kept(record, wait_id, seq)
    return f"{wait_id} (kept across a restart)" if kept else wait_id


def _restores(
    record: RunRecord, wait_id: str, asks: list[Event], settlements: list[Event]
) -> list[Violation]:
    """A wait pending at a restart is asked again (restored) in the next phase, and only then."""
    found: list[Violation] = []
    if asks[0].payload.get("restored"):
        found.append(Violation(4, f"{wait_id} was first published as restored"))
    for previous, ask in itertools.pairwise(asks):
        if record.tenures:
            # Across nodes: asked again by the next holder of the claim, the wait still pending.
            kept = not _same_coordinator(record, previous.stored_seq, ask.stored_seq) and not any(
                previous.stored_seq < e.stored_seq < ask.stored_seq for e in settlements
            )
        else:
            phase = phase_of(record, ask.stored_seq)
            before = None if phase is None or phase.number == 0 else record.phases[phase.number - 1]
            kept = before is not None and (
                (p := before.view.permissions.get(wait_id) or before.view.forms.get(wait_id)) is not None
                and p.status in PENDING_WAIT
            )
        if not ask.payload.get("restored") or not kept:
            found.append(
                Violation(
                    4, f"{wait_id} was asked again at seq {ask.stored_seq} without being kept by a restart"
                )
            )
    return found


def check_stop_order(record: RunRecord, view: StoreView) -> list[Violation]:
    """4: a stopping turn revokes its waits with its own reason, all of them before any call fails.

    A stop settles in this order: every pending permission and form of the turn is revoked, every
    unsettled tool call fails, the step fails, then exactly one terminal event. Only what the stop
    settles counts: from its intent (or, for a stop with none, its first settlement) on.
    """
    found: list[Violation] = []
    revoked, failed = _stop_settlements(view)
    for turn_id, reason in terminal_reasons(view).items():
        described = wire.structure(reason, StopReason).describe()
        start = _stop_start(record, view, turn_id, reason, described)
        revocations = [e for e in revoked.get(turn_id, []) if e.stored_seq > start]
        for other in revocations:
            if other.payload["reason"] not in (reason, {"type": "shutdown"}):
                wait = _named(record, str(wait_id_of(other)), other.stored_seq)
                message = f"seq {other.stored_seq}: wait {wait} of {turn_id} was revoked for {other.payload['reason']}"
                found.append(Violation(4, f"{message}, but the turn stopped for {reason}"))
        # Only the calls the stop fails (a call that settled with its own failure meanwhile is not).
        failures = [
            e.stored_seq
            for e in failed.get(turn_id, [])
            if e.stored_seq > start and e.payload["error"]["message"] == described
        ]
        if revocations and failures and min(failures) < max(e.stored_seq for e in revocations):
            last = max(revocations, key=lambda e: e.stored_seq)
            wait = _named(record, str(wait_id_of(last)), last.stored_seq)
            message = f"{turn_id} stopped: a call failed (seq {min(failures)}) before wait {wait} was revoked"
            found.append(Violation(4, f"{message} (seq {last.stored_seq})"))
    return found


def _stop_settlements(view: StoreView) -> tuple[dict[str, list[Event]], dict[str, list[Event]]]:
    """Revocations and tool failures, by the turn of the call they belong to."""
    owner: dict[tuple[str, str], str] = {}
    revoked: dict[str, list[Event]] = {}
    failed: dict[str, list[Event]] = {}
    for event in view.events:
        key = (str(event.session_id), str(event.payload.get("call_id")))
        if event.type == "session.tool.started":
            owner[key] = event.payload["turn_id"]
        elif event.type == "session.tool.failed" and key in owner:
            failed.setdefault(owner[key], []).append(event)
    calls = {w.id: (w.session_id, w.call_id) for w in view.permissions.values()}
    calls.update({w.id: (w.session_id, w.call_id) for w in view.forms.values()})
    for event in view.events:
        wait_id = wait_id_of(event) if event.type.endswith(".revoked") else None
        turn_id = None if wait_id is None or wait_id not in calls else owner.get(calls[wait_id])
        if turn_id is not None:
            revoked.setdefault(turn_id, []).append(event)
    return revoked, failed


def _stop_start(record: RunRecord, view: StoreView, turn_id: str, reason: Any, described: str) -> int:
    """The seq after which a stop's settlements come: its intent's, else just before its first one."""
    intent = record.intents.get(turn_id)
    if intent is not None:
        return intent.seq
    firsts = [
        e.stored_seq
        for e in view.events
        if (e.payload.get("reason") == reason and turn_of(e) in (turn_id, None))
        or (e.type == "session.tool.failed" and e.payload["error"]["message"] == described)
    ]
    return min(firsts, default=view.last_seq) - 1


def _call_settlements(view: StoreView) -> dict[tuple[str, str], Event]:
    ends: dict[tuple[str, str], Event] = {}
    for event in view.events:
        if event.type in CALL_SETTLED:
            ends.setdefault((str(event.session_id), event.payload["call_id"]), event)
    return ends


def check_calls(record: RunRecord, view: StoreView) -> list[Violation]:
    """5: every started call settles once, as stored; nested calls before execute, and kept in its result."""
    found: list[Violation] = []
    ends: dict[tuple[str, str], list[Event]] = {}
    for event in view.events:
        if event.type in CALL_SETTLED:
            ends.setdefault((str(event.session_id), event.payload["call_id"]), []).append(event)
    for event in view.events:
        if event.type != "session.tool.started":
            continue
        key = (str(event.session_id), event.payload["call_id"])
        mine = ends.get(key, [])
        row = view.calls.get(key)
        if len(mine) != 1:
            found.append(Violation(5, f"call {key[1]} has {len(mine)} settlement events"))
        elif row is None or not mine[0].type.endswith(row.status):
            found.append(
                Violation(7, f"call {key[1]} is {row and row.status} but its event is {mine[0].type}")
            )
    found += _nested(view, {k: v[0] for k, v in ends.items()})
    found += _before_their_step(record, view, {k: v[0] for k, v in ends.items()})
    for session_id, chat in view.chats.items():
        found += [Violation(5, f"the history of {session_id}: {p}") for p in chat_problems(chat)]
    return found


def _before_their_step(
    record: RunRecord, view: StoreView, ends: dict[tuple[str, str], Event]
) -> list[Violation]:
    """Children settle before parents: a step's calls before the step.

    A shutdown fails the step but keeps its calls that wait on a person, and a restart fails the step a
    dead coordinator left and restores those calls: they settle later, under the next coordinator. Only
    calls started and settled by the coordinator that settles the step count. A coordinator that retook
    a turn after its own store failed did what a restart does, in the same phase: the step it failed
    does not count either.
    """
    steps = {
        e.payload["step_id"]: e
        for e in view.events
        if e.type in ("session.step.succeeded", "session.step.failed")
    }
    starts = {
        (str(e.session_id), e.payload["call_id"]): e.stored_seq
        for e in view.events
        if e.type == "session.tool.started"
    }
    found: list[Violation] = []
    for key, call in view.calls.items():
        step, end, started = steps.get(call.step_id or ""), ends.get(key), starts.get(key)
        if call.parent_call_id is not None or step is None or end is None or started is None:
            continue
        if (
            end.stored_seq > step.stored_seq
            and _same_coordinator(record, step.stored_seq, started)
            and _same_coordinator(record, step.stored_seq, end.stored_seq)
            and not _failed_by_a_retake(record, view, step, call.turn_id, started)
        ):
            message = f"call {call.call_id} settled (seq {end.stored_seq}) after its step ({step.type}, seq {step.stored_seq})"
            found.append(Violation(5, message))
    return found


def _failed_by_a_retake(record: RunRecord, view: StoreView, step: Event, turn_id: str, started: int) -> bool:
    """Whether ``step`` failed in a phase whose coordinator retook its turn after its store failed,
    the turn resuming between the call's start and the step's failure (the retake, which fails the
    step it finds as a restart does)."""
    phase = phase_of(record, step.stored_seq)
    if step.type != "session.step.failed" or phase is None or turn_id not in phase.retaken:
        return False
    return any(
        e.type == "session.execution.resumed"
        and turn_of(e) == turn_id
        and started < e.stored_seq < step.stored_seq
        for e in view.events
    )


def _same_coordinator(record: RunRecord, seq: int, other: int) -> bool:
    """Whether two events were committed by one coordinator: in one phase, or (across nodes) in one
    tenure of the claim (``RunRecord.tenures``)."""
    if record.tenures:
        return record.tenures.get(seq) == record.tenures.get(other)
    return phase_of(record, seq) is phase_of(record, other)


def _nested(view: StoreView, ends: dict[tuple[str, str], Event]) -> list[Violation]:
    found: list[Violation] = []
    reported: dict[tuple[str, str], list[Event]] = {}
    for event in view.events:
        if event.type == "session.tool.progress" and "nested" in event.payload:
            reported.setdefault((str(event.session_id), event.payload["call_id"]), []).append(event)
    for (session_id, call_id), row in view.calls.items():
        end = ends.get((session_id, call_id))
        if row.name != "execute" or end is None:
            continue
        body = (
            end.payload.get("output") if end.type == "session.tool.succeeded" else end.payload.get("partial")
        )
        listed = {c["call_id"] for c in (body or {}).get("calls", [])} if isinstance(body, dict) else set()
        finished = {
            e.payload["nested"]["call_id"]
            for e in reported.get((session_id, call_id), [])
            if e.stored_seq < end.stored_seq
        }
        for child in (
            c for (s, _), c in view.calls.items() if s == session_id and c.parent_call_id == call_id
        ):
            child_end = ends.get((session_id, child.call_id))
            if child_end is not None and child_end.stored_seq > end.stored_seq:
                found.append(Violation(5, f"nested call {child.call_id} settled after its execute call"))
            elif child_end is not None and child_end.type == "session.tool.succeeded":
                finished.add(child.call_id)
        missing = sorted(finished - listed)
        if missing:
            error = end.payload.get("error")
            how = "succeeded" if error is None else f"failed {error['type']}: {error['message']}"
            where = "result" if error is None else "partial result"
            message = f"execute {call_id} ({how}) lacks finished nested calls {missing} in its {where}"
            found.append(Violation(5, message))
    return found


def chat_problems(chat: Sequence[ChatMessage]) -> list[str]:
    """What makes a conversation invalid for a model: a tool call not answered, or answered with nothing."""
    problems = []
    for index, message in enumerate(chat):
        if message.role != "assistant" or not message.tool_calls:
            continue
        answers = chat[index + 1 : index + 1 + len(message.tool_calls)]
        for call, answer in zip(
            message.tool_calls, list(answers) + [None] * len(message.tool_calls), strict=False
        ):
            if answer is None or answer.role != "tool" or answer.tool_call_id != call.id:
                problems.append(f"tool call {call.id} is not answered")
            elif answer.content == NO_RESULT_TEXT:
                problems.append(f"tool call {call.id} is answered with no recorded result")
    return problems


def check_requests(
    requests: Sequence[Sequence[ChatMessage]], rebuilt: Sequence[Sequence[ChatMessage]] = ()
) -> list[Violation]:
    """5: every conversation sent to the model was valid, and (where ``rebuilt`` has it) was the one
    the store held: the step's kept settled turns plus what it read equal a rebuild from scratch."""
    found = [
        Violation(5, f"model request {i}: {p}")
        for i, chat in enumerate(requests)
        for p in chat_problems(chat)
    ]
    found += [
        Violation(5, f"model request {i}: differs from the conversation rebuilt from the store")
        for i, (chat, whole) in enumerate(zip(requests, rebuilt, strict=False))
        if tuple(chat) != tuple(whole)
    ]
    return found
