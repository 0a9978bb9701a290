"""Invariant 10 (sub-agents): a real campaign run with a sub-agent, interrupted while the child waits,
holds every invariant; its log, tampered one way at a time, is caught."""

from __future__ import annotations

import random

import attrs
import pytest

from coordinator.chaos.campaign import Run, execute_run
from coordinator.chaos.faults import Fault, Injection
from coordinator.chaos.invariants import check_run
from coordinator.chaos.sub_agents import check_sub_agents
from coordinator.chaos.world import World, make_world
from coordinator.events import Event

SEED = 7


def _one_sub_agent(world: World) -> bool:
    """One session with one prompt, whose first step is one `task` call to a child that asks first."""
    if world.processes or world.prompts != (1,) or len(world.sub_scripts) != 1:
        return False
    first = world.scripts[0][0].get("tool_calls", [])
    child_first = world.sub_scripts[0][1][0].get("tool_calls", [])
    return [c["name"] for c in first] == ["task"] and [c["name"] for c in child_first] == ["guarded"]


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("chaos")
    index = next(
        i
        for i in range(3000)
        if _one_sub_agent(make_world(random.Random(f"{SEED}:{i}:world"), root, root / "x"))
    )
    quiet = execute_run(SEED, index, root=root, schedule=())
    occurrence = quiet.record.checkpoints.index("permission.wait") + 1
    return execute_run(
        SEED, index, root=root, schedule=(Injection(occurrence, "permission.wait", Fault("interrupt")),)
    )


def _child_terminal(run: Run) -> Event:
    child = next(row for row in run.view.turns.values() if row.task is not None)
    return next(
        e
        for e in run.view.events
        if e.type.startswith("session.execution.") and e.payload["turn_id"] == child.id
    )


def test_an_interrupt_inside_a_sub_agent_holds_every_invariant(interrupted: Run) -> None:
    """The interrupt lands in the child (its own) or comes down from the parent: either way, every
    invariant holds, children included (the record discovered the child's session and turn)."""
    assert len(interrupted.record.sessions) == 2 and len(interrupted.record.turns) == 2
    assert [a.effect for a in interrupted.record.applied] == ["interrupt answered True"]
    assert check_run(interrupted.record, interrupted.view, requests=interrupted.requests) == []


def test_a_child_ending_after_its_parent_is_caught(interrupted: Run) -> None:
    """Invariant 10: no child outlives its parent's turn."""
    end = _child_terminal(interrupted)
    late = attrs.evolve(end, seq=interrupted.view.last_seq + 1)
    events = tuple([e for e in interrupted.view.events if e is not end] + [late])
    found = check_sub_agents(interrupted.record, attrs.evolve(interrupted.view, events=events))
    assert any(v.invariant == 10 and "still running" in v.message for v in found)
    assert any(v.invariant == 10 and "after its parent" in v.message for v in found)


def test_a_child_stopped_for_a_reason_its_parent_never_had_is_caught(interrupted: Run) -> None:
    """Invariant 10: a child's reason with `parent` is its parent's own stop, naming the task call."""
    end = _child_terminal(interrupted)
    parent = end.payload["reason"].get("parent") or {"session_id": "x", "call_id": "y"}
    forged_reason = {"type": "timeout", "scope": "turn", "after": 1.0, "parent": parent}
    forged = attrs.evolve(end, payload={**end.payload, "reason": forged_reason})
    events = tuple(forged if e is end else e for e in interrupted.view.events)
    found = check_sub_agents(interrupted.record, attrs.evolve(interrupted.view, events=events))
    assert [v.invariant for v in found] == [10]
