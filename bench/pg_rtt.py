"""PostgreSQL at network distance: a turn's and an interrupt's round trips, and what they cost on a 1 ms link.

The coordinator reaches the server through ``pg_link`` (a proxy process on loopback), first without a
delay, where it counts round trips, then delaying each direction by ``LINK_DELAY_SECONDS`` (a
round trip 1 ms dearer, as across a datacenter):

- ``pg_round_trips_per_turn``: every wait for the server in ``turns.py``'s sequential turn (a step
  asking for one no-op call, the call, a step answering text), from ``prompt()`` to ``session.idle``,
  on every connection of the node; ``pg_round_trips_per_interrupt``: the same from ``interrupt()``
  of a turn waiting on a permission (``stops.py``'s) to its ``session.idle``. A sequential turn's
  round trips are nearly all serial, so the count is close to what a delay multiplies.
- ``pg_turn_ms_rtt1``: the median turn, prompt to ``session.idle``, on the 1 ms link;
  ``pg_interrupt_p99_ms_rtt1``: interrupt to ``session.idle`` there, p99.
- ``pg_mispredicted_per_turn``, ``_per_interrupt``: transactions run again because a prediction of
  their body was wrong (``store/_sql.py``), a turn's and an interrupt's.
- ``pg_turn_cpu_ms``: this process's CPU a turn on loopback (through the link without delay), beside
  ``pg_turn_cpu_ratio`` over SQLite FULL's in the same group.

The profile is printed after the group: for each statement a send began with, how many such sends a
turn and an interrupt make.
"""

from __future__ import annotations

import collections
import contextlib
import json
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import psycopg
import trio

from bench.harness import NOOP_ASKS, Sizes, TurnWatcher, bench_config, median, p99, tool_then_text_script
from bench.pg import scratch_database
from bench.stops import STOP_SCRIPT, one_stop
from bench.turns import run_turn, sequential, sequential_cpu, watched_coordinator
from coordinator import open_coordinator
from coordinator.models.scripted import ScriptedModel

LINK_DELAY_SECONDS = 0.0005
"""One way: a round trip through the link costs 1 ms more than over loopback."""


class Link:
    """A running ``pg_link`` process: the URL through it, and its counts."""

    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self._process = process
        self.url = url

    def _ask(self, command: str) -> str:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(command + "\n")
        self._process.stdin.flush()
        return self._process.stdout.readline()

    async def reset(self) -> None:
        await trio.to_thread.run_sync(self._ask, "reset")

    async def counts(self) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(await trio.to_thread.run_sync(self._ask, "count"))
        return answer


@contextlib.contextmanager
def running_link(url: str, delay: float) -> Iterator[Link]:
    """A ``pg_link`` to the server of ``url`` delaying each direction by ``delay`` seconds."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    host, port = str(info.get("host", "127.0.0.1")), str(info.get("port", 5432))
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.pg_link", host, port, str(delay)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        listening = int(process.stdout.readline())
        parts = urllib.parse.urlsplit(url)
        user = f"{parts.username}@" if parts.username else ""
        through = parts._replace(netloc=f"{user}127.0.0.1:{listening}").geturl()
        yield Link(process, through)
    finally:
        process.kill()
        process.wait()


async def measure_pg_rtt(workdir: Path, sizes: Sizes, url: str) -> dict[str, float]:
    """Every figure of the group, the median of ``sizes.repeats`` runs, each run's range printed."""
    await trio.Path(workdir).mkdir(parents=True, exist_ok=True)
    runs = [await _one_run(workdir / f"run-{n}", sizes, url) for n in range(max(1, sizes.repeats))]
    for what in ("turn", "interrupt"):
        print(
            f"\n  round trips a{'n' if what[0] == 'i' else ''} {what}, by the statement each began with"
            " (the first run):",
            file=sys.stderr,
        )
        for statement, count in runs[0][f"pg_round_trips_by_statement_{what}"].items():
            print(f"  {count:7.2f}  {statement}", file=sys.stderr)
    figures = {
        key: median([run[key] for run in runs]) for key in runs[0] if not key.startswith("pg_round_trips_by")
    }
    print(f"\n  medians of {len(runs)} runs [range]:", file=sys.stderr)
    for key, value in figures.items():
        values = [run[key] for run in runs]
        print(f"  {key}: {value:.2f} [{min(values):.2f}-{max(values):.2f}]", file=sys.stderr)
    return figures


