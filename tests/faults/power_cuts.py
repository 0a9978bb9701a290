"""The power-cut campaign: the real server on the lazy filesystem, killed and its power cut at random.

A round makes a folder on the rig (``tests/faults/lazyfs.py``) for the database, starts
``coordinator serve`` on it, and drives it over HTTP as people would: sessions created and prompted,
two followers of the event stream (one with text deltas, one without), permission requests answered,
forms submitted, sometimes an interrupt. Each turn runs tools that count their starts in a file outside
the rig. At a seeded moment the server is killed (``kill -9``, its sync helper with it) and the power
is cut: each file keeps a seeded part of what was written and not synced. Then, before anything runs
on what survived:

- the database opens and ``PRAGMA integrity_check`` answers ok;
- everything acknowledged so far is there: every session and turn a 2xx created, every permission reply
  and form answer a 2xx confirmed, every interrupt a 2xx accepted, every event a follower received (same
  seq, same content), every tool start the tools counted (its ``session.tool.started`` stored).

In a quarter of the lives the disk also refuses every sync for a while (``EIO``; the rig forgets the
writes of a failed sync, as Linux does): the server answers 503 meanwhile, writes its log again once
the disk takes it, and goes on in the same process; sessions are created and prompted after that too,
so that the cut tests what was acknowledged after the recovery.

The server is restarted on it and driven again; one to three cuts a round, and a last life that runs
until every turn has settled, after which the chaos campaign's invariants (``check_run``) are checked:
exactly-once resume among them. No seq may ever name two different events, across every life.

``python -m tests.faults.power_cuts --cuts 500`` (``make faults``) prints a line a round and ends with
one summary line of counts; ``--synchronous normal`` runs the server with SQLite's NORMAL to measure
what that mode loses.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import apsw
import attrs
import httpx
import trio

from coordinator import errors
from coordinator.chaos import processes
from coordinator.chaos.invariants import check_run
from coordinator.chaos.record import PhaseRecord, RunRecord, read_view
from coordinator.chaos.tools import STARTS_ENV
from coordinator.client import CoordinatorClient
from coordinator.event_payloads import ToolStarted
from coordinator.events import Event
from coordinator.statuses import FormStatus, PermissionStatus, TurnStatus
from coordinator.store import open_read_view
from tests.faults.rig import REPO, Rig, mounted

TOKEN = "power-cut-token"
CONFIG = """\
[server]
db = "{db}"
shutdown_grace = 5
token = "{token}"

[model]
provider = "scripted"
script = "script.json"

[[plugin]]
entry = "coordinator.chaos.tools:counted"

[[permission]]
action = "*"
effect = "allow"

[[permission]]
action = "shell"
effect = "ask"
"""
SCRIPT = [
    {"tool_calls": [{"id": "a", "name": "counted", "input": {"seconds": 0.2, "tag": "a"}}], "delay": 0.05},
    {"tool_calls": [{"id": "b", "name": "shell", "input": {"command": "true"}}]},
    {
        "tool_calls": [
            {"id": "c", "name": "question", "input": {"questions": [{"id": "q", "prompt": "Go on?"}]}}
        ]
    },
    {
        "tool_calls": [
            {"id": "d", "name": "counted", "input": {"seconds": 0.1, "tag": "d"}},
            {"id": "e", "name": "counted", "input": {"seconds": 0.3, "tag": "e"}},
        ]
    },
    {"text": "done, after every tool"},
]
SYNC_FAULT_SHARE = 0.25
"""The share of lives (but the last) in which the disk refuses syncs for a while."""
START_SECONDS = 30.0
SETTLE_SECONDS = 60.0
POLL_SECONDS = 0.05


@attrs.define
class Acknowledged:
    """What the server acknowledged to its clients, over every life of a round."""

    sessions: set[str] = attrs.Factory(set)
    turns: dict[str, str] = attrs.Factory(dict)  # turn id -> session id
    replies: set[str] = attrs.Factory(set)  # permission request ids
    forms: set[str] = attrs.Factory(set)
    interrupts: set[str] = attrs.Factory(set)  # session ids
    events: dict[int, dict[str, Any]] = attrs.Factory(dict)  # seq -> the event as first received

    def count(self) -> int:
        return sum(
            map(len, (self.sessions, self.turns, self.replies, self.forms, self.interrupts, self.events))
        )


@attrs.frozen(kw_only=True)
class RoundResult:
    number: int
    kept: Path | None  # where a failed round's logs and database were copied
    cuts: tuple[str, ...]  # what each cut did, file by file
    acknowledged: int
    lost: tuple[str, ...]
    integrity_failures: int
    cuts_losing: int
    violations: tuple[str, ...]  # the chaos invariants, and seqs that named two events
    starts: int
    sync_faults: int  # lives in which the disk refused syncs for a while
    recoveries: int  # times a server made its log durable again and went on
    seconds: float


class Driven(Protocol):
    """What the drivers (``prompt_sessions``, ``wander``, ``follow``, ``respond``) fill: a round of this
    campaign, or of the PostgreSQL one (``pg_faults.py``, with no rig)."""

    rng: random.Random
    acks: Acknowledged
    record: RunRecord
    clashes: list[str]
    rig: Rig | None


@attrs.define
class Round:
    """One round's folders, server command, record and findings."""

    seed: int
    number: int
    rig: Rig
    folder: Path  # outside the rig: config, script, logs, the tools' count of starts
    synchronous: str
    rng: random.Random
    acks: Acknowledged = attrs.Factory(Acknowledged)
    record: RunRecord = attrs.Factory(lambda: RunRecord(track_intents=False))
    lost: dict[str, str] = attrs.Factory(dict)  # what was lost -> when it was first found missing
    clashes: list[str] = attrs.Factory(list)
    integrity_failures: int = 0
    schema_lost: bool = False
    cuts_losing: int = 0  # cuts after which something acknowledged was missing
    cut_reports: list[str] = attrs.Factory(list)
    sync_faults: int = 0
    recoveries: int = 0

    @property
    def db(self) -> Path:
        return self.rig.mount / f"round-{self.number}" / "db.sqlite"

    @property
    def starts(self) -> Path:
        return self.folder / "starts.jsonl"


