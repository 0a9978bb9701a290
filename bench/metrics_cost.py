"""What the metrics (``coordinator/metrics.py``) cost a turn: counted, like the chaos checkpoints.

An A/B of two throughput runs cannot see a cost of a few microseconds a turn on a shared machine (it
moved by more than 30 % between runs of the same code), so the figure is the commits a turn makes
(counted by the coordinator's own histogram) times what timing one costs, plus what counting a
settled turn costs, over a turn's CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from bench.harness import Sizes, median, tool_then_text_script
from bench.turns import run_turn, watched_coordinator
from coordinator import Coordinator
from coordinator.metrics import Metrics

COMMITS = "coordinator_store_commit_seconds_count"


async def measure_metrics_overhead(workdir: Path, sizes: Sizes, turn_cpu_ms: float) -> dict[str, float]:
    """``metrics_overhead_pct``: the metrics' share of ``turn_cpu_ms`` (NORMAL), and its parts."""
    turns = max(2, sizes.turns_per_session)
    async with watched_coordinator(workdir, "metrics.sqlite", "normal", tool_then_text_script(turns)) as (
        coordinator,
        watcher,
    ):
        session = await coordinator.create_session("metrics")
        before = _commits(coordinator)
        for _ in range(turns):
            await run_turn(coordinator, watcher, session.id)
        commits_per_turn = (_commits(coordinator) - before) / turns
    metrics = Metrics()

    def timed_commit() -> None:
        began = time.perf_counter()  # what Transaction does around a commit
        metrics.commit_took(time.perf_counter() - began)

    commit_s = _cost(timed_commit, sizes.checkpoint_calls)
    settle_s = _cost(lambda: metrics.turn_settled(None, 0.0), sizes.checkpoint_calls)
    per_turn_ms = (commits_per_turn * commit_s + settle_s) * 1000
    return {
        "metrics_commit_ns": commit_s * 1e9,
        "metrics_settle_ns": settle_s * 1e9,
        "metrics_overhead_pct": per_turn_ms / turn_cpu_ms * 100,
    }


def _commits(coordinator: Coordinator) -> float:
    return coordinator.metrics_registry.get_sample_value(COMMITS) or 0.0


def _cost(work: Callable[[], None], calls: int) -> float:
    """Seconds one call of ``work`` takes, against a loop calling a function that does nothing."""
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            work()
        middle = time.perf_counter()
        for _ in range(calls):
            _nothing()
        samples.append(((middle - started) - (time.perf_counter() - middle)) / calls)
    return max(0.0, median(samples))


def _nothing() -> None:
    pass
