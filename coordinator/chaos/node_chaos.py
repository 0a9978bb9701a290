"""Process chaos over several nodes: ``coordinator serve`` processes on one PostgreSQL database, driven
through every node, killed (SIGKILL), stopped (SIGTERM) and frozen (SIGSTOP, then SIGCONT after more
than a lease) at random, restarted; then the invariants over the store, its write audit, the tool
starts and every node's event stream.

A round makes a fresh database on the given server (``--db``), with the write audit's triggers
(``node_audit.py``), starts the nodes (``nodes.py``), creates sessions and prompts through
random nodes, answers permission requests and forms, and interrupts, through a node that does not
run the turn, while the faults come one after another, each at a random moment, mostly to the node
holding the most claims. Then it waits until every turn has settled and every node has served every
event, stops the nodes, checks (``node_checks.py`` and the single-node checks that hold across
nodes), and drops the database. A round is drawn from ``(seed, number)``; at real speed a replay meets
the same draws, not the same timings.
"""

from __future__ import annotations

import functools
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import attrs
import trio

from coordinator.chaos import node_checks, node_driver
from coordinator.chaos.invariants import check_log, check_reasons, check_terminals
from coordinator.chaos.node_audit import (
    create_scratch_database,
    drop_scratch_database,
    install_write_audit,
    open_snapshot,
    read_instances,
    read_write_audit,
)
from coordinator.chaos.node_checks import LifeRecord, Start
from coordinator.chaos.nodes import Cluster, Life, open_cluster
from coordinator.chaos.process_chaos import orphans
from coordinator.chaos.record import PhaseRecord, RunRecord, Violation, read_view
from coordinator.chaos.settling import check_calls, check_stop_order, check_waits
from coordinator.statuses import ClaimState, TurnStatus

NODES = 3
LEASE = 2.0  # seconds: a frozen node loses its claims after this (its pause is longer)
SETTLE_SECONDS = 60.0  # for every turn to settle once the faults are over
CAUGHT_UP_SECONDS = 15.0  # for every running node to serve the last event
POLL_SECONDS = 0.1
KINDS = ("SIGKILL", "SIGTERM", "SIGSTOP")
ENDS = {"SIGKILL": "crash", "SIGTERM": "shutdown", "SIGSTOP": "pause"}
SCRIPT = [
    {"tool_calls": [{"id": "a", "name": "counted", "input": {"seconds": 0.8, "tag": "a"}}], "delay": 0.1},
    {"tool_calls": [{"id": "b", "name": "counted_guarded", "input": {"seconds": 0.5, "tag": "b"}}]},
    {
        "tool_calls": [
            {"id": "c", "name": "question", "input": {"questions": [{"id": "q", "prompt": "Go on?"}]}}
        ]
    },
    {
        "tool_calls": [
            {"id": "d", "name": "counted", "input": {"seconds": 0.5, "tag": "d"}},
            {"id": "e", "name": "counted", "input": {"seconds": 1.0, "tag": "e"}},
        ]
    },
    {"text": "done"},
]


@attrs.frozen(kw_only=True)
class NodeFault:
    """A fault of a round: which signal, to which node, after how long, and for how long (SIGSTOP)."""

    kind: str
    busiest: bool  # to the node holding the most claims then, else to node ``node``
    node: int
    after: float
    pause: float = 0.0
    until_taken_over: bool = False  # SIGSTOP: frozen on past ``pause`` until its claims are taken


@attrs.frozen(kw_only=True)
class NodeRoundResult:
    """What a round did and which invariants failed, with what it counted for the campaign's figures."""

    seed: int
    number: int
    nodes: int
    applied: tuple[tuple[str, str], ...]  # (signal, life) of each fault
    violations: tuple[str, ...]
    counts: dict[str, int]
    errors: tuple[str, ...]  # error-level lines the nodes logged, for a failure's report
    seconds: float


def draw_faults(rng: random.Random, nodes: int) -> tuple[NodeFault, ...]:
    return tuple(
        NodeFault(
            kind=rng.choice(KINDS),
            busiest=rng.random() < 0.7,
            node=rng.randrange(nodes),
            after=rng.uniform(0.3, 1.5),
            pause=LEASE + rng.uniform(0.5, 2.0),
        )
        for _ in range(rng.choice((2, 3, 3, 4)))
    )