async def run_round(
    seed: int, number: int, rig: Rig, scratch: Path, synchronous: str, stop_at_first_loss: bool = False
) -> RoundResult:
    """Start, drive, kill and cut one to three times, then a last life until all settled; check.
    ``stop_at_first_loss``: end the round at the first cut that lost something acknowledged."""
    started = time.perf_counter()
    folder = scratch / f"round-{number}"
    folder.mkdir()
    rng = random.Random(f"{seed}:power:{number}")
    state = Round(seed=seed, number=number, rig=rig, folder=folder, synchronous=synchronous, rng=rng)
    state.db.parent.mkdir()
    (folder / "config.toml").write_text(CONFIG.format(db=state.db, token=TOKEN))
    (folder / "script.json").write_text(json.dumps(SCRIPT))
    cuts = rng.choice((1, 2, 3))
    for life in range(cuts + 1):
        await _live(state, life, last=life == cuts)
        if state.lost and stop_at_first_loss:
            break
    if state.lost and stop_at_first_loss:
        violations = ["stopped at the first loss: the invariants were not checked"]
    elif state.schema_lost:
        violations = ["a cut left a database without its tables: the invariants were not checked"]
    else:
        view = state.record.phases[-1].view
        violations = [str(v) for v in check_run(state.record, view, leftovers=await _orphans(rig))]
    lost = tuple(f"{when}: {item}" for item, when in state.lost.items())
    violations = list(dict.fromkeys([*violations, *state.clashes]))
    kept = _keep(state) if lost or violations else None
    return RoundResult(
        number=number,
        kept=kept,
        cuts=tuple(state.cut_reports),
        acknowledged=state.acks.count(),
        lost=lost,
        integrity_failures=state.integrity_failures,
        cuts_losing=state.cuts_losing,
        violations=tuple(violations),
        starts=len(read_starts(state.starts)),
        sync_faults=state.sync_faults,
        recoveries=state.recoveries,
        seconds=time.perf_counter() - started,
    )


def _keep(state: Round) -> Path:
    """Copy a failed round's server logs and what its last life left of the database out of the
    scratch folder, for whoever reads the failure."""
    kept = Path(tempfile.gettempdir()) / f"power-cut-failed-{state.seed}-{state.number}"
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(state.folder, kept)
    for path in state.db.parent.iterdir():
        shutil.copy2(path, kept / path.name)
    return kept


