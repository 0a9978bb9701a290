"""What a turn costs: sequential and concurrent turns, and the chaos checkpoints' share of it.

A turn is: a model step that asks for one allowed no-op plugin call, the call, a model step that
answers text. The model is the scripted one (no delays), the store a real SQLite file.
"""

from __future__ import annotations

import gc
import time
import types
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from bench.harness import (
    MODES,
    Sizes,
    TurnWatcher,
    bench_config,
    children_cpu_seconds,
    cpu_seconds,
    median,
    p99,
    tool_then_text_script,
)
from coordinator import Coordinator, open_coordinator
from coordinator.actors.context import TurnScope
from coordinator.models.scripted import ScriptedModel
from coordinator.server.serve import tune_gc_for_serving


@asynccontextmanager
async def watched_coordinator(
    workdir: Path, db_name: str, mode: str, script: list[dict[str, Any]], *, db: str | None = None
) -> AsyncIterator[tuple[Coordinator, TurnWatcher]]:
    """A coordinator running ``script`` for every session, with a watcher of every event (on a
    SQLite file ``db_name`` in ``workdir``, or on ``db``, a PostgreSQL URL)."""
    config = bench_config(workdir, db_name, db=db)
    model = ScriptedModel.from_json(script)
    async with open_coordinator(config, model=model, synchronous=mode) as coordinator:
        watcher = TurnWatcher(coordinator, after=await coordinator.store.read(lambda read: read.last_seq()))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            try:
                yield coordinator, watcher
            finally:
                await coordinator.shutdown()  # ends the watcher's subscription


async def run_turn(coordinator: Coordinator, watcher: TurnWatcher, session_id: str) -> float:
    """One turn from prompt to ``session.idle`` at the watcher; returns its latency in seconds."""
    started = time.perf_counter()
    turn_id = await coordinator.prompt(session_id, "go")
    idle = await watcher.wait_idle(turn_id)
    if idle.payload["outcome"] != "succeeded":
        raise RuntimeError(f"a benchmark turn ended {idle.payload['outcome']}")
    return time.perf_counter() - started


