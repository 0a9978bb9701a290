"""The nodes of a process round: ``coordinator serve`` processes on one PostgreSQL database, each life
of each node with its log and the event stream it served.

A node is a slot (``n0``, ``n1``...) with a config of its own (``[server] node_id``); each start of
it is a *life*: one process, one instance id, one log file, and one recorder reading its
``GET /api/event`` from seq 0 for as long as the life lasts. A fault ends a life (SIGKILL, SIGTERM) or
freezes it (SIGSTOP, then SIGCONT), and the round starts the node again at once.
"""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from coordinator import errors
from coordinator.chaos.node_audit import open_snapshot, read_instances
from coordinator.chaos.process_chaos import environment
from coordinator.chaos.tools import STARTS_ENV
from coordinator.client import CoordinatorClient
from coordinator.statuses import ClaimState

START_SECONDS = 60.0  # for a node to print where it listens (three start at once on a loaded machine)
STOP_SECONDS = 20.0  # for a node to exit after SIGTERM (its shutdown grace is 5 s)
CLIENT_SECONDS = 5.0  # for one HTTP request to a node
TAKEOVER_SECONDS = 60.0  # at most, for other nodes to take a frozen node's claims (``pause``)
TAKEOVER_POLL_SECONDS = 0.1

NODE_CONFIG = """\
[server]
db = "{db}"
node_id = "{node_id}"
lease = {lease}
shutdown_grace = 5

[postgres]
pool_size = 3

[model]
provider = "scripted"
script = "script.json"

[[plugin]]
entry = "coordinator.chaos.tools:counted"

[[plugin]]
entry = "coordinator.chaos.tools:counted_guarded"

[[permission]]
action = "*"
effect = "allow"

[[permission]]
action = "counted_guarded"
effect = "ask"
"""


@attrs.define(eq=False)
class Life:
    """One process of a node, from its start to its end."""

    node: int
    number: int  # the node's lives are numbered from 0
    proc: trio.Process
    url: str
    log_path: Path
    started_at: float  # time.time(), as the database's clock (one machine)
    ended_at: float | None = None
    end: str | None = None  # crash (SIGKILL), shutdown (SIGTERM), done (the round's last stop)
    exit_code: int | None = None
    paused: list[tuple[float, float]] = attrs.Factory(list)  # (SIGSTOP, SIGCONT) times
    pausing: bool = False
    stream: list[dict[str, Any]] = attrs.Factory(list)  # what its GET /api/event served
    instance_id: str = ""  # from the database's instances, by pid, once the round is over
    recorder: trio.CancelScope = attrs.Factory(trio.CancelScope)

    @property
    def name(self) -> str:
        return f"n{self.node}.{self.number}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def answering(self) -> bool:
        """Running and not frozen: a request to it gets an answer."""
        return self.ended_at is None and not self.pausing

    def logs(self) -> list[dict[str, Any]]:
        """Its JSON log lines (a killed life's last line may be cut short: skipped)."""
        entries = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return entries