async def _live(state: Round, life: int, *, last: bool) -> None:
    """One server's life on what the last cut left: drive it, then kill it and cut (or, the last
    life, let every turn settle and stop it gracefully)."""
    first_seq = 0
    with contextlib.suppress(errors.StoreError):  # no database yet, or a cut left none of it
        first_seq = _read(state.db, lambda read: read.last_seq()) if state.db.exists() else 0
    log_path = state.folder / f"server-{life}.log"
    with log_path.open("wb") as log:
        proc, url = await _start(state, log)
        try:
            async with CoordinatorClient(url, TOKEN, timeout=5) as client, trio.open_nursery() as nursery:
                nursery.start_soon(follow, client, state, True)
                nursery.start_soon(follow, client, state, False)
                nursery.start_soon(respond, client, state)
                if last:
                    await _until_settled(state)
                else:
                    await prompt_sessions(client, state)
                    if state.rng.random() < SYNC_FAULT_SHARE:
                        await _refuse_syncs_a_while(client, state)
                    await wander(client, state)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                if not last:
                    _power_off(state.rig, proc.pid)
                state.rig.fail()  # no process is left to sync: the disk takes syncs again
                code = await stop_server(proc, "SIGTERM" if last else "SIGKILL")
    if last:
        if code != 0:
            state.record.violate(6, f"server {life} exited with {code} after SIGTERM")
        _check_acknowledged(state, life=None)
    else:
        await _orphans(
            state.rig
        )  # the sync helper exits once its pipe closes: nothing may sync after the cut
        report = state.rig.cut(f"{state.seed}:{state.number}:{life}")
        state.cut_reports.append(
            ", ".join(f"{name} {what}" for name, what in report.items()) or "nothing unsynced"
        )
        _check_integrity(state)
        _check_acknowledged(state, life)
    lines = log_path.read_text(errors="replace").splitlines()
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    state.record.reasonless += [e for e in entries if e.get("event") == "reasonless_cancel"]
    instance = next((e["instance_id"] for e in entries if e.get("event") == "coordinator_started"), "")
    state.recoveries += sum(e.get("event") == "store_recovered" for e in entries)
    retaken = tuple(
        e["turn_id"]
        for e in entries
        if e.get("event") == "turn_recovered" and e.get("cause") == "store_failed"
    )
    try:
        view = _read(state.db, lambda read: read_view(read, state.record.sessions, list(state.record.turns)))
    except errors.StoreError:
        state.schema_lost = True  # nothing the invariants could be checked on
        return
    state.record.phases.append(
        PhaseRecord(
            number=life,
            end="done" if last else "crash",
            instance_id=instance,
            first_seq=first_seq,
            shutdown=last,
            store_failed=False,
            view=view,
            retaken=retaken,
        )
    )


async def _start(state: Round, log: Any) -> tuple[trio.Process, str]:
    return await start_server(state.folder, log, synchronous=state.synchronous, starts=state.starts)


async def start_server(
    folder: Path, log: Any, *, synchronous: str, starts: Path, config: Path | None = None
) -> tuple[trio.Process, str]:
    """``coordinator serve`` in ``folder`` on ``config`` (``folder/config.toml`` by default), its tools
    counting starts in ``starts``; returns the process and the URL it listens on."""
    entry = ["-m", "coordinator"] if synchronous == "full" else ["-m", "tests.faults.serve_normal"]
    config = config or folder / "config.toml"
    command = [sys.executable, *entry, "serve", "--config", str(config), "--port", "0"]
    env = {**os.environ, "PYTHONPATH": str(REPO), STARTS_ENV: str(starts)}
    proc = await trio.lowlevel.open_process(
        command, cwd=folder, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env
    )
    assert proc.stdout is not None
    seen = b""
    with trio.fail_after(START_SECONDS):
        while b"listening on " not in seen or not seen.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"the server exited before listening: {seen!r}")
            seen += chunk
    return proc, seen.decode().split("listening on ", 1)[1].split()[0]


def _power_off(rig: Rig, server: int) -> None:
    """Kill every process below this one but the rig's, as a power cut would, all at once: the sync
    helper before the server, so that no sync the server asked completes after it died (a helper
    left alone syncs what it was asked before it reads the end of its pipe)."""
    doomed = [seen for seen in processes.descendants().values() if seen.pid != rig.pid]
    for seen in sorted(doomed, key=lambda seen: seen.pid == server):
        with contextlib.suppress(OSError):
            os.kill(seen.pid, signal.SIGKILL)


async def stop_server(proc: trio.Process, sent: str) -> int | None:
    proc.send_signal(getattr(signal, sent))
    with trio.move_on_after(START_SECONDS):
        return await proc.wait()
    proc.kill()
    return await proc.wait()


