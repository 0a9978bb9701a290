"""The PostgreSQL event tail after a failed read: it pauses, longer each time, then reads again and
hands the events over in seq order (a lost connection never stops the node)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from coordinator.errors import StoreError
from coordinator.events import Event
from coordinator.store.postgres._tail import RETRY_SECONDS, Tail


class FailingStore:
    """Its first read (the start's ``last_seq``) answers 0; then ``failures`` reads of events fail,
    and the next finds one event."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.reads_at: list[float] = []

    async def read(self, query: Any) -> Any:
        await trio.lowlevel.checkpoint()
        self.reads_at.append(trio.current_time())
        if len(self.reads_at) == 1:
            return 0
        if self.failures:
            self.failures -= 1
            raise StoreError("server closed the connection unexpectedly")
        return [Event(seq=1, type="session.created", session_id="s", at="", payload={})]


async def test_a_failed_read_is_retried_after_growing_pauses_then_events_flow(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = FailingStore(failures=3)
    tail = Tail(store)
    handed: list[int] = []
    tail.on_durable.append(lambda events: handed.extend(e.stored_seq for e in events))
    async with trio.open_nursery() as nursery:
        await nursery.start(tail.serve)
        tail.wake()
        await tail.wait_handed_over(1)
        nursery.cancel_scope.cancel()

    assert handed == [1]
    gaps = [round(b - a, 3) for a, b in zip(store.reads_at[1:], store.reads_at[2:], strict=False)]
    first = RETRY_SECONDS[0]
    assert gaps == [first, first * 2, first * 4]
