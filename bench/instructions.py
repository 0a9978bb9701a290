"""What a turn costs in instructions: ``turn_cpu_ms``'s turn, counted by valgrind's callgrind.

CPU time on a shared virtual machine moves with the machine (by half between two sessions, design/
benchmarks.md); a count of instructions moves by a few percent (7.76 and 7.97 M a turn in two runs
of one code: the collector's passes land differently). A child process (``python -m
bench.instructions TURNS``) runs ``turn_cpu_ms``'s workload under ``valgrind --tool=callgrind``:
ten warm-up turns, then ``TURNS`` sequential turns, a new session every ten (its creation counted
too), FULL. Two children run at once, for ``instruction_turns`` turns and for three times as many;
the difference of their totals over the difference of turns is a turn's instructions: the
start-up, the imports and the warm-up cancel out.

What is counted: every thread of the coordinator's process. Not counted: its SQLite sync process (a
child, which valgrind does not follow; its share of the CPU is ``turn_cpu_ms_sync_process``), nor
the kernel's work in system calls. Under valgrind the process runs about fifty times slower, so the
syncs group commits differently from a run at full speed: a few instructions of the durability's
bookkeeping move, not the turn's own work.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

import trio

from bench.harness import Sizes, quiet_logging, tool_then_text_script
from bench.scale import child_env
from bench.turns import run_turn, watched_coordinator

WARM_UP_TURNS = 10
TURNS_PER_SESSION = 10
COLLECTED = re.compile(rb"Collected\s*:\s*(\d+)")


def unavailable() -> str | None:
    """Why instructions cannot be counted here (one line), or None."""
    return None if shutil.which("valgrind") else "valgrind is not installed"


async def measure_instructions(workdir: Path, sizes: Sizes) -> dict[str, float]:
    """``turn_instructions_m``: millions of instructions a sequential turn."""
    low = sizes.instruction_turns
    high = 3 * low
    counts: dict[int, int] = {}
    async with trio.open_nursery() as nursery:  # both at once: a count does not depend on the other
        for turns in (low, high):
            nursery.start_soon(_count, workdir, turns, counts)
    return {"turn_instructions_m": (counts[high] - counts[low]) / (high - low) / 1e6}


async def _count(workdir: Path, turns: int, counts: dict[int, int]) -> None:
    """The instructions of a child running ``turns`` turns (and its start-up and warm-up), into
    ``counts[turns]``."""
    command = [
        "valgrind", "--tool=callgrind", f"--callgrind-out-file={workdir / f'callgrind-{turns}.out'}",
        sys.executable, "-m", "bench.instructions", str(turns),
    ]  # fmt: skip
    done = await trio.run_process(
        command, capture_stdout=True, capture_stderr=True, env=child_env(), check=False
    )
    found = COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"the counted child failed ({done.returncode}): " + " | ".join(tail))
    counts[turns] = int(found.group(1))


async def _turns(turns: int) -> None:
    with tempfile.TemporaryDirectory(prefix="coordinator-instructions-") as folder:
        script = tool_then_text_script(TURNS_PER_SESSION)
        async with watched_coordinator(Path(folder), "instructions.sqlite", "full", script) as (
            coordinator,
            watcher,
        ):
            warm_up = await coordinator.create_session("warm-up")
            for _ in range(WARM_UP_TURNS):
                await run_turn(coordinator, watcher, warm_up.id)
            sessions = [
                await coordinator.create_session("bench") for _ in range(-(-turns // TURNS_PER_SESSION))
            ]
            for index in range(turns):
                await run_turn(coordinator, watcher, sessions[index // TURNS_PER_SESSION].id)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions")
    parser.add_argument("turns", type=int, help="sequential turns after the warm-up")
    quiet_logging()
    trio.run(_turns, parser.parse_args().turns)


if __name__ == "__main__":
    main()
