"""How fast a stop lands: an interrupt, and a reject, of a turn blocked on a permission.

Each stop is of a fresh turn whose one step asked for two calls: a no-op plugin call that waits on a
permission (its rule says ask) and a sibling ``shell`` call running ``sleep 30``. The stop has to
commit its intent, revoke the request, kill and reap the shell's process group, fail both calls and
the step, settle the turn, and publish ``session.idle``: the latency is from the call (``interrupt()``
or ``reply_permission(..., "reject")``) to that ``session.idle`` at a subscriber.
"""

from __future__ import annotations

import contextlib
import gc
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import trio

from bench.harness import NOOP_ASKS, Sizes, TurnWatcher, bench_config, median, noop_call, p99
from coordinator import Coordinator, open_coordinator
from coordinator.models.scripted import ScriptedModel
from coordinator.reasons import Declined, Interrupt

# Time for the sibling shell call to spawn its process once the permission is asked: the stop then
# has a live process group to kill. Spawning takes a few milliseconds.
SHELL_START_SECONDS = 0.02

STOP_SCRIPT = [
    {
        "tool_calls": [
            noop_call("call_waits"),
            {"id": "call_shell", "name": "shell", "input": {"command": "sleep 30"}},
        ]
    }
]

# The outcome each kind of stop settles its turn with (the reason table's).
_OUTCOMES = {"interrupt": Interrupt.outcome, "decline": Declined.outcome}


async def one_stop(
    coordinator: Coordinator,
    watcher: TurnWatcher,
    kind: str,
    *,
    before_stop: Callable[[], Awaitable[None]] | None = None,
) -> tuple[float, float, float]:
    """Block a fresh turn on its permission, stop it; returns (acknowledged, idle) latencies in s, and
    when the stop began (``perf_counter``). ``before_stop`` runs just before the stop (not timed)."""
    session = await coordinator.create_session("stop")
    turn_id = await coordinator.prompt(session.id, "go")
    asked = await watcher.wait_asked(session.id)
    await trio.sleep(SHELL_START_SECONDS)
    if before_stop is not None:
        await before_stop()
    started = time.perf_counter()
    if kind == "interrupt":
        if not await coordinator.interrupt(session.id):
            raise RuntimeError("the benchmark turn was not running when interrupted")
    else:
        await coordinator.reply_permission(session.id, asked.payload["request"]["id"], "reject")
    acknowledged = time.perf_counter()
    idle = await watcher.wait_idle(turn_id)
    finished = time.perf_counter()
    if idle.payload["outcome"] != _OUTCOMES[kind]:
        raise RuntimeError(f"a benchmark {kind} ended {idle.payload['outcome']}")
    return acknowledged - started, finished - started, started


# (SQLite mode, key suffix, whether a process keeps the other core busy meanwhile)
PASSES = (("full", "", False), ("normal", "_normal", False), ("full", "_loaded", True))


async def measure_stops(workdir: Path, sizes: Sizes) -> dict[str, float]:
    """``interrupt_p99_ms`` and ``decline_p99_ms`` (and medians, acknowledgements), in both modes and
    in FULL with the other core busy (``_loaded``); and what a quiet stop's tail is made of in FULL
    (``_tail_evidence``)."""
    figures: dict[str, float] = {}
    for mode, suffix, loaded in PASSES:
        config = bench_config(workdir, f"stops{suffix or '-full'}.sqlite", rules=NOOP_ASKS)
        model = ScriptedModel.from_json(STOP_SCRIPT)
        async with open_coordinator(config, model=model, synchronous=mode) as coordinator:
            with _other_core_busy() if loaded else contextlib.nullcontext():
                figures |= await _measure_pass(coordinator, sizes, suffix)
            await coordinator.shutdown()
    return figures


async def _measure_pass(coordinator: Coordinator, sizes: Sizes, suffix: str) -> dict[str, float]:
    figures: dict[str, float] = {}
    watcher = TurnWatcher(coordinator, after=coordinator.store.read.last_seq())
    syncs: list[float] = []
    coordinator.store.observe(commit=lambda seconds: None, sync=syncs.append)
    windows: list[tuple[float, float]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watcher.run)
        with _full_collections() as collections:
            for kind in ("interrupt", "decline"):
                await one_stop(coordinator, watcher, kind)  # warm up
                syncs.clear()
                samples = [await one_stop(coordinator, watcher, kind) for _ in range(sizes.stops)]
                idle = [s[1] * 1000 for s in samples]
                windows += [(s[2], s[2] + s[1]) for s in samples]
                figures[f"{kind}_p99_ms{suffix}"] = p99(idle)
                figures[f"{kind}_p50_ms{suffix}"] = median(idle)
                figures[f"{kind}_ack_p99_ms{suffix}"] = p99([s[0] * 1000 for s in samples])
                if suffix == "" and syncs:
                    figures[f"{kind}_sync_p50_ms"] = median(syncs) * 1000
                    figures[f"{kind}_sync_p99_ms"] = p99(syncs) * 1000
        nursery.cancel_scope.cancel()
    if suffix == "":
        figures |= _tail_evidence(windows, collections)
    return figures


@contextlib.contextmanager
def _other_core_busy() -> Iterator[None]:
    """A child process spinning on the CPU (the machine has two cores: the other one is busy)."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        burner.kill()
        burner.wait()


@contextlib.contextmanager
def _full_collections() -> Iterator[list[tuple[float, float]]]:
    """The (start, end) of each collection of the oldest generation meanwhile (``perf_counter``)."""
    spans: list[tuple[float, float]] = []
    started = [0.0]

    def note(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                spans.append((started[0], time.perf_counter()))

    gc.callbacks.append(note)
    try:
        yield spans
    finally:
        gc.callbacks.remove(note)


def _tail_evidence(
    windows: list[tuple[float, float]], collections: list[tuple[float, float]]
) -> dict[str, float]:
    """How many stops (interrupts and declines, FULL) a full collection of the heap ran inside, and
    the longest full collection while they ran (inside a stop or between two): with ``*_sync_p99_ms`` (a WAL sync's round trip, from asking the
    sync process to its answer, during those stops), what a stop's p99 is made of beside its own work."""
    hit = sum(1 for start, end in windows if any(a < end and b > start for a, b in collections))
    longest = max((b - a for a, b in collections), default=0.0)
    return {"stops_with_full_gc": hit, "full_gc_ms_max": longest * 1000}
