"""How long trio may hold an asyncio host's loop at a time, and the point where a task gives way.

Inside an asyncio program (``coordinator.aio``) trio runs in the host loop's own thread: while trio
runs, none of the host's tasks do. Trio runs in *slices*: a host callback that runs trio's scheduling
rounds one after another until ``SLICE_SECONDS`` have passed, then lets the host loop run. A round
cannot be split by the host, and a hundred sessions woken by one commit are one round; so the tasks
themselves give way (``give_way``) at the points where many wake together: a task that finds the
slice used up moves to the next round, which runs in the next slice.

In a plain trio run there is no slice: ``give_way`` returns at once.
"""

from __future__ import annotations

import time
from collections import deque

import trio

SLICE_SECONDS = 0.001
"""How long trio may run before the host loop runs again (a task's step in progress finishes
first)."""


class TimeSlice:
    """The current slice of the host loop's time given to trio (one per guest run), and the tasks
    waiting to run in a later one.

    Waiting tasks form a line: only its head wakes each round (to see whether a new slice began);
    the others sleep, so a hundred waiting sessions cost one task step a round, not a hundred. The
    head that gets through wakes the next one, which tries in the next round.
    """

    __slots__ = ("_has_head", "_line", "ends")

    def __init__(self) -> None:
        self.ends = float("inf")
        self._line: deque[trio.lowlevel.Task] = deque()
        self._has_head = False

    def start(self) -> None:
        self.ends = time.perf_counter() + SLICE_SECONDS

    def used_up(self) -> bool:
        return time.perf_counter() > self.ends

    def must_wait(self) -> bool:
        return self._has_head or self.used_up()

    async def wait_turn(self) -> None:
        """Wait in line until a round of a slice that is not used up."""
        if self._has_head:
            self._line.append(trio.lowlevel.current_task())
            # Not abortable: a waiting task always gets its turn within a few slices.
            await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        self._has_head = True
        while self.used_up():
            await trio.lowlevel.cancel_shielded_checkpoint()
        if self._line:
            trio.lowlevel.reschedule(self._line.popleft())  # the next head, in the next round
        else:
            self._has_head = False


_current: trio.lowlevel.RunVar[TimeSlice | None] = trio.lowlevel.RunVar("time_slice", default=None)


def share_host_loop(time_slice: TimeSlice) -> None:
    """Make ``give_way`` in this trio run yield once ``time_slice`` is used up (the guest run's main
    task calls it first)."""
    _current.set(time_slice)


async def give_way() -> None:
    """In a guest run whose slice is used up, wait for the next slice; else return at once.

    Call it where a task resumes from a wait that wakes many tasks together. It is not a checkpoint:
    it never raises ``Cancelled`` (a pending cancellation is delivered at the task's next one).
    """
    time_slice = _current.get()
    if time_slice is not None and time_slice.must_wait():
        await time_slice.wait_turn()


async def checkpoint() -> None:
    """``trio.lowlevel.checkpoint()``, then ``give_way()``: where a task is about to run a step that
    costs (a store transaction runs on the trio thread)."""
    await trio.lowlevel.checkpoint()
    await give_way()
