"""The event bus: replay from the store, then live, with no gap, no duplicate and no back-pressure.

``publish`` is called once a commit is durable (``SqliteStore.on_durable``), in commit order, so an event
reaches nobody before it is durable. A subscriber reads pages from the store, up to the last event
published, until it has caught up, then attaches a bounded live buffer *without awaiting in between*;
since publishes run on the same trio thread, no event can slip between the last page and the attach.

Several processes may write one database: a commit this bus did not publish (a gap in seq at a
publish, or a higher seq found by ``notice_foreign_commits``) sends every subscriber back to the store.

A slow subscriber never blocks the coordinator: when its buffer overflows, the buffer is dropped and
the subscriber falls back to reading the store from its last delivered seq, then attaches again. It
therefore never loses an event; ``lagged`` counts how often it fell behind.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Sequence

import structlog
import trio

from coordinator.events import Event
from coordinator.store import Queries, SqliteStore

log = structlog.get_logger()

LIVE_BUFFER = 4096
REPLAY_PAGE = 500


class _Live:
    """A subscriber's live buffer, owned by the bus while attached."""

    def __init__(self, session_id: str | None, capacity: int) -> None:
        self.session_id = session_id
        self.capacity = capacity
        self.queue: deque[Event] = deque()
        self.overflowed = False
        # Set when another process committed events this bus did not publish: read the store.
        self.stale = False
        self.wakeup = trio.Event()


class Bus:
    """Fans committed events out to subscribers."""

    def __init__(self, reader: Queries, *, live_buffer: int = LIVE_BUFFER) -> None:
        self._reader = reader
        # Weak: a subscription dropped without aclose() takes its buffer with it.
        self._live: weakref.WeakSet[_Live] = weakref.WeakSet()
        self._live_buffer = live_buffer
        self.lagged = 0
        self.closed = False
        self._highest = reader.last_seq()

    def publish(self, events: Sequence[Event]) -> None:
        """Hand committed events to every attached subscriber. Never blocks."""
        if not events:
            return
        if events[0].seq > self._highest + 1:
            self._mark_stale()  # another process committed in between: subscribers read the store
        self._highest = max(self._highest, events[-1].seq)
        for live in list(self._live):
            if live.stale:
                continue
            for event in events:
                if live.session_id is not None and event.session_id != live.session_id:
                    continue
                if len(live.queue) >= live.capacity:
                    self._overflow(live)
                    break
                live.queue.append(event)
            live.wakeup.set()

    def _overflow(self, live: _Live) -> None:
        live.overflowed = True
        live.queue.clear()
        self._live.discard(live)
        self.lagged += 1
        log.warning("subscriber_lagged", session_id=live.session_id)

    @property
    def published_seq(self) -> int:
        """The seq of the last event published (every event up to it is durable)."""
        return self._highest

    async def notice_foreign_commits(self, store: SqliteStore) -> None:
        """Wake every subscriber to read the store if another process committed events since.

        Their events are published only after this process has synced the WAL once more, which makes
        them durable whoever wrote them.
        """
        last = self._reader.last_seq()
        if last <= max(self._highest, store.last_own_seq):
            return  # nothing, or only this process's own commits, which reach the bus by publish()
        await store.sync_now()
        if last > self._highest:
            self._highest = last
            self._mark_stale()

    def _mark_stale(self) -> None:
        for live in self._live:
            live.stale = True
            live.wakeup.set()

    def close(self) -> None:
        """End every subscription after it has delivered what is committed."""
        self.closed = True
        for live in self._live:
            live.wakeup.set()

    def subscribe(self, *, after: int = 0, session_id: str | None = None) -> Subscription:
        """Every event with seq > ``after`` (of one session, or all), replayed then live.

        Use as ``async for event in bus.subscribe(after=seq)``; it waits for new events once caught up
        and ends when the bus closes.
        """
        return Subscription(self, after, session_id)


class Subscription:
    """An iterator over events, replayed from the store then live.

    A class rather than an async generator, so a subscriber that stops iterating (``break``, a
    cancellation) leaves nothing to finalize: its live buffer is detached on the next publish that
    finds it gone, or at once by ``aclose()``.
    """

    def __init__(self, bus: Bus, after: int, session_id: str | None) -> None:
        self._bus = bus
        self._session_id = session_id
        self.last = after
        self._page: deque[Event] = deque()
        self._live: _Live | None = None

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        """The next event. **Cancellation:** safe at any point; nothing is lost or delivered twice."""
        await trio.lowlevel.checkpoint()
        while True:
            event = self._next_nowait()
            if event is not None:
                self.last = event.seq
                return event
            if self._live is None:
                raise StopAsyncIteration
            live = self._live
            live.wakeup = trio.Event()
            await live.wakeup.wait()

    async def next_batch(self, limit: int) -> list[Event]:
        """The next events at hand, at least one and at most ``limit``; empty once the bus closed.

        Waits only while none is at hand, so a slow reader gets everything queued meanwhile in one
        batch (the SSE stream writes a batch as one chunk). **Cancellation:** safe, as ``__anext__``.
        """
        batch: list[Event] = []
        try:
            batch.append(await self.__anext__())
        except StopAsyncIteration:
            return batch
        while len(batch) < limit and (event := self._next_nowait()) is not None:
            self.last = event.seq
            batch.append(event)
        return batch

    def _next_nowait(self) -> Event | None:
        """The next event already at hand, reading the store or attaching live as needed."""
        bus = self._bus
        while True:
            if self._page:
                return self._page.popleft()
            live = self._live
            if live is not None:
                while live.queue:
                    event = live.queue.popleft()
                    if event.seq > self.last:  # ``after`` may lie ahead of what is committed yet
                        return event
                if not (live.overflowed or live.stale or bus.closed):
                    return None  # wait for a publish
                self._detach()
            self._page.extend(
                bus._reader.events_after(self.last, self._session_id, REPLAY_PAGE, upto=bus._highest)
            )
            if self._page:
                continue
            if bus.closed:
                return None
            # Caught up: attach now, with no await since the read above, so nothing is missed.
            self._live = _Live(self._session_id, bus._live_buffer)
            bus._live.add(self._live)

    def _detach(self) -> None:
        if self._live is not None:
            self._bus._live.discard(self._live)
            self._live = None

    async def aclose(self) -> None:
        """Stop receiving live events."""
        self._detach()
        await trio.lowlevel.checkpoint()