async def _refuse_syncs_a_while(client: CoordinatorClient, state: Round) -> None:
    """The disk refuses every sync for a while, under load (503s meanwhile); then, most times, more
    sessions once the server had time to recover, acknowledged after the failure."""
    await trio.sleep(state.rng.uniform(0, 0.5))
    state.sync_faults += 1
    state.rig.fail(sync="EIO")
    await prompt_sessions(client, state)
    await trio.sleep(state.rng.uniform(0.1, 1.5))
    state.rig.fail()
    if state.rng.random() < 0.7:
        await trio.sleep(state.rng.uniform(0.5, 2.5))
        await prompt_sessions(client, state)


async def prompt_sessions(client: CoordinatorClient, state: Driven) -> None:
    """A new session or two, each prompted once or twice; every 2xx is an acknowledgement."""
    for _ in range(state.rng.choice((1, 2))):
        with _server_may_die():
            session = await client.create_session("power cut")
            state.acks.sessions.add(session.id)
            state.record.sessions.append(session.id)
            for n in range(state.rng.choice((1, 2))):
                turn_id = await client.prompt(session.id, f"prompt {n}")
                state.acks.turns[turn_id] = session.id
                state.record.turns[turn_id] = session.id


async def wander(client: CoordinatorClient, state: Driven) -> None:
    """Let the server work a random while, sometimes interrupting a session on the way."""
    await trio.sleep(state.rng.uniform(0.05, 1.5))
    if state.record.sessions and state.rng.random() < 0.3:
        session_id = state.rng.choice(state.record.sessions)
        with _server_may_die():
            if await client.interrupt(session_id):
                state.acks.interrupts.add(session_id)
                state.record.interrupted_sessions.add(session_id)
        await trio.sleep(state.rng.uniform(0, 0.3))
    # Most cuts come while the log has writes not yet synced: between a commit and its sync, the
    # moment a missing or late sync would lose something (elsewhere, everything is usually synced).
    if state.rng.random() < 0.7 and state.rig is not None:
        with trio.move_on_after(1.0):
            while True:
                if any(name.endswith("-wal") for name in state.rig.pending()):
                    return
                await trio.sleep(0.0002)


async def follow(client: CoordinatorClient, state: Driven, deltas: bool) -> None:
    """The whole event stream from seq 0, until cancelled: every event with a seq is acknowledged."""
    with _server_may_die():
        async for event in client.events(after=0, deltas=deltas):
            _received(state, event)


def _received(state: Driven, event: dict[str, Any]) -> None:
    seq = event.get("seq")
    if not isinstance(seq, int):
        return  # a text delta: not stored, so not promised
    first = state.acks.events.setdefault(seq, event)
    if first != event:
        state.clashes.append(f"seq {seq} named two events: {_brief(first)} and then {_brief(event)}")


async def respond(client: CoordinatorClient, state: Driven) -> None:
    """Answer every pending permission (once) and form, polling, until cancelled."""
    while True:
        with _server_may_die():
            for request in await client.pending_permissions():
                with _settled_meanwhile():
                    await client.reply_permission(request.session_id, request.id, "once")
                    state.acks.replies.add(request.id)
            for session_id in list(state.record.sessions):
                for form in await client.pending_forms(session_id):
                    with _settled_meanwhile():
                        await client.submit_form(session_id, form.id, {q.id: "yes" for q in form.questions})
                        state.acks.forms.add(form.id)
        await trio.sleep(POLL_SECONDS)


@contextlib.contextmanager
def _server_may_die() -> Iterator[None]:
    try:
        yield
    except (httpx.HTTPError, errors.ClientError):
        pass  # killed mid-request: no answer, nothing acknowledged


@contextlib.contextmanager
def _settled_meanwhile() -> Iterator[None]:
    try:
        yield
    except errors.ClientError:
        pass  # a stop settled it first: the answer was not acknowledged


async def _until_settled(state: Round) -> None:
    with trio.move_on_after(SETTLE_SECONDS):
        while True:
            rows = _read(state.db, lambda read: [read.get_turn(t) for t in state.record.turns])
            # A turn a cut lost (counted as lost already) has nothing left to settle.
            if all(row is None or row.status == TurnStatus.SETTLED for row in rows):
                return
            await trio.sleep(POLL_SECONDS * 4)
    state.record.violate(1, f"the last server did not settle every turn within {SETTLE_SECONDS:g}s")