async def sequential(
    coordinator: Coordinator, watcher: TurnWatcher, sizes: Sizes
) -> tuple[float, float, list[float]]:
    """``sizes.turns`` turns one after the other, a new session every ``turns_per_session``.

    Returns turns per second, CPU seconds per turn (less sensitive than wall time to other load on
    the machine: this process's and its sync helper's, ``harness.cpu_seconds``), and each turn's
    latency.
    """
    sessions = [
        await coordinator.create_session("bench") for _ in range(-(-sizes.turns // sizes.turns_per_session))
    ]
    latencies: list[float] = []
    cpu_started = cpu_seconds()
    started = time.perf_counter()
    for index in range(sizes.turns):
        session = sessions[index // sizes.turns_per_session]
        latencies.append(await run_turn(coordinator, watcher, session.id))
    elapsed = time.perf_counter() - started
    return sizes.turns / elapsed, (cpu_seconds() - cpu_started) / sizes.turns, latencies


async def _concurrent(coordinator: Coordinator, watcher: TurnWatcher, sizes: Sizes) -> float:
    """``concurrent_sessions`` sessions at once, each running ``concurrent_turns`` turns in a row."""
    sessions = [await coordinator.create_session("bench") for _ in range(sizes.concurrent_sessions)]

    async def one_session(session_id: str) -> None:
        for _ in range(sizes.concurrent_turns):
            await run_turn(coordinator, watcher, session_id)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for session in sessions:
            nursery.start_soon(one_session, session.id)
    return sizes.concurrent_sessions * sizes.concurrent_turns / (time.perf_counter() - started)


async def measure_turns(workdir: Path, sizes: Sizes) -> dict[str, float]:
    """``turns_per_s``, ``turns_per_s_concurrent`` and per-turn latencies, in both SQLite modes."""
    figures: dict[str, float] = {}
    per_session = max(sizes.turns_per_session, sizes.concurrent_turns)
    for mode in MODES:
        suffix = "" if mode == "full" else "_normal"
        rates, cpu, helper_cpu, concurrent, latencies = [], [], [], [], []
        async with watched_coordinator(
            workdir, f"turns-{mode}.sqlite", mode, tool_then_text_script(per_session)
        ) as (
            coordinator,
            watcher,
        ):
            warm_up = await coordinator.create_session("warm-up")
            for _ in range(sizes.turns_per_session):
                await run_turn(coordinator, watcher, warm_up.id)
            for _ in range(sizes.repeats):
                helper_started = children_cpu_seconds()
                rate, cpu_per_turn, samples = await sequential(coordinator, watcher, sizes)
                helper_cpu.append((children_cpu_seconds() - helper_started) / sizes.turns)
                rates.append(rate)
                cpu.append(cpu_per_turn)
                latencies += samples
                concurrent.append(await _concurrent(coordinator, watcher, sizes))
        figures[f"turns_per_s{suffix}"] = median(rates)
        figures[f"turns_per_s_concurrent{suffix}"] = median(concurrent)
        figures[f"turn_cpu_ms{suffix}"] = median(cpu) * 1000
        figures[f"turn_cpu_ms_sync_process{suffix}"] = median(helper_cpu) * 1000
        figures[f"turn_ms_p50{suffix}"] = median(latencies) * 1000
        figures[f"turn_ms_p99{suffix}"] = p99(latencies) * 1000
    figures["turn_cpu_ms_serving_gc"] = await _cpu_with_serving_gc(workdir, sizes, per_session)
    return figures


async def _cpu_with_serving_gc(workdir: Path, sizes: Sizes, per_session: int) -> float:
    """``turn_cpu_ms``'s workload with the collector tuned as ``coordinator serve`` tunes it."""
    thresholds = gc.get_threshold()
    try:
        return (
            await sequential_cpu(workdir, "turns-serving-gc.sqlite", sizes, per_session, tune_gc_for_serving)
            * 1000
        )
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


async def sequential_cpu(
    workdir: Path, db_name: str, sizes: Sizes, per_session: int, prepare: Callable[[], None] | None = None
) -> float:
    """CPU seconds a sequential turn (FULL), median of ``repeats``, after a session's worth of warm-up
    turns; ``prepare`` runs once the coordinator is open."""
    cpu = []
    async with watched_coordinator(workdir, db_name, "full", tool_then_text_script(per_session)) as (
        coordinator,
        watcher,
    ):
        if prepare is not None:
            prepare()
        warm_up = await coordinator.create_session("warm-up")
        for _ in range(sizes.turns_per_session):
            await run_turn(coordinator, watcher, warm_up.id)
        for _ in range(sizes.repeats):
            cpu.append((await sequential(coordinator, watcher, sizes))[1])
    return median(cpu)


async def measure_checkpoint_overhead(workdir: Path, sizes: Sizes, turns_per_s: float) -> dict[str, float]:
    """The chaos checkpoints' share of a turn in production (no injector).

    Counted, not A/B-timed: the checkpoints a turn passes, times what one costs with no injector
    (awaiting it, minus an empty loop), over the time a turn takes. An A/B of two throughput runs
    would drown a cost this small in run-to-run noise.
    """
    counted = 0
    original = TurnScope.checkpoint

    async def counting(self: TurnScope, name: str) -> None:
        nonlocal counted
        counted += 1
        await original(self, name)

    turns = max(2, sizes.turns_per_session)
    TurnScope.checkpoint = counting  # type: ignore[method-assign]
    try:
        async with watched_coordinator(
            workdir, "checkpoints.sqlite", "normal", tool_then_text_script(turns)
        ) as (
            coordinator,
            watcher,
        ):
            session = await coordinator.create_session("checkpoints")
            for _ in range(turns):
                await run_turn(coordinator, watcher, session.id)
    finally:
        TurnScope.checkpoint = original  # type: ignore[method-assign]
    per_turn = counted / turns
    cost = await _checkpoint_cost(sizes.checkpoint_calls)
    return {
        "checkpoints_per_turn": per_turn,
        "checkpoint_ns": cost * 1e9,
        "checkpoint_overhead_pct": per_turn * cost * turns_per_s * 100,
    }


async def _checkpoint_cost(calls: int) -> float:
    """Seconds one production checkpoint costs: the await of ``TurnScope.checkpoint`` with no injector."""
    runtime = types.SimpleNamespace(injector=None, store=None, instance_id="bench")
    scope = TurnScope.of_claimed(runtime, "bench", "bench", 1)  # type: ignore[arg-type]
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            await scope.checkpoint("tool.start")
        middle = time.perf_counter()
        for _ in range(calls):
            pass
        samples.append(((middle - started) - (time.perf_counter() - middle)) / calls)
        await trio.lowlevel.checkpoint()
    return max(0.0, median(samples))
