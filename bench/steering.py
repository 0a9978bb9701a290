"""How soon a steer reaches the model: ``steer_delivery_ms``.

Each sample is a fresh turn whose one step asks for a tool call that takes 50 ms (``pause``), then
answers text. A steer is sent at a random moment while the call runs (a seeded draw of 0-40 ms after
its start); it is delivered at the step boundary, in the transaction that starts the next step. The
figure is what the steer adds beyond that boundary: from the later of the steer's acceptance and the
tool's return to the moment a subscriber receives ``session.turn.steered``. Beside it, the same span
for the next ``session.step.started`` of turns sent no steer (``steer_boundary_ms``): what the
boundary costs anyway, so the difference is the steer's own.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import attrs
import trio

from bench import noop_tool
from bench.harness import Sizes, bench_config, median, p99
from coordinator import Coordinator, open_coordinator
from coordinator.config import PluginConfig
from coordinator.events import Event
from coordinator.models.scripted import ScriptedModel

TOOL_MS = 50
PAUSE_ENTRY = "bench.noop_tool:pause"


def _script(key: str) -> list[dict[str, object]]:
    call = {"id": "call_pause", "name": "pause", "input": {"ms": TOOL_MS, "key": key}}
    return [{"tool_calls": [call]}, {"text": "done"}]


async def _one(coordinator: Coordinator, index: int, steer_after: float | None) -> float:
    """One turn; returns, in ms, the span from the boundary (or the steer, when later) to the
    steer's delivery (or, without a steer, to the next step's start) at a subscriber."""
    session = await coordinator.create_session(title=f"steer-{index}")
    received: dict[str, float] = {}
    accepted = 0.0
    async with trio.open_nursery() as nursery:

        async def follow(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            subscription = coordinator.subscribe(after=coordinator.published_seq, session_id=session.id)
            task_status.started()
            async for event in subscription:
                _note(event, received)
                if event.type == "session.idle":
                    return

        await nursery.start(follow)
        await coordinator.prompt(session.id, "go")
        if steer_after is not None:
            while "session.tool.started" not in received:  # noqa: ASYNC110 (a bench's own poll)
                await trio.sleep(0.0005)
            await trio.sleep(steer_after)
            await coordinator.steer(session.id, "also this")
            accepted = time.perf_counter()
    returned = noop_tool.RETURNED.pop(session.title)
    if steer_after is None:
        return (received["second step"] - returned) * 1000
    return (received["session.turn.steered"] - max(accepted, returned)) * 1000


def _note(event: Event, received: dict[str, float]) -> None:
    now = time.perf_counter()
    if event.type == "session.step.started" and "first step" in received:
        received.setdefault("second step", now)
    elif event.type == "session.step.started":
        received["first step"] = now
    else:
        received.setdefault(event.type, now)


async def measure_steering(workdir: Path, sizes: Sizes) -> dict[str, float]:
    """``steer_delivery_ms_p50/p99`` and ``steer_boundary_ms_p50/p99`` (no steer), in FULL mode."""
    config = bench_config(workdir, "steering.sqlite")
    config = attrs.evolve(config, plugin=(*config.plugin, PluginConfig(entry=PAUSE_ENTRY)))
    samples = max(20, sizes.stops)
    rng = random.Random(7)
    delivered: list[float] = []
    boundary: list[float] = []
    scripts = {f"steer-{i}": _script(f"steer-{i}") for i in range(2 * samples)}
    model = ScriptedModel.from_json(scripts)
    async with open_coordinator(config, model=model, synchronous="full") as coordinator:
        for index in range(samples):
            delivered.append(await _one(coordinator, 2 * index, rng.uniform(0, 0.04)))
            boundary.append(await _one(coordinator, 2 * index + 1, None))
    return {
        "steer_delivery_ms_p50": round(median(delivered), 2),
        "steer_delivery_ms_p99": round(p99(delivered), 2),
        "steer_boundary_ms_p50": round(median(boundary), 2),
        "steer_boundary_ms_p99": round(p99(boundary), 2),
        "steer_samples": float(samples),
    }