async def run_round(
    seed: int,
    number: int,
    root: Path,
    server_url: str,
    *,
    nodes: int = NODES,
    node_module: str = "coordinator",
    faults: tuple[NodeFault, ...] | None = None,
) -> NodeRoundResult:
    """One round on a database of its own (dropped at the end); see the module docstring.

    Args:
        seed: the campaign's seed; with ``number``, it draws the round.
        number: the round's number.
        root: a folder for the round's files (configs, logs, the starts file).
        server_url: a ``postgresql://`` URL of a database on the server to make the round's in.
        nodes: how many nodes.
        node_module: the module a node runs as ``python -m MODULE serve`` (a test plants a bug so).
        faults: these faults instead of drawn ones.
    """
    started = time.perf_counter()
    rng = random.Random(f"{seed}:nodes:{number}")
    plan = faults if faults is not None else draw_faults(rng, nodes)
    folder = root / f"nodes-round-{number}"
    folder.mkdir(parents=True)
    (folder / "script.json").write_text(json.dumps(SCRIPT))
    name = f"coordinator_chaos_{os.getpid()}_{seed}_{number}"
    url = create_scratch_database(server_url, name)
    try:
        install_write_audit(url)
        record = RunRecord(track_intents=False, discovering=True)
        lives, applied = await _drive(record, folder, url, rng, plan, nodes, node_module)
        violations = _check(record, url, lives, folder)
        violations += [Violation(6, f"a process outlived its node: {p}") for p in await orphans()]
        if violations:
            _write_evidence(record, lives, folder)
        result = NodeRoundResult(
            seed=seed,
            number=number,
            nodes=nodes,
            applied=tuple(applied),
            violations=tuple(dict.fromkeys(str(v) for v in violations)),
            counts=_counts(record, url, folder, applied),
            errors=tuple(_errors(lives)),
            seconds=time.perf_counter() - started,
        )
    finally:
        drop_scratch_database(server_url, name)
    return result


async def _drive(
    record: RunRecord,
    folder: Path,
    url: str,
    rng: random.Random,
    plan: tuple[NodeFault, ...],
    nodes: int,
    node_module: str,
) -> tuple[list[Life], list[tuple[str, str]]]:
    """Start the nodes, drive them through the faults until every turn settled, stop them."""
    applied: list[tuple[str, str]] = []
    person = random.Random(rng.random())
    async with open_cluster(folder, url, nodes=nodes, lease=LEASE, node_module=node_module) as cluster:
        await cluster.start_all()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(node_driver.respond, cluster, record, url, person)
            await node_driver.prompt(cluster, record, rng)
            for index, fault in enumerate(plan):
                await node_driver.wander(cluster, record, rng, url, fault.after)
                _boundary(record, url, ENDS[fault.kind], index > 0 and plan[index - 1].kind == "SIGTERM")
                applied.append(await _apply(cluster, fault, url))
            await _until_settled(record, url)
            await cluster.wait_quiet()
            await _caught_up(cluster, url)
            nursery.cancel_scope.cancel(reason="every turn settled")
        await cluster.stop_all()
        _boundary(record, url, "done", True)
        return cluster.lives, applied


def _boundary(record: RunRecord, url: str, end: str, shutdown: bool) -> None:
    """End a phase: the store as it is right before a fault (or at the end), in one snapshot.

    A phase's events are those committed after the previous fault was sent, so a SIGTERM's
    suspensions (and the resumptions another node makes of them at once) belong to the phase it
    begins, which says ``shutdown``.
    """
    with open_snapshot(url) as read:
        record.discover(read)
        view = read_view(read, record.sessions, list(record.turns))
    first = record.phases[-1].view.last_seq if record.phases else 0
    record.phases.append(
        PhaseRecord(
            number=len(record.phases),
            end=end,
            instance_id="",
            first_seq=first,
            shutdown=shutdown,
            store_failed=False,
            view=view,
        )
    )


async def _apply(cluster: Cluster, fault: NodeFault, url: str) -> tuple[str, str]:
    """Send the fault; a killed or stopped node starts again, and a frozen one continues, beside the
    next faults (a SIGTERM's stop is waited for: its suspensions belong to the phase it begins)."""
    if not cluster.answering():
        await cluster.wait_quiet()  # every node is frozen or starting again: a fault needs a running one
    life = _target(cluster, fault, url)
    if fault.kind == "SIGKILL":
        await cluster.kill(life)
        cluster.in_background(functools.partial(cluster.start, life.node))
    elif fault.kind == "SIGTERM":
        await cluster.terminate(life)
        cluster.in_background(functools.partial(cluster.start, life.node))
    else:
        pause = functools.partial(cluster.pause, life, fault.pause, until_taken_over=fault.until_taken_over)
        cluster.in_background(pause)
    return fault.kind, life.name


def _target(cluster: Cluster, fault: NodeFault, url: str) -> Life:
    """The node holding the most claims (``busiest``), else node ``fault.node``, else any running one."""
    lives = cluster.answering()
    if fault.busiest:
        with open_snapshot(url) as read:
            owners = [
                c.owner
                for s in read.list_sessions()
                if (c := read.get_claim(s.id)) and c.state == ClaimState.HELD
            ]
        held = {life: owners.count(life.instance_id) for life in lives}
        if held and max(held.values()) > 0:
            return max(held, key=lambda life: held[life])
    chosen = cluster.current.get(fault.node)
    return chosen if chosen is not None and chosen.answering else lives[0]


