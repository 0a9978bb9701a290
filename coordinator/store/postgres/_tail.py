"""The tail of the event log: every event, this node's and other nodes', handed over in seq order.

PostgreSQL makes a commit visible in seq order (the event counter's row lock is held until the
commit), so reading ``events_after(last)`` never skips an event that a later read would find below
``last``. Handing over from these reads, not from each commit's own list, is what gives every node
the same sequence: two of this node's commits finishing in two threads may return in either order,
the store's order is one.

One read is saved: a commit of this node whose first seq follows the last one handed over is handed
over from its own list. Nothing can come between: a transaction's seqs are consecutive (it holds the
counter's row from its first event to its commit), and every seq below its first was handed over.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import trio

from coordinator.errors import StoreError
from coordinator.events import Event
from coordinator.logs import get_logger

log = get_logger(__name__)

PAGE = 1000
"""Events read at most at once."""

LOOK_SECONDS = 1.0
"""How often the tail looks without being woken (a notification lost with its connection)."""

RETRY_SECONDS = (0.05, 1.0)
"""The pause after a failed read, doubling from the first to the second while reads fail."""


class Tail:
    """Reads new events after the last one handed over and hands them to ``on_durable``."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.on_durable: list[Callable[[Sequence[Event]], None]] = []
        self._handed = -1  # until ``serve`` starts: nothing is handed over by the tail
        self._wake = trio.Event()
        self._moved = trio.Event()

    def wake(self) -> None:
        self._wake.set()

    def own_commit(self, events: Sequence[Event]) -> None:
        """This node committed ``events``: hand them over now if they come next, else read them."""
        if self._handed >= 0 and events[0].stored_seq == self._handed + 1:
            self._hand_over(events)
        else:
            self._wake.set()

    def _hand_over(self, events: Sequence[Event]) -> None:
        self._handed = events[-1].stored_seq
        for callback in self.on_durable:
            callback(events)
        self._moved.set()
        self._moved = trio.Event()

    async def wait_handed_over(self, seq: int) -> None:
        """Until every event up to ``seq`` is handed over (at once if the tail does not run)."""
        await trio.lowlevel.checkpoint()
        while 0 <= self._handed < seq:
            await self._moved.wait()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._handed = await self._store.read(lambda reader: reader.last_seq())
        task_status.started()
        pause = 0.0
        while True:
            if pause:
                await trio.sleep(pause)
            else:
                with trio.move_on_after(LOOK_SECONDS):
                    await self._wake.wait()
            self._wake = trio.Event()
            try:
                await self._read_on()
            except StoreError as exc:
                # The server went away (restarted, or an operator ended our connection): the pool
                # connects again; until a read succeeds, nothing more is handed over, in order.
                if not pause:
                    log.warning("event_tail_read_failed", error=str(exc))
                pause = min(pause * 2, RETRY_SECONDS[1]) if pause else RETRY_SECONDS[0]
                continue
            if pause:
                log.info("event_tail_reading_again")
            pause = 0.0

    async def _read_on(self) -> None:
        while True:
            events: list[Event] = await self._store.read(functools.partial(_page, after=self._handed))
            # While this read ran, a commit of this node may have been handed over from its own list.
            fresh = [event for event in events if event.stored_seq > self._handed]
            if fresh:
                self._hand_over(fresh)
            if len(events) < PAGE:
                return


def _page(reader: Any, *, after: int) -> list[Event]:
    events: list[Event] = reader.events_after(after, limit=PAGE)
    return events
