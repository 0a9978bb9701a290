"""Concurrency beyond one core: the 100 concurrent sessions of ``turns_per_s_concurrent`` run by one
process, then split between two processes on the same SQLite file (FULL).

Each process is a child (``python -m bench.processes``) with a coordinator of its own on the shared
file: it creates its sessions, runs a warm-up turn, says ``ready`` on stdout and waits for ``go`` on
stdin; then every one of its sessions runs ``concurrent_turns`` turns in a row, all sessions at once,
and it prints a JSON line with its turns and CPU seconds. The parent times from ``go`` until the last
child has printed: turns of all children over that wall time. One process is measured the same way
(a child of its own), so the two figures differ only in the number of processes. The processes
share the database's write lock (one writer at a time: SQLite's ``BEGIN IMMEDIATE``), each its own
syncs and its own core.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import trio

from bench.harness import (
    Sizes,
    TurnWatcher,
    bench_config,
    cpu_seconds,
    median,
    quiet_logging,
    tool_then_text_script,
)
from bench.scale import child_env
from bench.turns import run_turn
from coordinator import open_coordinator
from coordinator.models.scripted import ScriptedModel

PROCESS_COUNTS = (1, 2)


async def measure_processes(workdir: Path, sizes: Sizes) -> dict[str, float]:
    """``turns_per_s_concurrent_1_process``, ``..._2_processes`` and ``processes_speedup``."""
    rates: dict[int, list[float]] = {count: [] for count in PROCESS_COUNTS}
    cpu: dict[int, list[float]] = {count: [] for count in PROCESS_COUNTS}
    for repeat in range(sizes.repeats):
        for count in PROCESS_COUNTS:
            db = workdir / f"processes-{count}-{repeat}.sqlite"
            rates[count].append(await _run_children(db, count, sizes, cpu[count]))
    one, two = median(rates[1]), median(rates[2])
    return {
        "turns_per_s_concurrent_1_process": one,
        "turns_per_s_concurrent_2_processes": two,
        "processes_speedup": two / one,
        "turn_cpu_ms_concurrent_1_process": median(cpu[1]) * 1000,
        "turn_cpu_ms_concurrent_2_processes": median(cpu[2]) * 1000,
    }


async def _run_children(db: Path, count: int, sizes: Sizes, cpu_per_turn: list[float]) -> float:
    """Turns per second of ``count`` children sharing ``concurrent_sessions`` sessions on ``db``."""
    share = sizes.concurrent_sessions // count
    command = [
        sys.executable, "-m", "bench.processes", "--db", str(db), "--sessions", str(share),
        "--turns", str(sizes.concurrent_turns),
    ]  # fmt: skip
    children: list[trio.Process] = []
    try:
        for _ in range(count):
            children.append(
                await trio.lowlevel.open_process(
                    command, stdin=-1, stdout=-1, env=child_env()
                )  # stderr inherited: a child's traceback is seen as it happens
            )
        lines = [_Lines(child) for child in children]
        for line in lines:
            await line.expect("ready")
        started = time.perf_counter()
        for child in children:
            assert child.stdin is not None
            await child.stdin.send_all(b"go\n")
        reports = [json.loads(await line.next()) for line in lines]
        elapsed = time.perf_counter() - started
        for child in children:
            if await child.wait() != 0:
                raise RuntimeError(f"a benchmark child exited {child.returncode}")
    finally:
        with trio.move_on_after(5, shield=True):
            for child in children:
                if child.returncode is None:
                    child.kill()
                await child.wait()
    turns = sum(report["turns"] for report in reports)
    cpu_per_turn.append(sum(report["cpu_s"] for report in reports) / turns)
    return turns / elapsed


class _Lines:
    """The lines a child prints on stdout, one at a time."""

    def __init__(self, child: trio.Process) -> None:
        assert child.stdout is not None
        self._stream = child.stdout
        self._buffer = b""

    async def next(self) -> str:
        while b"\n" not in self._buffer:
            data = await self._stream.receive_some(4096)
            if not data:
                raise RuntimeError("a benchmark child ended before its report (its stderr says why)")
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    async def expect(self, wanted: str) -> None:
        line = await self.next()
        if line != wanted:
            raise RuntimeError(f"a benchmark child said {line!r}, not {wanted!r}")


async def _child(db: Path, sessions: int, turns: int) -> None:
    quiet_logging()
    config = bench_config(db.parent, db.name)
    model = ScriptedModel.from_json(tool_then_text_script(turns + 1))
    async with open_coordinator(config, model=model, synchronous="full") as coordinator:
        watcher = TurnWatcher(coordinator, after=await coordinator.store.read(lambda read: read.last_seq()))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            ids = [(await coordinator.create_session("bench")).id for _ in range(sessions)]
            await run_turn(coordinator, watcher, ids[0])  # warm-up
            print("ready", flush=True)
            await trio.wrap_file(sys.stdin).readline()  # "go"
            cpu = cpu_seconds()

            async def one_session(session_id: str) -> None:
                for _ in range(turns):
                    await run_turn(coordinator, watcher, session_id)

            async with trio.open_nursery() as sessions_nursery:
                for session_id in ids:
                    sessions_nursery.start_soon(one_session, session_id)
            print(json.dumps({"turns": sessions * turns, "cpu_s": cpu_seconds() - cpu}), flush=True)
            await coordinator.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.processes")
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--sessions", type=int, required=True)
    parser.add_argument("--turns", type=int, required=True)
    options = parser.parse_args()
    trio.run(_child, options.db, options.sessions, options.turns)


if __name__ == "__main__":
    main()
