"""PostgreSQL going away under two nodes: its connections killed, the server restarted.

A round makes a scratch database, starts two ``coordinator serve`` nodes on it and drives them over
HTTP as the power-cut campaign does (``power_cuts.py``: sessions, prompts, replies, forms,
interrupts, a follower on each node), through either node; each node reaches the database through a
link of its own (``stall_proxy.py``). Meanwhile the database goes away, a few times a round at random
moments: every connection to it ended (``pg_terminate_backend``: both nodes' pools and listeners),
one node's link stalled for 0.5-4 s (longer than the 2 s lease at times, so the other node takes its
turns over while it still lives), or, with ``--restarts``, the whole server restarted
(``pg_ctlcluster restart``, fast or ``immediate`` at random). Then, once every turn has settled:

- everything acknowledged is stored (every 2xx's effect, every event a follower received, every
  tool start), and no seq named two events on either node's stream;
- no tool call started twice, and every turn ended in exactly one terminal event;
- both nodes still answer (their pools and listeners reconnected).

``python -m tests.faults.pg_faults --kills 200 --restarts 50`` (``make faults``) ends with one summary
line of counts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import psycopg
import trio

from coordinator.chaos import processes
from coordinator.chaos.node_audit import create_scratch_database, drop_scratch_database
from coordinator.chaos.record import RunRecord
from coordinator.client import CoordinatorClient
from coordinator.statuses import TurnStatus
from coordinator.store import open_read_view
from tests.faults import power_cuts
from tests.faults.power_cuts import CONFIG, SCRIPT, START_SECONDS, TOKEN, Acknowledged, start_server
from tests.faults.rig import REPO

TERMINALS = {
    "session.execution.succeeded",
    "session.execution.interrupted",
    "session.execution.failed",
    "session.execution.suspended",
}
SETTLE_SECONDS = 90.0
RESTART_SECONDS = 60.0


@attrs.define
class PgRound:
    """One round's record, in the shape the power-cut campaign's drivers fill."""

    seed: int
    number: int
    rng: random.Random
    folder: Path
    acks: Acknowledged = attrs.Factory(Acknowledged)
    record: RunRecord = attrs.Factory(lambda: RunRecord(track_intents=False))
    clashes: list[str] = attrs.Factory(list)
    rig: None = None  # no filesystem of ours: PostgreSQL keeps the data

    @property
    def starts(self) -> Path:
        return self.folder / "starts.jsonl"


@attrs.frozen(kw_only=True)
class PgRoundResult:
    number: int
    faults: tuple[str, ...]
    acknowledged: int
    lost: tuple[str, ...]
    violations: tuple[str, ...]
    starts: int
    refused: int  # requests answered 503 StoreUnavailable
    seconds: float


async def run_round(seed: int, number: int, scratch: Path, server_url: str, restarts: bool) -> PgRoundResult:
    started = time.perf_counter()
    rng = random.Random(f"{seed}:pg:{number}")
    folder = scratch / f"round-{number}"
    folder.mkdir()
    state = PgRound(seed=seed, number=number, rng=rng, folder=folder)
    name = f"coordinator_faults_{os.getpid()}_{number}"
    url = create_scratch_database(server_url, name)
    faults: list[str] = []
    try:
        nodes = await _drive(state, url, server_url, faults, restarts)
        lost, violations = _check(state, url)
        refused = sum(_refused(folder / f"node-{n}.log") for n in range(nodes))
    finally:
        with contextlib.suppress(psycopg.Error):
            drop_scratch_database(server_url, name)
    return PgRoundResult(
        number=number,
        faults=tuple(faults),
        acknowledged=state.acks.count(),
        lost=tuple(lost),
        violations=tuple([*violations, *state.clashes]),
        starts=len(power_cuts.read_starts(state.starts)),
        refused=refused,
        seconds=time.perf_counter() - started,
    )


async def _drive(state: PgRound, url: str, server_url: str, faults: list[str], restarts: bool) -> int:
    """Two nodes, each through a link of its own, driven through faults until every turn settled;
    returns how many nodes ran."""
    nodes = 2
    (state.folder / "script.json").write_text(json.dumps(SCRIPT))
    async with contextlib.AsyncExitStack() as stack:
        clients, links = [], []
        for node in range(nodes):
            link, port = await _open_link(url)
            stack.push_async_callback(_close_link, link)
            links.append(link)
            config = state.folder / f"node-{node}.toml"
            linked = psycopg.conninfo.make_conninfo(url, port=port)
            config.write_text(
                CONFIG.format(db=_as_url(linked), token=TOKEN).replace(
                    "[server]\n", "[server]\nlease = 2\n", 1
                )
            )
            log = stack.enter_context((state.folder / f"node-{node}.log").open("wb"))
            proc, node_url = await start_server(
                state.folder, log, synchronous="full", starts=state.starts, config=config
            )
            stack.push_async_callback(_stop, proc)
            clients.append(await stack.enter_async_context(CoordinatorClient(node_url, TOKEN, timeout=10)))
        async with trio.open_nursery() as nursery:
            for client in clients:
                nursery.start_soon(power_cuts.follow, client, state, client is clients[0])
                nursery.start_soon(power_cuts.respond, client, state)
            for _ in range(state.rng.choice((2, 3, 4))):
                await power_cuts.prompt_sessions(state.rng.choice(clients), state)
                await power_cuts.wander(state.rng.choice(clients), state)
                faults.append(await _fault(state.rng, url, server_url, restarts, links))
            await _until_settled(state, url)
            for client in clients:  # both nodes answer again, and serve every event
                await _answers(client)
            await trio.sleep(0.5)
            nursery.cancel_scope.cancel()
    return nodes


async def _open_link(url: str) -> tuple[trio.Process, int]:
    """A stall proxy in front of the database server of ``url``: the process and its port."""
    where = psycopg.conninfo.conninfo_to_dict(url)
    command = [sys.executable, "-m", "tests.faults.stall_proxy", str(where["host"]), str(where["port"])]
    link = await trio.lowlevel.open_process(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    assert link.stdout is not None
    seen = b""
    with trio.fail_after(START_SECONDS):
        while not seen.endswith(b"\n"):
            seen += await link.stdout.receive_some(64)
    return link, int(seen)


async def _close_link(link: trio.Process) -> None:
    with trio.CancelScope(shield=True):
        assert link.stdin is not None
        await link.stdin.aclose()  # the proxy exits when its stdin closes
        with trio.move_on_after(5):
            await link.wait()
        if link.returncode is None:
            link.kill()
            await link.wait()


def _as_url(conninfo: str) -> str:
    parts = psycopg.conninfo.conninfo_to_dict(conninfo)
    return f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"


async def _fault(
    rng: random.Random, url: str, server_url: str, restarts: bool, links: list[trio.Process]
) -> str:
    if restarts and rng.random() < 0.5:
        mode = rng.choice(("fast", "immediate"))
        await trio.to_thread.run_sync(_restart_postgres, server_url, mode)
        return f"restart ({mode})"
    if rng.random() < 0.3:
        node, seconds = rng.randrange(len(links)), rng.uniform(0.5, 4.0)
        links[node].send_signal(signal.SIGUSR1)
        try:
            await trio.sleep(seconds)
        finally:
            links[node].send_signal(signal.SIGUSR2)
        return f"stall (node {node}, {seconds:.1f}s)"
    ended = await trio.to_thread.run_sync(_end_connections, server_url, url)
    return f"kill ({ended} connections)"


def _end_connections(server_url: str, url: str) -> int:
    database = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchone()
    return int(row[0]) if row else 0


def _restart_postgres(server_url: str, mode: str) -> None:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart", "-m", mode],
        check=True,
        capture_output=True,
        timeout=RESTART_SECONDS,
    )
    deadline = time.monotonic() + RESTART_SECONDS
    while True:
        try:
            with psycopg.connect(server_url, connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


async def _stop(proc: trio.Process) -> None:
    with trio.CancelScope(shield=True):
        await power_cuts.stop_server(proc, "SIGTERM")


async def _until_settled(state: PgRound, url: str) -> None:
    with trio.move_on_after(SETTLE_SECONDS):
        while True:
            with contextlib.suppress(Exception):  # the server may still be starting again
                with open_read_view(url) as read:
                    rows = [read.get_turn(t) for t in state.record.turns]
                if all(row is not None and row.status == TurnStatus.SETTLED for row in rows):
                    return
            await trio.sleep(0.2)
    state.clashes.append(f"not every turn settled within {SETTLE_SECONDS:g}s")


async def _answers(client: CoordinatorClient) -> None:
    """Until the node accepts a write again (its pool reconnected)."""
    last: Exception | None = None
    with trio.move_on_after(SETTLE_SECONDS):
        while True:
            try:
                await client.create_session("still here")
                return
            except Exception as exc:  # refused, or not answering: the node may still be reconnecting
                last = exc
            await trio.sleep(0.2)
    raise AssertionError(f"{client} accepts no write {SETTLE_SECONDS:g}s after the last fault: {last!r}")


def _check(state: PgRound, url: str) -> tuple[list[str], list[str]]:
    with open_read_view(url) as read:
        lost = power_cuts.missing_acknowledged(read, state.acks, power_cuts.read_starts(state.starts))
        events = power_cuts.all_events(read)
    violations = []
    twice = Counter((s, turn, tag) for s, turn, tag in power_cuts.read_starts(state.starts))
    # A call is told apart by its turn and its model's id: a resumed turn's step asks new ids.
    violations += [
        f"tool call {tag} of turn {turn} started {n} times" for (_, turn, tag), n in twice.items() if n > 1
    ]
    ends = Counter(e.payload.get("turn_id") for e in events if e.type in TERMINALS)
    for turn_id in state.record.turns:
        if ends[turn_id] != 1:
            violations.append(f"turn {turn_id} ended in {ends[turn_id]} terminal events")
    return lost, violations


def _refused(log: Path) -> int:
    lines = [
        json.loads(line) for line in log.read_text(errors="replace").splitlines() if line.startswith("{")
    ]
    return sum(int(e.get("refused", 0)) for e in lines if e.get("event") == "store_available")


@attrs.define
class Totals:
    rounds: int = 0
    kills: int = 0
    restarts: int = 0
    stalls: int = 0
    acknowledged: int = 0
    lost: int = 0
    double_runs: int = 0
    violations: int = 0
    refused: int = 0
    starts: int = 0

    def add(self, result: PgRoundResult) -> None:
        self.rounds += 1
        self.kills += sum(f.startswith("kill") for f in result.faults)
        self.restarts += sum(f.startswith("restart") for f in result.faults)
        self.stalls += sum(f.startswith("stall") for f in result.faults)
        self.acknowledged += result.acknowledged
        self.lost += len(result.lost)
        self.double_runs += sum("started" in v and "times" in v for v in result.violations)
        self.violations += len(result.violations)
        self.refused += result.refused
        self.starts += result.starts

    def line(self) -> str:
        return (
            f"postgresql restarts {self.restarts}, connection kills {self.kills}, link stalls {self.stalls} "
            f"({self.rounds} rounds, "
            f"2 nodes), acknowledged items {self.acknowledged}, acknowledged items lost {self.lost}, "
            f"double runs {self.double_runs}, other violations {self.violations - self.double_runs}, "
            f"requests refused with 503 {self.refused}, tool starts {self.starts}"
        )


def run_campaign(*, kills: int, restarts: int, seed: int, server_url: str, out: Any) -> Totals:
    """Rounds until ``kills`` connection kills and ``restarts`` restarts were made."""
    totals = Totals()
    with tempfile.TemporaryDirectory(prefix="pg-faults-") as scratch, processes.adopting_orphans():
        number = 0
        while totals.kills < kills or totals.restarts < restarts:
            want_restarts = totals.restarts < restarts
            result = trio.run(run_round, seed, number, Path(scratch), server_url, want_restarts)
            totals.add(result)
            verdict = "ok" if not (result.lost or result.violations) else "FAILED"
            out.write(
                f"round {number}: {', '.join(result.faults)}; {result.acknowledged} acknowledged, "
                f"{len(result.lost)} lost, {result.refused} refused, {result.seconds:.1f}s: {verdict}\n"
            )
            for item in [*result.lost[:10], *result.violations[:10]]:
                out.write(f"  {item}\n")
            out.flush()
            number += 1
    out.write(totals.line() + "\n")
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--restarts", type=int, default=50, help="restarts of the whole server (0: none)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--db", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args(argv)
    totals = run_campaign(
        kills=args.kills, restarts=args.restarts, seed=args.seed, server_url=args.db, out=sys.stdout
    )
    return 1 if totals.lost or totals.violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
