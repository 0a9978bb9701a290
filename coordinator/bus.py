"""The event bus: replay from the store, then live, with no gap, no duplicate and no back-pressure.

``publish`` is called synchronously right after each commit, so the store and the bus agree: an event
is live only once it is durable. A subscriber reads pages from the store until it has caught up, then
attaches a bounded live buffer *without awaiting in between*; since commits and publishes run on the
same trio thread, no event can slip between the last page and the attach.

Several processes may write one database: a commit this bus did not publish (a gap in seq at a
publish, or a higher seq found by ``notice_foreign_commits``) sends every subscriber back to the store.

A slow subscriber never blocks the coordinator: when its buffer overflows, the buffer is dropped and
the subscriber falls back to reading the store from its last delivered seq, then attaches again. It
therefore never loses an event; ``lagged`` counts how often it fell behind.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Sequence

import structlog
import trio

from coordinator.events import Event
from coordinator.store import Queries

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
        self._live: set[_Live] = set()
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

    def notice_foreign_commits(self) -> None:
        """Wake every subscriber to read the store if another process committed events since."""
        last = self._reader.last_seq()
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

    async def subscribe(
        self, *, after: int = 0, session_id: str | None = None
    ) -> AsyncGenerator[Event, None]:
        """Yield every event with seq > ``after`` (of one session, or all), replayed then live.

        Waits for new events once caught up; ends when the bus closes.

        **Cancellation:** safe at any point; the subscriber's live buffer is detached.
        """
        last = after
        while True:
            page = self._reader.events_after(last, session_id, REPLAY_PAGE)
            if page:
                for event in page:
                    yield event
                    last = event.seq
                continue
            if self.closed:
                return
            # Caught up: attach now, with no await since the read above, so nothing is missed.
            live = _Live(session_id, self._live_buffer)
            self._live.add(live)
            try:
                async for event in self._drain(live):
                    if event.seq > last:  # ``after`` may lie ahead of what is committed yet
                        yield event
                        last = event.seq
            finally:
                self._live.discard(live)

    async def _drain(self, live: _Live) -> AsyncIterator[Event]:
        while True:
            while live.queue:
                yield live.queue.popleft()
            if live.overflowed or live.stale or self.closed:
                return
            live.wakeup = trio.Event()
            await live.wakeup.wait()
