"""What a long conversation costs: the CPU of a turn in a session with 600 earlier turns against 10.

The turn is the suite's usual one (a step asking for one no-op plugin call, the call, a step
answering text), through the embedding API with the scripted model. A turn whose cost grew with its
session's history would show here as a ratio well above 1.
"""

from __future__ import annotations

from pathlib import Path

from bench.harness import Sizes, TurnWatcher, cpu_seconds, median, tool_then_text_script
from bench.turns import run_turn, watched_coordinator
from coordinator import Coordinator

SHORT_HISTORY = 10
"""The earlier turns of the short sessions (``turn_cpu_ms_10``)."""


async def measure_history(workdir: Path, sizes: Sizes) -> dict[str, float]:
    """``turn_cpu_ms_600`` and ``turn_cpu_ms_10`` (FULL), and their ratio, medians of repetitions.

    Each repetition measures ``history_samples`` turns after ``SHORT_HISTORY`` earlier turns (one
    turn a session, so every sample has exactly that history) and as many after ``history_turns``
    earlier turns of one session (the history grows by one turn a sample, under 4 % at 600).
    """
    long_turns = sizes.history_turns + sizes.history_samples * sizes.repeats
    script = tool_then_text_script(max(long_turns, SHORT_HISTORY + 1))
    short, long = [], []
    async with watched_coordinator(workdir, "history.sqlite", "full", script) as (coordinator, watcher):
        session = await coordinator.create_session("long")
        for _ in range(sizes.history_turns):
            await run_turn(coordinator, watcher, session.id)
        for _ in range(sizes.repeats):
            short.append(await _short_history_cpu(coordinator, watcher, sizes.history_samples))
            long.append(await _turns_cpu(coordinator, watcher, session.id, sizes.history_samples))
    figures = {"turn_cpu_ms_10": median(short) * 1000, "turn_cpu_ms_600": median(long) * 1000}
    figures["turn_cpu_600_vs_10"] = figures["turn_cpu_ms_600"] / figures["turn_cpu_ms_10"]
    return figures


async def _short_history_cpu(coordinator: Coordinator, watcher: TurnWatcher, samples: int) -> float:
    """CPU seconds of a turn in a session with ``SHORT_HISTORY`` earlier turns, averaged over samples."""
    spent = 0.0
    for _ in range(samples):
        session = await coordinator.create_session("short")
        for _ in range(SHORT_HISTORY):
            await run_turn(coordinator, watcher, session.id)
        spent += await _turns_cpu(coordinator, watcher, session.id, 1)
    return spent / samples


async def _turns_cpu(coordinator: Coordinator, watcher: TurnWatcher, session_id: str, turns: int) -> float:
    """CPU seconds a turn: this process's, every thread, and its sync helper's (``cpu_seconds``)."""
    started = cpu_seconds()
    for _ in range(turns):
        await run_turn(coordinator, watcher, session_id)
    return (cpu_seconds() - started) / turns
