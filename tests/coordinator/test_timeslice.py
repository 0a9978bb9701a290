"""How trio shares an asyncio host's loop: slices of ``SLICE_SECONDS``, and tasks that give way.

Driven through ``coordinator.aio`` (the guest run that slices), with trio tasks of the test's own
that do more work between two waits than a slice holds.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import trio
import trio.testing

from coordinator import timeslice
from coordinator.aio import open_coordinator
from coordinator.models.scripted import ScriptedModel
from tests.conftest import make_config

TASKS = 12
WORK_SECONDS = 2 * timeslice.SLICE_SECONDS


def _work() -> None:
    """CPU work that holds the thread for ``WORK_SECONDS`` (no await: the host cannot run meanwhile)."""
    ends = time.perf_counter() + WORK_SECONDS
    while time.perf_counter() < ends:
        pass


async def test_in_a_plain_trio_run_giving_way_is_free() -> None:
    with trio.testing.assert_no_checkpoints():
        await timeslice.give_way()


def test_tasks_woken_together_run_in_separate_slices_with_the_host_between(tmp_path: Path) -> None:
    """Twelve tasks wake in one round of trio, each with more work than a slice holds: each runs in a
    slice of its own, the host loop runs between any two, and every task gets its turn."""

    async def main() -> list[int]:
        host_iterations = 0
        stop = asyncio.Event()

        async def count_host_iterations() -> None:
            nonlocal host_iterations
            while not stop.is_set():
                host_iterations += 1
                await asyncio.sleep(0)

        seen: list[int] = []

        async def in_trio() -> None:
            go = trio.Event()

            async def worker() -> None:
                await go.wait()
                await timeslice.give_way()
                seen.append(host_iterations)
                _work()

            async with trio.open_nursery() as nursery:
                for _ in range(TASKS):
                    nursery.start_soon(worker)
                await trio.testing.wait_all_tasks_blocked()
                go.set()

        model = ScriptedModel.from_json([{"text": "unused"}])
        async with open_coordinator(make_config(tmp_path), model=model, synchronous="normal") as coord:
            counting = asyncio.create_task(count_host_iterations())
            await asyncio.wait_for(coord._guest.call(in_trio), 30)
            stop.set()
            await counting
        return seen

    seen = asyncio.run(main())
    assert len(seen) == TASKS
    assert len(set(seen)) == TASKS, f"two tasks' work ran without the host between: {seen}"
