"""On PostgreSQL, nodes sharing one database: one node's sequential turns, three nodes' turns through their
HTTP APIs, and how long a takeover takes after a ``kill -9``.

Each workload runs on a fresh database of its own on the server ``--pg`` names (created with the
schema, dropped at the end). The turn is ``turns.py``'s: a step asking for one no-op call, the call,
a step answering text, the scripted model. The nodes are ``coordinator serve`` children on loopback.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import trio

from bench.harness import NOOP_ENTRY, Sizes, median, tool_then_text_script
from bench.http_api import Server, running_server
from bench.turns import run_turn, sequential, watched_coordinator
from coordinator.chaos.node_audit import create_scratch_database, drop_scratch_database, read_instances
from coordinator.client import CoordinatorClient

PG_ENV = "COORDINATOR_BENCH_PG"
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
NODES = 3
TAKEOVER_LEASE = 2.0
QUIET_SECONDS = 1.0  # after a turn's last commit, before its node is killed (``_takeovers``)
WAIT_SECONDS = 120.0
"""Bound on any wait for the nodes: a stuck benchmark fails instead of hanging ``make bench``."""

TAKEOVER_SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "long", "name": "slow", "input": {"seconds": 600}}]},
    {"text": "done"},
]


def server_url(option: str | None) -> str:
    """The server to make the databases on: ``--pg``, else ``$COORDINATOR_BENCH_PG``, else the default."""
    return option or os.environ.get(PG_ENV) or DEFAULT_PG


def unavailable(url: str) -> str | None:
    """Why no PostgreSQL answers at ``url`` (one line), or None when one does."""
    try:
        with psycopg.connect(url, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return f"no PostgreSQL answers at {url} ({type(exc).__name__}: {str(exc).strip().splitlines()[0]})"


@contextlib.contextmanager
def scratch_database(url: str, name: str) -> Iterator[str]:
    """A fresh database ``name`` on the server of ``url`` (with the schema), dropped on exit."""
    database = create_scratch_database(url, f"{name}_{os.getpid()}")
    try:
        yield database
    finally:
        drop_scratch_database(url, f"{name}_{os.getpid()}")


async def measure_pg(workdir: Path, sizes: Sizes, url: str) -> dict[str, float]:
    """``pg_turns_per_s``, ``pg_turns_per_s_3_nodes``, ``pg_takeover_s`` and ``pg_takeover_frozen_s``
    (each takeover's median, ``_min`` and ``_max``)."""
    figures: dict[str, float] = {}
    await trio.Path(workdir).mkdir(parents=True, exist_ok=True)
    with scratch_database(url, "bench_pg_turns") as db:
        figures["pg_turns_per_s"] = await _one_node(workdir, sizes, db)
    with scratch_database(url, "bench_pg_nodes") as db:
        figures["pg_turns_per_s_3_nodes"] = await _three_nodes(workdir, sizes, db)
    with scratch_database(url, "bench_pg_takeover") as db:
        takeovers = await _takeovers(workdir, sizes, db)
        frozen = await _takeovers(workdir, sizes, db, freeze=True)
    figures["pg_takeover_s"] = median(takeovers)
    figures["pg_takeover_s_min"] = min(takeovers)
    figures["pg_takeover_s_max"] = max(takeovers)
    figures["pg_takeover_frozen_s"] = median(frozen)
    figures["pg_takeover_frozen_s_min"] = min(frozen)
    figures["pg_takeover_frozen_s_max"] = max(frozen)
    return figures


async def _one_node(workdir: Path, sizes: Sizes, db: str) -> float:
    """``turns_per_s``'s workload, in this process, on PostgreSQL: the median of ``repeats`` rates."""
    script = tool_then_text_script(sizes.turns_per_session)
    async with watched_coordinator(workdir, "", "full", script, db=db) as (coordinator, watcher):
        warm_up = await coordinator.create_session("warm-up")
        for _ in range(sizes.turns_per_session):
            await run_turn(coordinator, watcher, warm_up.id)
        rates = [(await sequential(coordinator, watcher, sizes))[0] for _ in range(sizes.repeats)]
    return median(rates)


def _write_config(path: Path, db: str, node: int, script: Path, lease: float | None) -> Path:
    lines = ["[server]", f'db = "{db}"', f'node_id = "b{node}"', "shutdown_grace = 10"]
    lines += [f"lease = {lease}"] if lease is not None else []
    lines += ["", "[model]", 'provider = "scripted"', f'script = "{script}"', ""]
    lines += ["[[permission]]", 'action = "*"', 'resource = "*"', 'effect = "allow"', ""]
    lines += [
        "[[plugin]]",
        f'entry = "{NOOP_ENTRY}"',
        "",
        "[[plugin]]",
        'entry = "coordinator.chaos.tools:slow"',
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


class EventWatch:
    """Every event of the database, from whichever node serves it, by turn and type."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], dict[str, Any]] = {}
        self._waiters: dict[tuple[str, str], trio.Event] = {}

    async def follow(
        self, url: str, *, task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Read ``url``'s event stream (from seq 0) until cancelled (by the scope it starts with)."""
        with trio.CancelScope() as scope:
            async with CoordinatorClient(url, timeout=30) as client:
                task_status.started(scope)
                async for event in client.events(after=0):
                    turn_id = event.get("turn_id")
                    if isinstance(turn_id, str):
                        key = (turn_id, str(event["type"]))
                        self.seen.setdefault(key, event)
                        waiter = self._waiters.pop(key, None)
                        if waiter is not None:
                            waiter.set()

    async def wait(self, turn_id: str, type: str) -> dict[str, Any]:
        """The turn's first event of ``type``, once any node has served it."""
        key = (turn_id, type)
        with trio.fail_after(WAIT_SECONDS):
            while key not in self.seen:
                await self._waiters.setdefault(key, trio.Event()).wait()
        return self.seen[key]


class NodeSet:
    """``coordinator serve`` nodes on one database, each followed by the ``EventWatch``."""

    def __init__(self, workdir: Path, db: str, script: Path, lease: float | None) -> None:
        self._workdir, self._db, self._script, self._lease = workdir, db, script, lease
        self.servers: dict[int, Server] = {}
        self.watch = EventWatch()
        self._following: dict[int, trio.CancelScope] = {}
        self._stack = contextlib.AsyncExitStack()
        self._nursery: trio.Nursery | None = None
        self._starts = 0

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls, workdir: Path, db: str, script: list[dict[str, Any]], *, lease: float | None = None
    ) -> AsyncIterator[NodeSet]:
        """``NODES`` nodes running ``script``; every one still running is stopped (SIGTERM) on exit."""
        path = workdir / "pg-script.json"
        path.write_text(json.dumps(script))
        nodes = cls(workdir, db, path, lease)
        async with nodes._stack, trio.open_nursery() as nursery:
            nodes._nursery = nursery
            async with trio.open_nursery() as starting:
                for node in range(NODES):
                    starting.start_soon(nodes.start, node)
            yield nodes
            nursery.cancel_scope.cancel(reason="the workload is over")

    async def start(self, node: int) -> Server:
        """Start node ``node`` (again) and follow its event stream."""
        assert self._nursery is not None
        config = _write_config(
            self._workdir / f"pg-node-{node}.toml", self._db, node, self._script, self._lease
        )
        self._starts += 1
        log = self._workdir / f"pg-node-{node}-{self._starts}.log"
        server = await self._stack.enter_async_context(running_server(config, log))
        self.servers[node] = server
        self._following[node] = await self._nursery.start(self.watch.follow, server.url)
        return server

    def signal(self, node: int, number: signal.Signals) -> None:
        """Send ``number`` to node ``node``'s process."""
        process = self.servers[node].process
        assert process is not None
        process.send_signal(number)

    async def kill(self, node: int) -> None:
        """``kill -9`` node ``node``, and stop following it."""
        process = self.servers[node].process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        await process.wait()
        self._following[node].cancel(reason="its node was killed")

    def node_of(self, owner: str) -> int:
        """The node a claim's ``owner`` names: its ``node_id`` (as the API shows it) or the live
        instance's id, told apart by the process that registered it."""
        entries = [e for e in read_instances(self._db) if owner in (e.id, e.node_id)]
        pids = {entry.pid for entry in entries}
        return next(node for node, server in self.servers.items() if server.pid in pids)


async def _three_nodes(workdir: Path, sizes: Sizes, db: str) -> float:
    """``concurrent_sessions`` sessions, each prompted ``concurrent_turns`` times in a row, each prompt
    to the next node round the three; turns per second from the first prompt to the last idle."""
    script = tool_then_text_script(sizes.concurrent_turns)
    async with NodeSet.open(workdir, db, script) as nodes:
        clients = [CoordinatorClient(nodes.servers[n].url, timeout=WAIT_SECONDS) for n in range(NODES)]
        async with contextlib.AsyncExitStack() as stack:
            for client in clients:
                await stack.enter_async_context(client)
            rates = []
            for _ in range(sizes.repeats):
                sessions = [
                    (await clients[i % NODES].create_session("bench")).id
                    for i in range(sizes.concurrent_sessions)
                ]
                started = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for index, session_id in enumerate(sessions):
                        nursery.start_soon(
                            _session_turns, clients, nodes.watch, index, session_id, sizes.concurrent_turns
                        )
                rates.append(len(sessions) * sizes.concurrent_turns / (time.perf_counter() - started))
    return median(rates)


async def _session_turns(
    clients: list[CoordinatorClient], watch: EventWatch, index: int, session_id: str, turns: int
) -> None:
    for turn in range(turns):
        turn_id = await clients[(index + turn) % NODES].prompt(session_id, "go")
        idle = await watch.wait(turn_id, "session.idle")
        if idle["outcome"] != "succeeded":
            raise RuntimeError(f"a benchmark turn ended {idle['outcome']}")


async def _takeovers(workdir: Path, sizes: Sizes, db: str, *, freeze: bool = False) -> list[float]:
    """Seconds from ``kill -9`` of the node running a turn (its tool running) to the turn's
    ``session.execution.resumed`` served by another node, ``takeovers`` times (lease 2 s).

    With ``freeze``, the node is stopped (SIGSTOP) instead, and continued once the turn resumed
    elsewhere: its pid lives on, so only its lease running out gives the turn away, as for a node on
    another host. The kill or stop comes a second after the turn's last commit, so that no look of
    another node woken by that commit's notification is still under way.
    """
    seconds = []
    async with NodeSet.open(workdir, db, TAKEOVER_SCRIPT, lease=TAKEOVER_LEASE) as nodes:
        for attempt in range(sizes.takeovers):
            async with CoordinatorClient(nodes.servers[attempt % NODES].url, timeout=WAIT_SECONDS) as client:
                session = await client.create_session("takeover")
                turn_id = await client.prompt(session.id, "go")
                await nodes.watch.wait(turn_id, "session.tool.started")
                claim = (await client.get_session(session.id)).claim
            assert claim is not None
            owner = nodes.node_of(claim.owner)
            await trio.sleep(QUIET_SECONDS)
            stopped = time.perf_counter()
            if freeze:
                nodes.signal(owner, signal.SIGSTOP)
            else:
                await nodes.kill(owner)
            await nodes.watch.wait(turn_id, "session.execution.resumed")
            seconds.append(time.perf_counter() - stopped)
            await nodes.watch.wait(turn_id, "session.idle")
            if freeze:
                nodes.signal(owner, signal.SIGCONT)
            else:
                await nodes.start(owner)
    return seconds
