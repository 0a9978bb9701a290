"""How far one process scales: many sessions each waiting on a permission, their shutdown and restore.

Runs in a child process of its own (``python -m bench.scale``), so that its RSS reading is not blurred
by what earlier workloads left in the allocator; FULL runs first, and only it reads the RSS. Each of ``sessions`` sessions runs a turn whose one
call waits on a permission. Measured: the RSS growth per busy session; a graceful shutdown of them
all (every turn suspended, every wait kept); and the restart that restores them (every request
re-published, ``restored: true``, at a subscriber). Shutdown and restore are repeated ``restarts``
times on the same database. While they wait (FULL): the CPU of one look of the registry's watch,
which runs every second on the trio thread and must not grow with the turns and waits it runs.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import sys
import time
from pathlib import Path

import trio

from bench.harness import (
    MODES,
    NOOP_ASKS,
    Sizes,
    TurnWatcher,
    bench_config,
    median,
    noop_call,
    quiet_logging,
    rss_kib,
)
from coordinator import Coordinator, decisions, open_coordinator
from coordinator.config import Config
from coordinator.models.scripted import ScriptedModel
from coordinator.registry import _recovery_view

WAIT_SCRIPT = [{"tool_calls": [noop_call("call_waits")]}]


def child_env() -> dict[str, str]:
    """The environment of a child Python: this checkout first on its path, so it runs the same code."""
    root = str(Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


async def measure_scale(workdir: Path, sizes: Sizes) -> dict[str, float]:
    """``busy_session_kib``, ``watch_look_ms``, ``shutdown_1000_s`` and ``restore_1000_s`` (and ``*_normal``), in a fresh
    child process: FULL first, so that its RSS reading starts from a clean allocator."""
    command = [
        sys.executable, "-m", "bench.scale", "--workdir", str(workdir),
        "--sessions", str(sizes.busy_sessions), "--restarts", str(sizes.restarts),
    ]  # fmt: skip
    done = await trio.run_process(command, capture_stdout=True, env=child_env())
    figures: dict[str, float] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return figures


async def _start_waits(coordinator: Coordinator, watcher: TurnWatcher, count: int) -> None:
    """``count`` new sessions, each with a turn waiting on a permission."""
    already = watcher.counts.get("permission.asked", 0)
    for _ in range(count):
        session = await coordinator.create_session("busy")
        await coordinator.prompt(session.id, "go")
    await watcher.wait_count("permission.asked", already + count)


WATCH_LOOKS = 20


async def _watch_look_ms(coordinator: Coordinator) -> float:
    """Thread CPU ms of one look of the registry's watch (every second, on the trio thread): the
    turns to take over, then the decisions other processes committed for what runs here."""
    runtime = coordinator._runtime
    look = functools.partial(_recovery_view, me=coordinator.instance_id)
    started = time.thread_time()
    for _ in range(WATCH_LOOKS):
        await coordinator.store.read(look)
        await decisions.apply_remote_decisions(runtime)
    return (time.thread_time() - started) / WATCH_LOOKS * 1000


async def _busy_then_shutdown(config: Config, mode: str, sessions: int) -> tuple[float, float, float, int]:
    """Start the busy sessions; returns (RSS KiB per session, the watch's look in ms, shutdown
    seconds, last seq)."""
    async with open_coordinator(
        config, model=ScriptedModel.from_json(WAIT_SCRIPT), synchronous=mode
    ) as coord:
        watcher = TurnWatcher(coord, after=coord.store.read.last_seq())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            # Warm up (imports, statement caches, the allocator's first arenas), then leave it idle.
            warm_up = await coord.create_session("warm-up")
            await coord.prompt(warm_up.id, "go")
            await watcher.wait_asked(warm_up.id)
            await coord.interrupt(warm_up.id)
            await watcher.wait_count("session.idle", 1)
            gc.collect()
            before = rss_kib()
            await _start_waits(coord, watcher, sessions)
            gc.collect()
            per_session = (rss_kib() - before) / sessions
            look = await _watch_look_ms(coord)
            started = time.perf_counter()
            await coord.shutdown()
        last_seq = coord.store.read.last_seq()
    return per_session, look, time.perf_counter() - started, last_seq


async def _restore_then_shutdown(
    config: Config, mode: str, sessions: int, after: int
) -> tuple[float, float, int]:
    """Restart on the database; returns (restore seconds, shutdown seconds, last seq)."""
    started = time.perf_counter()
    async with open_coordinator(
        config, model=ScriptedModel.from_json(WAIT_SCRIPT), synchronous=mode
    ) as coord:
        watcher = TurnWatcher(coord, after=after)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            await watcher.wait_count("permission.asked", sessions)
            restored = time.perf_counter() - started
            stopping = time.perf_counter()
            await coord.shutdown()
        last_seq = coord.store.read.last_seq()
    return restored, time.perf_counter() - stopping, last_seq


async def _run(workdir: Path, sessions: int, restarts: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    for mode in MODES:
        figures.update(await _run_mode(workdir, mode, sessions, restarts))
    return figures


async def _run_mode(workdir: Path, mode: str, sessions: int, restarts: int) -> dict[str, float]:
    config = bench_config(workdir, f"scale-{mode}.sqlite", rules=NOOP_ASKS)
    per_session, look, shutdown, last_seq = await _busy_then_shutdown(config, mode, sessions)
    shutdowns, restores = [shutdown], []
    for _ in range(restarts):
        restored, shutdown, last_seq = await _restore_then_shutdown(config, mode, sessions, last_seq)
        restores.append(restored)
        shutdowns.append(shutdown)
    suffix = "" if mode == "full" else "_normal"
    figures = {f"shutdown_1000_s{suffix}": median(shutdowns), f"restore_1000_s{suffix}": median(restores)}
    if mode == "full":
        figures["busy_session_kib"] = per_session
        figures["watch_look_ms"] = look
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale")
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--sessions", type=int, required=True)
    parser.add_argument("--restarts", type=int, required=True)
    args = parser.parse_args(argv)
    quiet_logging()
    figures = trio.run(_run, args.workdir, args.sessions, args.restarts)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
