"""Process chaos over three nodes on one PostgreSQL database (``coordinator/chaos/node_chaos.py``), and
the checks of invariant 9 that only such rounds can make, fed what a bug would leave."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import attrs
import pytest
import trio

from coordinator.chaos import node_checks, processes
from coordinator.chaos.node_audit import AuditRow
from coordinator.chaos.node_chaos import LEASE, NodeFault, NodeRoundResult, run_round
from coordinator.chaos.node_checks import LifeRecord, Start
from coordinator.chaos.record import StoreView
from coordinator.events import Event
from tests.backends import require_postgres, server_url

# The freezes last until the frozen node's claims are taken over: how soon a node restarted beside
# the freeze comes up to take them depends on the machine's load, and the tests need a takeover.
EVERY_KIND = (
    NodeFault(kind="SIGSTOP", busiest=True, node=0, after=0.8, pause=LEASE + 1.0, until_taken_over=True),
    NodeFault(kind="SIGKILL", busiest=True, node=1, after=0.6),
    NodeFault(kind="SIGTERM", busiest=True, node=2, after=0.6),
)
FROZEN_OWNER = (
    NodeFault(kind="SIGSTOP", busiest=True, node=0, after=1.0, pause=LEASE + 2.0, until_taken_over=True),
)


def _round(tmp_path: Path, number: int, **options: object) -> NodeRoundResult:
    require_postgres()
    with processes.adopting_orphans():
        return trio.run(functools.partial(run_round, 1, number, tmp_path, server_url(), **options))


@pytest.mark.slow
def test_three_nodes_killed_stopped_and_frozen_keep_every_invariant(tmp_path: Path) -> None:
    """Each kind of fault once, to the node with the most turns, then a drawn round: no tool call
    starts twice, nothing is committed under a lost claim, every node serves the store's sequence."""
    fixed = _round(tmp_path, 0, faults=EVERY_KIND)
    assert [kind for kind, _ in fixed.applied] == ["SIGSTOP", "SIGKILL", "SIGTERM"]
    assert fixed.violations == (), _evidence(tmp_path, fixed)
    assert fixed.counts["takeovers"] >= 1 and fixed.counts["counted_starts"] >= 1, fixed.counts
    drawn = _round(tmp_path, 1)
    assert drawn.violations == (), _evidence(tmp_path, drawn)


def _evidence(tmp_path: Path, result: NodeRoundResult) -> str:
    """The violations, then the events (``events.txt``) of each session they name or whose ids they
    name: what a failure in CI leaves to read once its folder is gone."""
    lines = (tmp_path / f"nodes-round-{result.number}" / "events.txt").read_text().splitlines()
    named = set(re.findall(r"\b[a-z]+_[0-9a-f]{24}\b", " ".join(result.violations)))
    sessions = {line.split()[4] for line in lines if named & set(re.findall(r"[a-z]+_[0-9a-f]{24}", line))}
    shown = [line for line in lines if line.split()[4] in sessions]
    return "\n".join([*result.violations, *shown])


@pytest.mark.slow
def test_a_node_that_writes_past_the_fence_is_caught(tmp_path: Path) -> None:
    """Nodes with the fence check removed (the planted bug), the busiest frozen beyond its lease:
    when it continues, its commits and tool starts for turns taken over are named, invariant 9."""
    result = _round(tmp_path, 0, faults=FROZEN_OWNER, node_module="tests.coordinator.chaos.unfenced_node")
    stale = [v for v in result.violations if v.startswith("invariant 9") and "was committed by" in v]
    assert stale, result.violations


def _claim(
    id: int,
    xid: int,
    writer: str,
    owner: str | None,
    epoch: int,
    state: str,
    old: tuple[str | None, int, str],
) -> AuditRow:
    return AuditRow(
        id=id,
        xid=xid,
        at=float(id),
        writer=writer,
        kind="claim",
        session_id="s",
        seq=None,
        event_type=None,
        owner=owner,
        epoch=epoch,
        state=state,
        old_owner=old[0],
        old_epoch=old[1],
        old_state=old[2],
    )


def _event(
    id: int, xid: int, writer: str, seq: int, type: str, claim: tuple[str | None, int, str]
) -> AuditRow:
    return AuditRow(
        id=id,
        xid=xid,
        at=float(id),
        writer=writer,
        kind="event",
        session_id="s",
        seq=seq,
        event_type=type,
        owner=claim[0],
        epoch=claim[1],
        state=claim[2],
    )


