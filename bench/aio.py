"""The coordinator inside an asyncio program (``coordinator.aio``): what it costs a turn, and how long
it may keep the host's loop from running its own work.

- ``aio_turn_cpu_ms``: CPU a sequential turn (FULL) through ``coordinator.aio`` under ``asyncio.run``,
  against ``aio_trio_turn_cpu_ms``, the same workload through the trio API measured in the same group
  (``aio_turn_cpu_ratio``: the first over the second).
- ``aio_loop_lag_ms_p99``: while ``concurrent_sessions`` sessions run ``concurrent_turns`` turns each
  through ``coordinator.aio``, a task of the host loop asks for a 1 ms sleep again and again; the
  figure is the 99th percentile of how late each wake-up came (the longest stretch trio's guest run
  held the loop, plus asyncio's own delay).

The asyncio program runs in a thread of its own (``asyncio.run`` cannot run inside the bench's trio
run); the bench's trio thread waits meanwhile, so the process's CPU time is the asyncio program's.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import attrs
import trio

from bench.harness import Sizes, bench_config, cpu_seconds, median, p99, tool_then_text_script
from bench.turns import sequential_cpu
from coordinator.aio import AioCoordinator, open_coordinator
from coordinator.events import Event
from coordinator.models.scripted import ScriptedModel

LAG_PROBE_SECONDS = 0.001


async def measure_aio(workdir: Path, sizes: Sizes) -> dict[str, float]:
    """The CPU figures are taken in ``repeats`` rounds, each the trio API then ``coordinator.aio`` on
    fresh databases, and the ratio is the median of the rounds' own ratios: the machine's speed drifts
    between rounds more than the two differ. The lag is measured in every round, its p99 over all."""
    per_session = max(sizes.turns_per_session, sizes.concurrent_turns)
    once = attrs.evolve(sizes, repeats=1)
    trio_cpus, aio_cpus, lag = [], [], []
    for round_ in range(sizes.repeats):
        trio_cpus.append(await sequential_cpu(workdir, f"aio-trio-{round_}.sqlite", once, per_session))
        aio_cpu, round_lag = await trio.to_thread.run_sync(
            asyncio.run,
            _aio_figures(workdir, once, per_session, f"aio-{round_}.sqlite"),
            abandon_on_cancel=False,
        )
        aio_cpus.append(aio_cpu)
        lag.extend(round_lag)
    return {
        "aio_turn_cpu_ms": median(aio_cpus) * 1000,
        "aio_trio_turn_cpu_ms": median(trio_cpus) * 1000,
        "aio_turn_cpu_ratio": median([a / t for a, t in zip(aio_cpus, trio_cpus, strict=True)]),
        "aio_loop_lag_ms_p99": p99(lag) * 1000,
        "aio_loop_lag_ms_max": max(lag) * 1000,
    }


class _Idle:
    """Every turn's ``session.idle``, read by a task of the host loop from one subscription."""

    def __init__(self) -> None:
        self.idle: dict[str, Event] = {}
        self._waiters: dict[str, asyncio.Event] = {}

    async def follow(self, coordinator: AioCoordinator, after: int) -> None:
        async for event in coordinator.subscribe(after=after):
            if event.type == "session.idle":
                turn_id = str(event.payload["turn_id"])
                self.idle[turn_id] = event
                waiter = self._waiters.pop(turn_id, None)
                if waiter is not None:
                    waiter.set()

    async def turn(self, coordinator: AioCoordinator, session_id: str) -> None:
        turn_id = await coordinator.prompt(session_id, "go")
        while turn_id not in self.idle:
            await self._waiters.setdefault(turn_id, asyncio.Event()).wait()
        if self.idle[turn_id].payload["outcome"] != "succeeded":
            raise RuntimeError(f"a benchmark turn ended {self.idle[turn_id].payload['outcome']}")


async def _aio_figures(
    workdir: Path, sizes: Sizes, per_session: int, db_name: str
) -> tuple[float, list[float]]:
    config = bench_config(workdir, db_name)
    model = ScriptedModel.from_json(tool_then_text_script(per_session))
    async with open_coordinator(config, model=model, synchronous="full") as coordinator:
        idle = _Idle()
        following = asyncio.create_task(idle.follow(coordinator, coordinator.published_seq))
        try:
            cpu = await _aio_turn_cpu(coordinator, idle, sizes)
            lag = await _loop_lag(coordinator, idle, sizes)
        finally:
            await coordinator.shutdown()
            await following
    return cpu, lag


async def _aio_turn_cpu(coordinator: AioCoordinator, idle: _Idle, sizes: Sizes) -> float:
    warm_up = await coordinator.create_session("warm-up")
    for _ in range(sizes.turns_per_session):
        await idle.turn(coordinator, warm_up.id)
    cpu = []
    for _ in range(sizes.repeats):
        sessions = [
            await coordinator.create_session("bench")
            for _ in range(-(-sizes.turns // sizes.turns_per_session))
        ]
        started = cpu_seconds()
        for index in range(sizes.turns):
            await idle.turn(coordinator, sessions[index // sizes.turns_per_session].id)
        cpu.append((cpu_seconds() - started) / sizes.turns)
    return median(cpu)


async def _loop_lag(coordinator: AioCoordinator, idle: _Idle, sizes: Sizes) -> list[float]:
    """How late each 1 ms sleep of a probe task woke while the concurrent sessions ran."""
    sessions = [await coordinator.create_session("bench") for _ in range(sizes.concurrent_sessions)]
    lateness: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            asked = time.perf_counter()
            await asyncio.sleep(LAG_PROBE_SECONDS)
            lateness.append(max(0.0, time.perf_counter() - asked - LAG_PROBE_SECONDS))

    async def one_session(session_id: str) -> None:
        for _ in range(sizes.concurrent_turns):
            await idle.turn(coordinator, session_id)

    probing = asyncio.create_task(probe())
    try:
        await asyncio.gather(*(one_session(session.id) for session in sessions))
    finally:
        done.set()
        await probing
    return lateness
