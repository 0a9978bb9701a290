"""What retention costs a turn: latencies while a pass prunes ``sizes.prune_events`` old events, vs alone.

The store holds that many events written long ago (of sessions that no longer run: every turn of
them settled) besides the benchmark's own. First, ``sizes.prune_turns`` sequential turns run alone (a
new session every ``turns_per_session``, as in ``bench/turns.py``, so that no history grows long);
then a pass with a window of a day is started (``retention.prune``, what the background task runs:
its batches, then giving the freed pages back) and turns run one after another until it ends. The figures are each run's median and
99th percentile, the pass's length and its rate. SQLite ``synchronous=FULL``, as the headline turns.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import trio
import trio.lowlevel

from bench.harness import MODES, Sizes, TurnWatcher, bench_config, median, p99, tool_then_text_script
from bench.turns import run_turn
from coordinator import Coordinator, open_coordinator, retention
from coordinator.models.scripted import ScriptedModel

OLD = "2000-01-01T00:00:00.000Z"

# An old event as a real one looks: a tool's success with a little output (about 300 bytes).
_PAYLOAD = json.dumps({"call_id": "call_0", "output": {"exit_code": 0, "stdout": "x" * 200, "stderr": ""}})


async def _write_old_events(coordinator: Coordinator, count: int) -> None:
    """``count`` events dated long ago, of 1,000 sessions gone quiet, in commits of 10,000."""
    for start in range(0, count, 10_000):
        rows = [
            ("session.tool.succeeded", f"ses_old_{n % 1000}", OLD, _PAYLOAD)
            for n in range(start, min(count, start + 10_000))
        ]
        async with coordinator.store.transaction() as tx:
            tx.sql.run_many("INSERT INTO events(type, session_id, at, payload) VALUES (?, ?, ?, ?)", rows)
    await coordinator.store.durable()


async def _turns_while_pruning(
    coordinator: Coordinator, watcher: TurnWatcher, sizes: Sizes
) -> tuple[list[float], float, int]:
    """Turns one after another while a pass runs; their latencies, the pass's seconds and deletions."""
    latencies: list[float] = []
    outcome: dict[str, float] = {}

    async def prune() -> None:
        started = time.perf_counter()
        outcome["deleted"] = await retention.prune(coordinator.store, keep_days=1)
        outcome["seconds"] = time.perf_counter() - started

    async with trio.open_nursery() as nursery:
        nursery.start_soon(prune)
        await trio.lowlevel.checkpoint()  # the pass starts first
        while "seconds" not in outcome:
            latencies += await _turns(coordinator, watcher, sizes.turns_per_session, until=outcome)
    return latencies, outcome["seconds"], int(outcome["deleted"])


async def _turns(
    coordinator: Coordinator, watcher: TurnWatcher, count: int, until: dict[str, float] | None = None
) -> list[float]:
    """Up to ``count`` turns in a new session (a session's history grows its turns' cost, so each
    session runs as many as in the other turn benchmarks); stops early once ``until`` has "seconds"."""
    session = await coordinator.create_session("bench")
    latencies = []
    for _ in range(count):
        if until is not None and "seconds" in until:
            break
        latencies.append(await run_turn(coordinator, watcher, session.id))
    return latencies


async def measure_retention(workdir: Path, sizes: Sizes) -> dict[str, float]:
    """``turn_ms_p50/p99_alone``, ``turn_ms_p50/p99_pruning``, ``prune_s`` and ``prune_events_per_s``."""
    script = tool_then_text_script(sizes.turns_per_session)
    # Retention off in the config: no background pass may prune the old events before the timed one.
    config = bench_config(workdir, "retention.sqlite")
    model = ScriptedModel.from_json(script)
    async with open_coordinator(config, model=model, synchronous=MODES[0]) as coordinator:
        watcher = TurnWatcher(coordinator, after=0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            figures = await _measure(coordinator, watcher, sizes)
            await coordinator.shutdown()  # ends the watcher's subscription
    return figures


async def _measure(coordinator: Coordinator, watcher: TurnWatcher, sizes: Sizes) -> dict[str, float]:
    await _write_old_events(coordinator, sizes.prune_events)  # first: the log's times grow with seq
    await _turns(coordinator, watcher, sizes.turns_per_session)  # warm up
    alone: list[float] = []
    while len(alone) < sizes.prune_turns:
        alone += await _turns(coordinator, watcher, sizes.turns_per_session)
    pruning, seconds, deleted = await _turns_while_pruning(coordinator, watcher, sizes)
    if deleted < sizes.prune_events:
        raise RuntimeError(f"the pass deleted {deleted} events, not the {sizes.prune_events} written")
    return {
        "turn_ms_p50_alone": median(alone) * 1000,
        "turn_ms_p99_alone": p99(alone) * 1000,
        "turn_ms_p50_pruning": median(pruning) * 1000,
        "turn_ms_p99_pruning": p99(pruning) * 1000,
        "turns_during_prune": float(len(pruning)),
        "prune_s": seconds,
        "prune_events_per_s": deleted / seconds,
    }