def _name(instance: str | None) -> str:
    return instance or "nobody"


def test_events_of_the_holder_pass_and_one_after_a_takeover_is_named() -> None:
    """A start (claim taken, then its event), a settlement (event, then release) and a decision by
    another node are fine; the old owner's commit after the takeover is the violation."""
    audit = [
        _claim(1, 10, "a", "a", 1, "held", (None, 0, "released")),
        _event(2, 10, "a", 1, "session.turn.started", ("a", 1, "held")),
        _event(3, 11, "b", 2, "permission.replied", ("a", 1, "held")),
        _claim(4, 12, "b", "b", 2, "held", ("a", 1, "held")),
        _event(5, 13, "a", 3, "session.tool.succeeded", ("b", 2, "held")),
        _event(6, 14, "b", 4, "session.execution.succeeded", ("b", 2, "held")),
        _claim(7, 14, "b", None, 2, "released", ("b", 2, "held")),
        _event(8, 14, "b", 5, "session.idle", (None, 2, "released")),
    ]
    found = [str(v) for v in node_checks.check_fenced_writes(audit, _name)]
    assert found == [
        "invariant 9: seq 3 session.tool.succeeded of s was committed by a while the claim was held by b at epoch 2"
    ]


def _life(name: str, instance: str, pid: int, stream: tuple[dict[str, object], ...] = ()) -> LifeRecord:
    return LifeRecord(
        name=name,
        instance_id=instance,
        pid=pid,
        started_at=0.0,
        ended_at=None,
        end="done",
        paused=(),
        stream=stream,
    )


def _view(events: list[Event]) -> StoreView:
    return StoreView(
        events=tuple(events),
        turns={},
        claims={},
        sessions={},
        calls={},
        permissions={},
        forms={},
        running_steps={},
        chats={},
    )


def test_a_call_started_on_two_nodes_is_named_and_so_is_a_start_without_the_claim() -> None:
    """9a counts starts of a call by its tag in its session; 9b needs the starter to hold the claim."""
    audit = [
        _claim(1, 10, "a", "a", 1, "held", (None, 0, "released")),
        _claim(2, 11, "b", "b", 2, "held", ("a", 1, "held")),
    ]
    audit = [attrs.evolve(row, at=100.0 + row.id) for row in audit]
    lives = [_life("n0.0", "a", 1), _life("n1.0", "b", 2)]
    starts = [
        Start(pid=2, session_id="s", turn_id="t", tag="b", at=105.0),
        Start(pid=1, session_id="s", turn_id="t", tag="b", at=106.0),
    ]
    found = [str(v) for v in node_checks.check_starts(starts, audit, lives, _view([]), _name)]
    assert found == [
        "invariant 9: call b of s started 2 times (b, a)",
        "invariant 9: call b of s started on a while b held its claim",
    ]


def test_a_stream_that_skips_or_changes_an_event_or_stops_short_is_named() -> None:
    """9c: every node serves the store's sequence, unchanged, and a node running at the end serves it all."""
    events = [Event(seq=n, type="x", session_id=None, at="t", payload={"n": n}) for n in (1, 2, 3)]
    stored = [e.to_dict() for e in events]
    lives = [
        _life("n0.0", "a", 1, tuple(stored)),
        _life("n1.0", "b", 2, (stored[0], stored[2])),
        _life("n2.0", "c", 3, (stored[0], {**stored[1], "n": 9})),
        _life("n0.1", "d", 4, tuple(stored[:2])),
    ]
    found = [str(v) for v in node_checks.check_streams(_view(events), lives)]
    assert found == [
        "invariant 9: n1.0's event stream is not seq 1, 2, ...: [1, 3]",
        "invariant 9: n2.0 served seq 2 as {'seq': 2, 'type': 'x', 'session_id': None, 'at': 't', 'n': 9}, "
        "stored as {'seq': 2, 'type': 'x', 'session_id': None, 'at': 't', 'n': 2}",
        "invariant 9: n2.0 ran to the end but served 2 of 3 events",
        "invariant 9: n0.1 ran to the end but served 2 of 3 events",
    ]