def _check_integrity(state: Round) -> None:
    try:
        with contextlib.closing(apsw.Connection(str(state.db))) as conn:
            answer = [row[0] for row in conn.execute("PRAGMA integrity_check")]
    except apsw.Error as error:
        answer = [f"{type(error).__name__}: {error}"]
    if answer != ["ok"]:
        state.integrity_failures += 1
        when = f"after cut {len(state.cut_reports)}"
        state.lost[f"integrity_check {when}: {answer[:3]}"] = when


def _check_acknowledged(state: Round, life: int | None) -> None:
    """What was acknowledged and is not in the database: one line each, into ``state.lost``."""
    when = "at the end" if life is None else f"after cut {life + 1}"
    try:
        with open_read_view(str(state.db)) as read:
            missing = missing_acknowledged(read, state.acks, read_starts(state.starts))
    except errors.StoreError as error:  # not even the schema survived
        when += f" (the database lost its tables: {error})"
        missing = _everything(state.acks)
    # One line per item: an event is named by its seq, whatever the store has there now.
    known = {_item_key(item) for item in state.lost}
    new = [item for item in missing if _item_key(item) not in known]
    for item in new:
        state.lost[item] = when
    if new and life is not None:
        state.cuts_losing += 1


def missing_acknowledged(read: Any, acks: Acknowledged, starts: list[tuple[str, str, str]]) -> list[str]:
    missing = [f"session {s}" for s in sorted(acks.sessions) if read.get_session(s) is None]
    missing += [f"turn {t}" for t in sorted(acks.turns) if read.get_turn(t) is None]
    for request_id in sorted(acks.replies):
        request = read.get_permission(request_id)
        if request is None or request.status == PermissionStatus.PENDING:
            missing.append(f"the reply to permission {request_id}")
    for form_id in sorted(acks.forms):
        form = read.get_form(form_id)
        if form is None or form.status == FormStatus.PENDING:
            missing.append(f"the answer to form {form_id}")
    for session_id in sorted(acks.interrupts):
        turns = [read.get_turn(t) for t in read.turn_ids_of_session(session_id)]
        if not any(row is not None and _interrupted(row) for row in turns):
            missing.append(f"the interrupt of session {session_id}")
    stored = all_events(read)
    started = {(e.session_id, e.payload["call_id"]) for e in stored if e.type == ToolStarted.type}
    for session_id, turn_id, tag in starts:
        calls = [c for c in read.tool_calls_of_turn(turn_id) if c.model_call_id == tag]
        if not any((session_id, c.call_id) in started for c in calls):
            missing.append(f"the start of tool call {tag} of turn {turn_id}, which ran")
    return missing + _missing_events({e.seq: e for e in stored}, acks.events)


def _everything(acks: Acknowledged) -> list[str]:
    return [
        *(f"session {s}" for s in acks.sessions),
        *(f"turn {t}" for t in acks.turns),
        *(f"the reply to permission {r}" for r in acks.replies),
        *(f"the answer to form {f}" for f in acks.forms),
        *(f"the interrupt of session {s}" for s in acks.interrupts),
        *(f"event {seq}" for seq in acks.events),
    ]


def _item_key(item: str) -> str:
    return item.split(",", 1)[0].split(" (", 1)[0]


def _interrupted(row: Any) -> bool:
    for reason in (row.stop_reason, row.soft_stop):
        if reason is not None and reason.type == "interrupt":
            return True
    return False


def all_events(read: Any) -> list[Event]:
    events: list[Event] = []
    while page := read.events_after(events[-1].seq if events else 0, limit=500):
        events += page
    return events


def _missing_events(stored: dict[int | None, Event], received: dict[int, dict[str, Any]]) -> list[str]:
    missing = []
    for seq, event in sorted(received.items()):
        here = stored.get(seq)
        if here is None:
            missing.append(f"event {seq}, which a follower received ({event.get('type')})")
        elif json.loads(json.dumps(here.to_dict())) != event:
            missing.append(
                f"event {seq}, which a follower received ({_brief(event)}; the store has {here.type})"
            )
    return missing


def read_starts(path: Path) -> list[tuple[str, str, str]]:
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(line["session_id"], line["turn_id"], line["tag"]) for line in lines]


def _brief(event: dict[str, Any]) -> str:
    return f"{event.get('type')} of {event.get('session_id')}"


def _read(db: Path, reader: Any) -> Any:
    with open_read_view(str(db)) as view:
        return reader(view)