@attrs.define(eq=False)
class Cluster:
    """The round's nodes: every life, the current one of each node, and the nursery their event
    recorders run in."""

    folder: Path
    db: str
    nodes: int
    lease: float
    node_module: str  # ``python -m MODULE serve``: a test runs a node with a planted bug so
    nursery: trio.Nursery
    lives: list[Life] = attrs.Factory(list)
    current: dict[int, Life] = attrs.Factory(dict)
    pending: int = 0  # restarts and pauses running in the background
    _quiet: trio.Event = attrs.Factory(trio.Event)
    _served: trio.Event = attrs.Factory(trio.Event)

    def in_background(self, work: Callable[[], Awaitable[object]]) -> None:
        """Run ``work`` (a restart, a pause) beside the round; ``wait_quiet`` waits for it."""
        self.pending += 1

        async def run() -> None:
            try:
                await work()
            finally:
                self.pending -= 1
                if not self.pending:
                    self._quiet.set()
                    self._quiet = trio.Event()

        self.nursery.start_soon(run)

    async def wait_quiet(self) -> None:
        """Until no restart or pause runs in the background."""
        while self.pending:
            await self._quiet.wait()

    def served(self) -> None:
        """A recorder received an event."""
        self._served.set()
        self._served = trio.Event()

    async def wait_served(self) -> None:
        """Until a recorder receives an event."""
        await self._served.wait()

    @property
    def starts_file(self) -> Path:
        return self.folder / "starts.jsonl"

    def answering(self) -> list[Life]:
        return [life for life in self.current.values() if life.answering]

    def life_of(self, instance_id: str | None) -> Life | None:
        return next((life for life in self.lives if life.instance_id == instance_id), None)

    async def start(self, node: int) -> Life:
        """Start node ``node`` (a new life) and its recorder; returns once it listens."""
        config = self.folder / f"node-{node}.toml"
        if not config.exists():
            config.write_text(NODE_CONFIG.format(db=self.db, node_id=f"n{node}", lease=self.lease))
        number = sum(1 for life in self.lives if life.node == node)
        log_path = self.folder / f"n{node}.{number}.log"
        command = [sys.executable, "-m", self.node_module, "serve", "--config", str(config), "--port", "0"]
        env = {**environment(), STARTS_ENV: str(self.starts_file)}
        with log_path.open("wb") as log:
            proc = await trio.lowlevel.open_process(
                command,
                cwd=self.folder,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        try:
            url = await _listening(proc)
        except BaseException:
            proc.kill()
            with trio.move_on_after(5, shield=True):
                await proc.wait()
            raise
        life = Life(node=node, number=number, proc=proc, url=url, log_path=log_path, started_at=time.time())
        # Registered before it listens: its claims name it so.
        life.instance_id = next((i.id for i in read_instances(self.db) if i.pid == proc.pid), "")
        self.lives.append(life)
        self.current[node] = life
        self.nursery.start_soon(_record, life, self.served)
        return life

    async def start_all(self) -> None:
        async with trio.open_nursery() as nursery:
            for node in range(self.nodes):
                nursery.start_soon(self.start, node)

    async def kill(self, life: Life) -> None:
        """SIGKILL (a crash): the life ends at once."""
        life.proc.send_signal(signal.SIGKILL)
        await self._ended(life, "crash", await life.proc.wait())

    async def terminate(self, life: Life, *, end: str = "shutdown") -> None:
        """SIGTERM (a graceful stop), waited for; killed after ``STOP_SECONDS``."""
        life.proc.send_signal(signal.SIGTERM)
        code: int | None = None
        with trio.move_on_after(STOP_SECONDS):
            code = await life.proc.wait()
        if code is None:
            life.proc.kill()
            await life.proc.wait()
        await self._ended(life, end, code)

    async def pause(self, life: Life, seconds: float, *, until_taken_over: bool = False) -> None:
        """SIGSTOP for ``seconds``, then SIGCONT: a frozen process, its heartbeat stale.

        With ``until_taken_over``, the freeze also lasts until other nodes hold every claim it held
        (at most ``TAKEOVER_SECONDS`` more): a round that must see a takeover then does not depend
        on how soon, on a loaded machine, a node restarted beside the freeze comes up to take it.
        """
        life.pausing = True
        stopped = time.time()
        life.proc.send_signal(signal.SIGSTOP)
        try:
            held = self._claims_held_by(life) if until_taken_over else set()
            await trio.sleep(seconds)
            with trio.move_on_after(TAKEOVER_SECONDS):
                while True:  # polling: another node's takeover is seen only in the store
                    if not held & self._claims_held_by(life):
                        break
                    await trio.sleep(TAKEOVER_POLL_SECONDS)
        finally:
            life.proc.send_signal(signal.SIGCONT)
            life.paused.append((stopped, time.time()))
            life.pausing = False

    def _claims_held_by(self, life: Life) -> set[str]:
        """The sessions whose claim ``life`` holds, in the store now."""
        with open_snapshot(self.db) as read:
            claims = [read.get_claim(s.id) for s in read.list_sessions()]
        return {
            c.session_id for c in claims if c and c.state == ClaimState.HELD and c.owner == life.instance_id
        }

    async def stop_all(self) -> None:
        """SIGTERM every running life at once: the round is over (``end`` "done")."""
        async with trio.open_nursery() as nursery:
            for life in list(self.current.values()):
                if life.ended_at is None:
                    nursery.start_soon(functools.partial(self.terminate, life, end="done"))

    async def _ended(self, life: Life, end: str, code: int | None) -> None:
        life.ended_at, life.end, life.exit_code = time.time(), end, code
        await trio.sleep(0.3)  # what the stream had sent before the end still arrives
        life.recorder.cancel(reason=f"node {life.name} ended")


@asynccontextmanager
async def open_cluster(
    folder: Path, db: str, *, nodes: int, lease: float, node_module: str = "coordinator"
) -> AsyncIterator[Cluster]:
    """The round's cluster; every life still running is killed when the block ends."""
    async with trio.open_nursery() as nursery:
        cluster = Cluster(
            folder=folder, db=db, nodes=nodes, lease=lease, node_module=node_module, nursery=nursery
        )
        try:
            yield cluster
        finally:
            with trio.move_on_after(10, shield=True):
                for life in cluster.lives:
                    if life.proc.returncode is None:
                        life.proc.send_signal(signal.SIGCONT)
                        life.proc.kill()
                        await life.proc.wait()
            nursery.cancel_scope.cancel(reason="the round is over")


async def _listening(proc: trio.Process) -> str:
    assert proc.stdout is not None
    seen = b""
    with trio.fail_after(START_SECONDS):
        while b"listening on " not in seen or not seen.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"a node exited before listening: {seen!r}")
            seen += chunk
    return seen.decode().split("listening on ", 1)[1].split()[0]


async def _record(life: Life, served: Callable[[], None]) -> None:
    """Keep every event the life's ``GET /api/event`` serves (from seq 0), until the life ends.

    A dropped connection (a frozen node, say) is resumed with ``Last-Event-ID``, as any client does.
    """
    with life.recorder:
        async with CoordinatorClient(life.url, timeout=CLIENT_SECONDS) as client:
            try:
                async for event in client.events(after=0):
                    life.stream.append(event)
                    served()
            except (httpx.HTTPError, errors.ClientError):
                return