async def _one_run(workdir: Path, sizes: Sizes, url: str) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    await trio.Path(workdir).mkdir(parents=True, exist_ok=True)
    with scratch_database(url, "bench_pg_rtt") as db:
        with running_link(db, 0.0) as link:
            figures |= await _turns(workdir, sizes, link, "")
            figures |= await _interrupts(workdir, sizes, link, "")
        with running_link(db, LINK_DELAY_SECONDS) as link:
            figures |= await _turns(workdir, sizes, link, "_rtt1")
            figures |= await _interrupts(workdir, sizes, link, "_rtt1")
    sqlite_cpu = await sequential_cpu(workdir, "pg-rtt-sqlite.sqlite", sizes, sizes.turns_per_session)
    figures["pg_turn_cpu_ratio"] = figures["pg_turn_cpu_ms"] / (sqlite_cpu * 1000)
    return figures


async def _turns(workdir: Path, sizes: Sizes, link: Link, suffix: str) -> dict[str, Any]:
    turns = sizes.turns if suffix == "" else max(1, sizes.turns // 3)
    async with warm_coordinator(workdir, link.url, sizes) as (coordinator, watcher):
        await link.reset()
        missed = _mispredicted(coordinator)
        _rate, cpu, latencies = await sequential(coordinator, watcher, attrs.evolve(sizes, turns=turns))
        counts = await link.counts()
        missed = _mispredicted(coordinator) - missed
    if suffix:
        return {"pg_turn_ms_rtt1": median(latencies) * 1000}
    return {
        "pg_mispredicted_per_turn": missed / turns,
        "pg_round_trips_per_turn": counts["round_trips"] / turns,
        "pg_round_trips_by_statement_turn": _per(counts["by_statement"], turns),
        "pg_turn_ms": median(latencies) * 1000,
        "pg_turn_cpu_ms": cpu * 1000,
    }


@contextlib.asynccontextmanager
async def warm_coordinator(workdir: Path, url: str, sizes: Sizes) -> AsyncIterator[tuple[Any, TurnWatcher]]:
    """A coordinator on ``url`` running the sequential turn, three turns into a warm-up session."""
    script = tool_then_text_script(sizes.turns_per_session)
    async with watched_coordinator(workdir, "", "full", script, db=url) as (coordinator, watcher):
        warm_up = await coordinator.create_session("warm-up")
        for _ in range(min(3, sizes.turns_per_session)):
            await run_turn(coordinator, watcher, warm_up.id)
        yield coordinator, watcher


async def _interrupts(workdir: Path, sizes: Sizes, link: Link, suffix: str) -> dict[str, Any]:
    stops = max(2, sizes.stops // 3)
    config = bench_config(workdir, "", rules=NOOP_ASKS, db=link.url)
    model = ScriptedModel.from_json(STOP_SCRIPT)
    latencies: list[float] = []
    round_trips: list[int] = []
    by_statement: collections.Counter[str] = collections.Counter()
    async with open_coordinator(config, model=model, synchronous="full") as coordinator:
        watcher = TurnWatcher(coordinator, after=await coordinator.store.read(lambda read: read.last_seq()))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            await one_stop(coordinator, watcher, "interrupt")  # warm up
            missed = _mispredicted(coordinator)
            for _ in range(stops):
                latencies.append(await _counted_stop(coordinator, watcher, link, round_trips, by_statement))
            missed = _mispredicted(coordinator) - missed
            nursery.cancel_scope.cancel()
        await coordinator.shutdown()
    if suffix:
        return {
            "pg_interrupt_p99_ms_rtt1": p99(latencies) * 1000,
            "pg_interrupt_p50_ms_rtt1": median(latencies) * 1000,
        }
    return {
        "pg_mispredicted_per_interrupt": missed / stops,
        "pg_round_trips_per_interrupt": median([float(n) for n in round_trips]),
        "pg_round_trips_by_statement_interrupt": _per(dict(by_statement), stops),
    }


async def _counted_stop(
    coordinator: Any,
    watcher: TurnWatcher,
    link: Link,
    round_trips: list[int],
    by_statement: collections.Counter[str],
) -> float:
    """One interrupt of a turn waiting on a permission: its latency to ``session.idle`` in seconds;
    its round trips, counted from just before the interrupt, appended to ``round_trips``."""
    _acknowledged, idle, _started = await one_stop(coordinator, watcher, "interrupt", before_stop=link.reset)
    counts = await link.counts()
    round_trips.append(int(counts["round_trips"]))
    by_statement.update(counts["by_statement"])
    return idle


def _mispredicted(coordinator: Any) -> int:
    """How many transactions the coordinator's store ran again for a wrong prediction so far."""
    return int(getattr(coordinator.store, "mispredicted", 0))


def _per(by_statement: dict[str, int], turns: int) -> dict[str, float]:
    ordered = sorted(by_statement.items(), key=lambda item: -item[1])
    return {statement: round(count / turns, 2) for statement, count in ordered}