async def _orphans(rig: Rig) -> list[str]:
    """Children left after a server exited (its sync helper, its tools' processes): waited for."""
    rig_process = frozenset({rig.pid})
    for _ in range(100):
        if not processes.leftovers(rig_process):
            return []
        await trio.sleep(POLL_SECONDS)
    return processes.leftovers(rig_process)


@attrs.define
class Totals:
    rounds: int = 0
    cuts: int = 0
    acknowledged: int = 0
    lost: int = 0
    integrity_failures: int = 0
    violations: int = 0
    starts: int = 0
    dropped_log_writes: int = 0  # cuts that dropped some unsynced writes of the write-ahead log
    cuts_losing: int = 0
    sync_faults: int = 0
    recoveries: int = 0

    def add(self, result: RoundResult) -> None:
        self.rounds += 1
        self.cuts += len(result.cuts)
        self.dropped_log_writes += sum(("-wal lose" in c) or ("-wal torn" in c) for c in result.cuts)
        self.acknowledged += result.acknowledged + result.starts
        self.lost += len(result.lost) - result.integrity_failures
        self.integrity_failures += result.integrity_failures
        self.cuts_losing += result.cuts_losing
        self.violations += len(result.violations)
        self.starts += result.starts
        self.sync_faults += result.sync_faults
        self.recoveries += result.recoveries

    def line(self, synchronous: str) -> str:
        return (
            f"power cuts {self.cuts} (synchronous={synchronous}, {self.rounds} rounds, "
            f"{self.dropped_log_writes} dropping unsynced log writes), "
            f"acknowledged items {self.acknowledged}, acknowledged items lost {self.lost} "
            f"(by {self.cuts_losing} cuts), "
            f"integrity failures {self.integrity_failures}, invariant violations {self.violations}, "
            f"tool starts {self.starts}, lives with syncs refused {self.sync_faults} "
            f"(recoveries in process {self.recoveries})"
        )


def run_campaign(
    *,
    cuts: int,
    seed: int,
    synchronous: str,
    out: Any,
    stop_at_first_loss: bool = False,
    first_round: int = 0,
) -> Totals:
    """Rounds until ``cuts`` power cuts were made; a line each, then the summary line."""
    totals = Totals()
    with tempfile.TemporaryDirectory(prefix="power-cuts-") as scratch, processes.adopting_orphans():
        root = Path(scratch)
        with mounted(root / "rig") as rig:
            number = first_round
            while totals.cuts < cuts:
                result = trio.run(run_round, seed, number, rig, root, synchronous, stop_at_first_loss)
                totals.add(result)
                _print_round(result, seed, synchronous, out)
                number += 1
                if stop_at_first_loss and (result.lost or result.integrity_failures):
                    break
    out.write(totals.line(synchronous) + "\n")
    return totals


def _print_round(result: RoundResult, seed: int, synchronous: str, out: Any) -> None:
    verdict = "ok" if not (result.lost or result.violations) else "FAILED"
    out.write(
        f"round {result.number}: {len(result.cuts)} cut(s), {result.acknowledged} acknowledged, "
        f"{len(result.lost)} lost, {len(result.violations)} violations, {result.seconds:.1f}s: {verdict}\n"
    )
    for cut in result.cuts:
        out.write(f"  cut: {cut}\n")
    for item in [*result.lost[:10], *result.violations[:10]]:
        out.write(f"  {item}\n")
    if result.kept is not None:
        out.write(f"  kept: {result.kept} (its server logs and database)\n")
    if verdict != "ok":
        out.write(
            f"  replay: python -m tests.faults.power_cuts --seed {seed} --first-round {result.number} "
            f"--cuts 1 --synchronous {synchronous}\n"
        )
    out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuts", type=int, default=500, help="power cuts to make (default 500)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--first-round", type=int, default=0)
    parser.add_argument("--synchronous", choices=("full", "normal"), default="full")
    parser.add_argument("--stop-at-first-loss", action="store_true")
    args = parser.parse_args(argv)
    # A SIGTERM unwinds like an interrupt, so the rig is unmounted on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    totals = run_campaign(
        cuts=args.cuts,
        seed=args.seed,
        synchronous=args.synchronous,
        out=sys.stdout,
        stop_at_first_loss=args.stop_at_first_loss,
        first_round=args.first_round,
    )
    failed = totals.lost or totals.integrity_failures or totals.violations
    return 1 if failed and args.synchronous == "full" else 0


if __name__ == "__main__":
    raise SystemExit(main())
