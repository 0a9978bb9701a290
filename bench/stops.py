"""How fast a stop lands: an interrupt, and a reject, of a turn blocked on a permission.

Each stop is of a fresh turn whose one step asked for two calls: a no-op plugin call that waits on a
permission (its rule says ask) and a sibling ``shell`` call running ``sleep 30``. The stop has to
commit its intent, revoke the request, kill and reap the shell's process group, fail both calls and
the step, settle the turn, and publish ``session.idle``: the latency is from the call (``interrupt()``
or ``reply_permission(..., "reject")``) to that ``session.idle`` at a subscriber.
"""

from __future__ import annotations

import time
from pathlib import Path

import trio

from bench.harness import MODES, NOOP_ASKS, Sizes, TurnWatcher, bench_config, median, noop_call, p99
from coordinator import Coordinator, open_coordinator
from coordinator.models.scripted import ScriptedModel

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

_OUTCOMES = {"interrupt": "interrupted", "decline": "declined"}


async def _one_stop(coordinator: Coordinator, watcher: TurnWatcher, kind: str) -> tuple[float, float]:
    """Block a fresh turn on its permission, stop it; returns (acknowledged, idle) latencies in s."""
    session = await coordinator.create_session("stop")
    turn_id = await coordinator.prompt(session.id, "go")
    asked = await watcher.wait_asked(session.id)
    await trio.sleep(SHELL_START_SECONDS)
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
    return acknowledged - started, finished - started


async def measure_stops(workdir: Path, sizes: Sizes) -> dict[str, float]:
    """``interrupt_p99_ms`` and ``decline_p99_ms`` (and medians, acknowledgements), in both modes."""
    figures: dict[str, float] = {}
    for mode in MODES:
        suffix = "" if mode == "full" else "_normal"
        config = bench_config(workdir, f"stops-{mode}.sqlite", rules=NOOP_ASKS)
        model = ScriptedModel.from_json(STOP_SCRIPT)
        async with open_coordinator(config, model=model, synchronous=mode) as coordinator:
            watcher = TurnWatcher(coordinator, after=coordinator.store.read.last_seq())
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watcher.run)
                for kind in ("interrupt", "decline"):
                    await _one_stop(coordinator, watcher, kind)  # warm up
                    samples = [await _one_stop(coordinator, watcher, kind) for _ in range(sizes.stops)]
                    idle = [s[1] * 1000 for s in samples]
                    figures[f"{kind}_p99_ms{suffix}"] = p99(idle)
                    figures[f"{kind}_p50_ms{suffix}"] = median(idle)
                    figures[f"{kind}_ack_p99_ms{suffix}"] = p99([s[0] * 1000 for s in samples])
                await coordinator.shutdown()
    return figures
