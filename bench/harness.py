"""What every workload shares: sizes, configs, scripts, a watcher of turn ends, statistics and RSS."""

from __future__ import annotations

import logging
import math
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from coordinator import Coordinator
from coordinator.config import Config, PluginConfig, TimeoutsConfig
from coordinator.events import Event
from coordinator.logs import ROOT
from coordinator.records import Rule

NOOP_ENTRY = "bench.noop_tool:noop"

ALLOW_ALL = (Rule(action="*", resource="*", effect="allow"),)
NOOP_ASKS = (*ALLOW_ALL, Rule(action="noop", resource="*", effect="ask"))

MODES = ("full", "normal")
"""SQLite ``synchronous`` modes: the headline figures use ``full``, the ``*_normal`` keys ``normal``."""


@attrs.frozen(kw_only=True)
class Sizes:
    """How much each workload does. ``full()`` is ``make bench``; ``quick()`` is the smoke test."""

    repeats: int  # repetitions of each throughput measurement (median reported)
    turns: int  # sequential turns per repetition
    turns_per_session: int  # a session's turns before the next session (keeps the history bounded)
    concurrent_sessions: int
    concurrent_turns: int  # turns each concurrent session runs per repetition
    stops: int  # interrupts (and declines) measured
    busy_sessions: int  # sessions waiting on a permission (RSS, shutdown, restore)
    restarts: int  # shutdown/restore cycles of the busy sessions
    http_turns: int
    http_sessions: int  # sessions that each run a turn before the second RSS reading
    fanout_subscribers: int
    fanout_turns: int  # turns whose events are fanned out
    fanout_calls: int  # noop calls per fanned-out turn (each adds two events)
    checkpoint_calls: int  # calls timed for the cost of one checkpoint
    stream_sessions: int  # sessions streaming at once for the delta fan-out
    stream_turns: int  # sequential turns timed for the CPU cost of streaming in chunks
    history_turns: int  # earlier turns of the long session (turn_cpu_ms_600)
    history_samples: int  # turns timed at each history length, per repetition
    prune_events: int  # old events a retention pass deletes while turns run
    prune_turns: int  # sequential turns timed alone, beside those timed during the pass
    takeovers: int  # kill -9 of a node running a turn, each timed to the turn's resumption elsewhere
    instruction_turns: int  # turns counted by callgrind (and three times as many: turn_instructions_m)
    model_streams: int  # sessions whose models stream at once, for the CPU a chunk
    model_stream_chunks: int  # chunks of each of those streams, 25 ms apart
    model_stream_levels: tuple[int, ...]  # sessions streaming at once, tried in turn for the most carried
    model_stream_stretch: int  # sessions streaming at once, for the turn's stretch

    @classmethod
    def full(cls) -> Sizes:
        return cls(
            repeats=3,
            turns=150,
            turns_per_session=10,
            concurrent_sessions=100,
            concurrent_turns=2,
            stops=300,
            busy_sessions=1000,
            restarts=2,
            http_turns=100,
            http_sessions=200,
            fanout_subscribers=100,
            fanout_turns=2,
            fanout_calls=20,
            checkpoint_calls=200_000,
            stream_sessions=100,
            stream_turns=100,
            history_turns=600,
            history_samples=20,
            prune_events=100_000,
            prune_turns=300,
            takeovers=5,
            instruction_turns=100,
            model_streams=100,
            model_stream_chunks=200,
            model_stream_levels=(50, 100, 200, 300, 500, 700, 1000),
            model_stream_stretch=500,
        )

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            repeats=1,
            turns=6,
            turns_per_session=3,
            concurrent_sessions=4,
            concurrent_turns=2,
            stops=2,
            busy_sessions=10,
            restarts=1,
            http_turns=3,
            http_sessions=5,
            fanout_subscribers=3,
            fanout_turns=2,
            fanout_calls=2,
            checkpoint_calls=1000,
            stream_sessions=4,
            stream_turns=5,
            history_turns=12,
            history_samples=2,
            prune_events=2000,
            prune_turns=5,
            takeovers=1,
            instruction_turns=2,
            model_streams=5,
            model_stream_chunks=20,
            model_stream_levels=(5, 10),
            model_stream_stretch=10,
        )


