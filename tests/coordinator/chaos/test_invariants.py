"""The invariant checks catch each kind of violation: a clean run's log, tampered one way at a time.

The clean run is a real one of the campaign (a shutdown while a permission waits, then the restart that
restores it), so the checks are fed exactly what the campaign feeds them.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import attrs
import pytest

from coordinator.chaos.campaign import Run, execute_run
from coordinator.chaos.faults import Fault, Injection
from coordinator.chaos.invariants import (
    check_claims,
    check_log,
    check_reasons,
    check_resumes,
    check_run,
    check_terminals,
)
from coordinator.chaos.record import Intent, RunRecord, StoreView
from coordinator.chaos.settling import chat_problems, check_calls, check_stop_order, check_waits
from coordinator.chaos.timeline import turn_of
from coordinator.chaos.world import World, make_world
from coordinator.events import Event
from coordinator.models.base import ChatMessage, ModelToolCall
from coordinator.reasons import REASONLESS, Interrupt
from coordinator.store.rows import ToolCallRow

SEED = 7


def _simple(world: World) -> bool:
    """One session, two prompts, no real process, and a first step that asks permission for one call."""
    if world.processes or world.prompts != (2,):
        return False
    first = world.scripts[0][0].get("tool_calls", [])
    return len(first) == 1 and first[0]["name"] == "guarded"


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("chaos")
    index = next(
        i for i in range(2000) if _simple(make_world(random.Random(f"{SEED}:{i}:world"), root, root / "x"))
    )
    quiet = execute_run(SEED, index, root=root, schedule=())
    occurrence = quiet.record.checkpoints.index("permission.wait") + 1
    shutdown = Injection(occurrence, "permission.wait", Fault("shutdown"))
    return execute_run(SEED, index, root=root, schedule=(shutdown,))


def _with_events(view: StoreView, events: list[Event]) -> StoreView:
    return attrs.evolve(view, events=tuple(events))


def _first(view: StoreView, type: str) -> Event:
    return next(e for e in view.events if e.type == type)


def test_a_clean_run_holds_every_invariant(clean: Run) -> None:
    """The baseline: a shutdown and its restart, with a restored permission, violate nothing."""
    assert [p.end for p in clean.record.phases] == ["shutdown", "done"]
    assert "session.execution.resumed" in [e.type for e in clean.view.events]
    assert check_run(clean.record, clean.view, requests=clean.requests, leftovers=clean.leftovers) == []


def test_a_turn_without_its_terminal_event_is_caught(clean: Run) -> None:
    """Invariant 1: every turn ends in exactly one terminal event."""
    turn_id = next(iter(clean.record.turns))
    events = [
        e
        for e in clean.view.events
        if not (e.type.startswith("session.execution.s") and e.payload.get("turn_id") == turn_id)
    ]
    found = check_terminals(clean.record, _with_events(clean.view, events))
    assert any(v.invariant == 1 and turn_id in v.message and "terminal events" in v.message for v in found)


def test_a_stop_no_fault_explains_is_caught(clean: Run) -> None:
    """Invariant 1: the reason matches the cause injected; an interrupt nobody asked for is a bug."""
    succeeded = _first(clean.view, "session.execution.succeeded")
    reason = {"type": "interrupt", "by": "api"}
    forged = attrs.evolve(
        succeeded, type="session.execution.interrupted", payload={**succeeded.payload, "reason": reason}
    )
    events = [forged if e is succeeded else e for e in clean.view.events]
    messages = [v.message for v in check_terminals(clean.record, _with_events(clean.view, events))]
    assert any("without a stop intent" in m for m in messages)
    assert any("no interrupt of its session was accepted" in m for m in messages)


def test_a_claim_held_after_a_shutdown_is_caught(clean: Run) -> None:
    """Invariant 2: after a shutdown the claim is suspended, not held."""
    first = clean.record.phases[0]
    claims = {s: attrs.evolve(c, state="held") for s, c in first.view.claims.items() if c is not None}
    phases = [attrs.evolve(first, view=attrs.evolve(first.view, claims=claims)), *clean.record.phases[1:]]
    found = check_claims(attrs.evolve(clean.record, phases=phases), clean.view)
    assert [v.invariant for v in found] == [2]


def test_a_turn_resumed_twice_is_caught(clean: Run) -> None:
    """Invariant 3: a restart resumes each suspended turn exactly once."""
    resumed = _first(clean.view, "session.execution.resumed")
    events = [e for event in clean.view.events for e in ([event, event] if event is resumed else [event])]
    found = check_resumes(clean.record, _with_events(clean.view, events))
    assert any("resumed after shutdown 2 time(s), expected 1" in v.message for v in found)


def test_a_resume_by_the_first_coordinator_is_caught_unless_its_own_store_recovery_retook_the_turn(
    clean: Run,
) -> None:
    resumed = _first(clean.view, "session.execution.resumed")
    events = [attrs.evolve(resumed, seq=1), *clean.view.events]  # within the first phase's seqs
    found = check_resumes(clean.record, _with_events(clean.view, events))
    assert any("resumed by the first coordinator" in v.message for v in found)

    first, *rest = clean.record.phases
    retaken = attrs.evolve(first, retaken=(resumed.payload["turn_id"],))
    record = attrs.evolve(clean.record, phases=[retaken, *rest])
    found = check_resumes(record, _with_events(clean.view, events))
    assert not any("resumed by the first coordinator" in v.message for v in found)


def test_a_call_settled_after_its_step_is_caught_unless_a_retake_failed_the_step(clean: Run) -> None:
    # One coordinator for the whole run: the restart's failed step and the call it restored settling
    # later now look like one coordinator settling a call after its step.
    merged = attrs.evolve(clean.record.phases[-1], number=0, first_seq=0)
    record = attrs.evolve(clean.record, phases=[merged])
    late = [v for v in check_calls(record, clean.view) if "after its step (session.step.failed" in v.message]
    assert len(late) == 1
    call_id = late[0].message.split()[1]
    started = next(
        e for e in clean.view.events if e.type == "session.tool.started" and e.payload["call_id"] == call_id
    )
    failed_at = int(late[0].message.rsplit("seq ", 1)[1].rstrip(")"))
    resumed = _first(clean.view, "session.execution.resumed")
    assert started.stored_seq + 1 < failed_at
    # As a retake orders it: the call starts, the turn resumes, the step fails, the call settles.
    events = [attrs.evolve(e, seq=started.stored_seq + 1) if e is resumed else e for e in clean.view.events]
    view = _with_events(clean.view, events)
    assert any("after its step" in v.message for v in check_calls(record, view))
    retaken = attrs.evolve(record, phases=[attrs.evolve(merged, retaken=(str(turn_of(resumed)),))])
    assert not any("after its step" in v.message for v in check_calls(retaken, view))


def test_a_request_left_pending_is_caught(clean: Run) -> None:
    """Invariant 4: no request is left pending, and each has exactly one settlement event."""
    replied = _first(clean.view, "permission.replied")
    request_id = replied.payload["request_id"]
    pending = attrs.evolve(clean.view.permissions[request_id], status="pending")
    view = attrs.evolve(
        clean.view,
        events=tuple(e for e in clean.view.events if e is not replied),
        permissions={**clean.view.permissions, request_id: pending},
    )
    found = check_waits(clean.record, view)
    assert any(
        v.invariant == 4 and request_id in v.message and "0 settlement events" in v.message for v in found
    )


def test_a_request_settled_after_its_call_is_caught(clean: Run) -> None:
    """Invariant 4: a request settles before its call does (no call runs on with its wait pending)."""
    replied = _first(clean.view, "permission.replied")
    late = attrs.evolve(replied, seq=clean.view.last_seq + 1)
    events = [e for e in clean.view.events if e is not replied] + [late]
    found = check_waits(clean.record, _with_events(clean.view, events))
    assert any("after its call" in v.message for v in found)


def test_a_wait_revoked_for_another_reason_than_the_stop_is_caught(clean: Run) -> None:
    """Invariant 4: a stopped turn's waits are revoked with the turn's own reason, the one its
    terminal event reports."""
    turn_id = next(iter(clean.record.turns))
    reason = {"type": "interrupt", "by": "api"}
    succeeded = next(e for e in clean.view.events if e.type == "session.execution.succeeded")
    stopped = attrs.evolve(
        succeeded, type="session.execution.interrupted", payload={"turn_id": turn_id, "reason": reason}
    )
    replied = _first(clean.view, "permission.replied")
    revoked = attrs.evolve(
        replied,
        type="permission.revoked",
        payload={**replied.payload, "reason": {"type": "error", "message": "x"}},
    )
    events = [stopped if e is succeeded else revoked if e is replied else e for e in clean.view.events]
    record = attrs.evolve(clean.record, intents={turn_id: Intent(reason=Interrupt(by="api"), phase=0, seq=0)})
    found = check_stop_order(record, _with_events(clean.view, events))
    assert [v.invariant for v in found] == [4]
    assert "was revoked for {'type': 'error', 'message': 'x'}" in found[0].message


def test_a_call_without_its_settlement_is_caught(clean: Run) -> None:
    """Invariant 5: every started call has exactly one settlement."""
    settled = _first(clean.view, "session.tool.succeeded")
    events = [e for e in clean.view.events if e is not settled]
    found = check_calls(clean.record, _with_events(clean.view, events))
    assert any(v.invariant == 5 and settled.payload["call_id"] in v.message for v in found)


def test_an_execute_call_that_drops_its_finished_nested_calls_is_caught(clean: Run) -> None:
    """Invariant 5: a stopped execute call keeps its finished nested calls in its partial result."""
    session_id = clean.record.sessions[0]
    turn_id = next(iter(clean.record.turns))
    seq = clean.view.last_seq

    def event(type: str, **payload: Any) -> Event:
        nonlocal seq
        seq += 1
        return Event(seq=seq, type=type, session_id=session_id, at="", payload=payload)

    def row(call_id: str, name: str, parent: str | None, status: str) -> ToolCallRow:
        return ToolCallRow(
            session_id=session_id,
            call_id=call_id,
            turn_id=turn_id,
            step_id=None,
            parent_call_id=parent,
            model_call_id=None,
            name=name,
            input={},
            status=status,
            output=None,
            error=None,
            partial=None,
            progress=None,
        )

    error = {"type": "interrupted", "message": "interrupted by the user"}
    events = [
        event("session.tool.started", turn_id=turn_id, call_id="x", name="execute", input={}),
        event(
            "session.tool.started", turn_id=turn_id, call_id="x.1", name="slow", input={}, parent_call_id="x"
        ),
        event("session.tool.succeeded", call_id="x.1", output="slept"),
        event("session.tool.failed", call_id="x", error=error, partial={"logs": [], "calls": []}),
    ]
    calls = {**clean.view.calls, (session_id, "x"): row("x", "execute", None, "failed")}
    calls[(session_id, "x.1")] = row("x.1", "slow", "x", "succeeded")
    view = attrs.evolve(clean.view, events=(*clean.view.events, *events), calls=calls)
    found = check_calls(clean.record, view)
    assert [v.message for v in found] == [
        "execute x (failed interrupted: interrupted by the user) lacks finished nested calls ['x.1'] in its "
        "partial result"
    ]


def test_a_history_with_an_unanswered_call_is_caught() -> None:
    """Invariant 5: the history sent to a model answers every tool call."""
    call = ModelToolCall(id="c1", name="slow", input={})
    chat = [ChatMessage(role="user", content="go"), ChatMessage(role="assistant", tool_calls=(call,))]
    assert chat_problems(chat) == ["tool call c1 is not answered"]


def test_a_reasonless_settlement_is_caught(clean: Run) -> None:
    """Invariant 6: no cancellation settles without a reason (in the log, or in a settled reason)."""
    record: RunRecord = attrs.evolve(
        clean.record, reasonless=[{"event": "reasonless_cancel", "actor": "step"}]
    )
    failed = attrs.evolve(
        _first(clean.view, "session.step.failed"),
        payload={"reason": {"type": "error", "message": REASONLESS}},
    )
    events = [failed if e.type == "session.step.failed" else e for e in clean.view.events]
    found = check_reasons(record, _with_events(clean.view, events))
    assert {v.invariant for v in found} == {6} and len(found) >= 2


def test_a_leftover_process_is_caught(clean: Run) -> None:
    """Invariant 6: no subprocess outlives its session."""
    found = check_run(clean.record, clean.view, leftovers=["4242 S sleep 600"])
    assert [str(v) for v in found] == ["invariant 6: a process outlived its session: 4242 S sleep 600"]


def test_a_gap_in_the_event_log_is_caught(clean: Run) -> None:
    """Invariant 7: seqs are gap-free and increasing."""
    events = [e for e in clean.view.events if e.seq != 2]
    found = check_log(clean.record, _with_events(clean.view, events))
    assert any(v.invariant == 7 and "not 1.." in v.message for v in found)


def test_a_turn_left_running_in_the_store_is_caught(clean: Run) -> None:
    """Invariant 7: the stored state agrees with the log: a turn that ended is settled."""
    turn_id = next(iter(clean.record.turns))
    turns = {**clean.view.turns, turn_id: attrs.evolve(clean.view.turns[turn_id], status="running")}
    found = check_log(clean.record, attrs.evolve(clean.view, turns=turns))
    assert [v.message for v in found] == [f"{turn_id} is running at the end"]


def test_the_run_file_is_a_real_database(clean: Run) -> None:
    """The clean run left its database where it said (a failing run's file is kept for a look)."""
    assert Path(clean.db).exists()