async def _until_settled(record: RunRecord, url: str) -> None:
    with trio.move_on_after(SETTLE_SECONDS):
        while True:
            with open_snapshot(url) as read:
                record.discover(read)
                rows = [read.get_turn(t) for t in record.turns]
            if all(row is not None and row.status == TurnStatus.SETTLED for row in rows):
                return
            await trio.sleep(POLL_SECONDS * 2)
    record.violate(1, f"the turns did not all settle within {SETTLE_SECONDS:g}s of the last fault")


async def _caught_up(cluster: Cluster, url: str) -> None:
    """Until every running node has served the store's last event (checked after: ``check_streams``)."""
    with open_snapshot(url) as read:
        last = read.last_seq()
    with trio.move_on_after(CAUGHT_UP_SECONDS):
        while any(len(life.stream) < last for life in cluster.answering()):
            await cluster.wait_served()


def _check(record: RunRecord, url: str, lives: list[Life], folder: Path) -> list[Violation]:
    """Every invariant of the round: those of the single-node rounds that hold across nodes, then
    the nodes' own (``node_checks``)."""
    by_pid = {entry.pid: entry.id for entry in read_instances(url)}
    records = [_life_record(life, life.instance_id or by_pid.get(life.pid, "")) for life in lives]
    name = node_checks.namer(records)
    for life in lives:
        entries = life.logs()
        record.reasonless += [e for e in entries if e.get("event") == "reasonless_cancel"]
        if life.end != "crash" and life.exit_code != 0:
            record.violate(6, f"{life.name} exited with {life.exit_code} after SIGTERM")
    view = record.phases[-1].view
    audit = read_write_audit(url)
    record.tenures = node_checks.tenures(audit)
    found = list(record.violations)
    for check in (check_terminals, check_waits, check_stop_order, check_calls, check_reasons, check_log):
        found += check(record, view)
    found += node_checks.check_streams(view, records)
    found += node_checks.check_fenced_writes(audit, name)
    found += node_checks.check_starts(_starts(folder), audit, records, view, name)
    found += node_checks.check_takeovers(audit, records, LEASE, name)
    found += node_checks.check_resumes(audit, view)
    found += node_checks.check_released(view)
    return found


def _write_evidence(record: RunRecord, lives: list[Life], folder: Path) -> None:
    """``events.txt`` beside the logs of a failing round: each event with the life that committed it
    and the claim epoch it wrote under (the write audit's), one a line."""
    names = {life.instance_id: life.name for life in lives}
    lines = []
    for event in record.phases[-1].view.events:
        writer, epoch = record.tenures.get(event.stored_seq, ("", None))
        ids = {
            k: v for k, v in event.payload.items() if k.endswith("_id") or k in ("after", "reason", "outcome")
        }
        for key in ("request", "form"):
            if isinstance(event.payload.get(key), dict):
                ids[f"{key}_id"] = event.payload[key].get("id")
        lines.append(
            f"{event.stored_seq} {names.get(writer, writer or '?')} epoch={epoch} {event.type} "
            f"{event.session_id} {json.dumps(ids, sort_keys=True)}"
        )
    (folder / "events.txt").write_text("\n".join(lines) + "\n")


def _life_record(life: Life, instance_id: str) -> LifeRecord:
    life.instance_id = instance_id
    return LifeRecord(
        name=life.name,
        instance_id=instance_id,
        pid=life.pid,
        started_at=life.started_at,
        ended_at=life.ended_at,
        end=life.end,
        paused=tuple(life.paused),
        stream=tuple(life.stream),
    )


def _starts(folder: Path) -> list[Start]:
    path = folder / "starts.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [Start.from_line(line) for line in lines if line.strip()]


def _counts(record: RunRecord, url: str, folder: Path, applied: list[tuple[str, str]]) -> dict[str, int]:
    view = record.phases[-1].view
    audit = read_write_audit(url)
    counts = {kind: sum(1 for k, _ in applied if k == kind) for kind in KINDS}
    counts["turns"] = len(record.turns)
    counts["events"] = len(view.events)
    counts["resumed"] = sum(1 for e in view.events if e.type == "session.execution.resumed")
    counts["takeovers"] = sum(1 for row in audit if node_checks.is_takeover(row))
    counts["counted_starts"] = len(_starts(folder))
    counts["interrupted"] = sum(1 for e in view.events if e.type == "session.execution.interrupted")
    return counts


def _errors(lives: list[Life]) -> list[str]:
    return [
        f"{life.name}: {_summary(entry)}"
        for life in lives
        for entry in life.logs()
        if entry.get("level") == "error"
    ]


def _summary(entry: dict[str, Any]) -> str:
    """A logged error in one line: its event, and its exception's type and message when it has one."""
    exceptions = entry.get("exception")
    if isinstance(exceptions, list) and exceptions and isinstance(exceptions[0], dict):
        return f"{entry.get('event')} {exceptions[0].get('exc_type')}: {exceptions[0].get('exc_value')}"
    return str(entry.get("event"))