def children_cpu_seconds() -> float:
    """CPU seconds so far of this process's live child processes (the SQLite store's sync helper,
    ``coordinator/store/sqlite/_sync_process.py``), from the scheduler's nanosecond counts.

    A turn's CPU is the coordinator's wherever it runs: its fsyncs moved from a thread (counted by
    ``time.process_time``) to that helper, so the benchmark adds the helper's time back.
    """
    total = 0
    own = Path(f"/proc/{os.getpid()}/task")
    try:
        threads = os.listdir(own)
    except OSError:  # not Linux: no /proc
        return 0.0
    for thread in threads:
        try:
            children = (own / thread / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                total += int(Path(f"/proc/{child}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # exited meanwhile
    return total / 1e9


def cpu_seconds() -> float:
    """This process's CPU time and its live children's (see ``children_cpu_seconds``)."""
    return time.process_time() + children_cpu_seconds()


def quiet_logging() -> None:
    """Drop the coordinator's info lines, as an embedder would: printing them would be the benchmark.

    Warnings (a subscriber that lagged behind a burst and read the store instead) go to stderr, so
    that stdout holds only the table, and a child's JSON.
    """
    logging.getLogger(ROOT).setLevel(logging.WARNING)  # without a handler, logging's last resort: stderr


def bench_config(
    workdir: Path, db_name: str, *, rules: tuple[Rule, ...] = ALLOW_ALL, db: str | None = None, **server: Any
) -> Config:
    """A config on a real SQLite file in ``workdir`` (or on ``db``, a PostgreSQL URL), with the no-op
    plugin tool and ``rules``."""
    config = Config(
        base_dir=workdir,
        permission=rules,
        plugin=(PluginConfig(entry=NOOP_ENTRY),),
        timeouts=TimeoutsConfig(),
    )
    return config.with_overrides(db=db or str(workdir / db_name), **server)


def noop_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "name": "noop", "input": {}}


def tool_then_text_script(turns: int) -> list[dict[str, Any]]:
    """Per session: request 2i asks for one noop call, request 2i+1 answers text (turn i of the session).

    Call ids are unique within a session, as a real model's are.
    """
    script: list[dict[str, Any]] = []
    for turn in range(turns):
        script.append({"tool_calls": [noop_call(f"call_{turn}")]})
        script.append({"text": "done"})
    return script


class TurnWatcher:
    """Follows every event from a seq and wakes whoever waits for a turn's ``session.idle``.

    Also counts events by type and remembers the last ``permission.asked`` of each session.
    """

    def __init__(self, coordinator: Coordinator, after: int) -> None:
        self._coordinator = coordinator
        self._after = after
        self.idle: dict[str, Event] = {}
        self.asked: dict[str, Event] = {}
        self.counts: dict[str, int] = {}
        self._waiters: dict[str, trio.Event] = {}
        self._changed = trio.Event()

    async def run(self) -> None:
        async for event in self._coordinator.subscribe(after=self._after):
            self.counts[event.type] = self.counts.get(event.type, 0) + 1
            key = None
            if event.type == "session.idle":
                key = str(event.payload["turn_id"])
                self.idle[key] = event
            elif event.type == "permission.asked" and event.session_id is not None:
                key = event.session_id
                self.asked[key] = event
            waiter = self._waiters.pop(key, None) if key is not None else None
            if waiter is not None:
                waiter.set()
            self._changed.set()
            self._changed = trio.Event()

    async def wait_idle(self, turn_id: str) -> Event:
        """The turn's ``session.idle``, once it has arrived."""
        while turn_id not in self.idle:
            await self._waiters.setdefault(turn_id, trio.Event()).wait()
        return self.idle[turn_id]

    async def wait_asked(self, session_id: str) -> Event:
        """The session's latest ``permission.asked``, once one has arrived (then forgotten)."""
        while session_id not in self.asked:
            await self._waiters.setdefault(session_id, trio.Event()).wait()
        return self.asked.pop(session_id)

    async def wait_count(self, type: str, count: int) -> None:
        """Until ``count`` events of ``type`` have arrived."""
        while self.counts.get(type, 0) < count:
            await self._changed.wait()


def median(samples: Sequence[float]) -> float:
    return float(statistics.median(samples))


def p99(samples: Sequence[float]) -> float:
    """The nearest-rank 99th percentile: with fewer than 100 samples, the largest."""
    ordered = sorted(samples)
    return float(ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)])


def rss_kib(pid: int | str = "self") -> int:
    """The resident set size of a process, from ``/proc`` (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")
