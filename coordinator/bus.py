"""The event bus: replay from the store, then live, with no gap, no duplicate and no back-pressure.

``publish`` is called once a commit is durable (``Store.on_durable``), in commit order, so an event
reaches nobody before it is durable. A subscriber reads pages from the store, up to the last event
published when the read began, until a read finds nothing new and nothing was published meanwhile,
then attaches a bounded live buffer *without awaiting in between*; since publishes run on the same
trio thread, no event can slip between the last page and the attach.

Several processes may write one database: a commit this bus did not publish (a gap in seq at a
publish, or a higher seq found by ``notice_foreign_commits``) sends every subscriber back to the store.

A slow subscriber never blocks the coordinator: when its buffer overflows, the buffer is dropped and
the subscriber falls back to reading the store from its last delivered seq, then attaches again. It
therefore never loses an event; ``lagged`` counts how often it fell behind.

Live-only events (``session.text.delta``, no seq) reach only subscribers that asked for them
(``deltas=True``), through ``publish_delta``. A delta that finds the previous delta of its step still
unread in a subscriber's buffer is merged into it, so a slow reader gets fewer, larger deltas and its
buffer holds at most one unread delta per streaming step between two durable events. Each time a
subscriber attaches (at its start, or again after it fell behind) it first gets, for every step
streaming then, one delta at offset 0 with the text published so far: the catch-up.
"""

from __future__ import annotations

import functools
import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Protocol

import attrs
import structlog
import trio

from coordinator import errors
from coordinator.clock import now_rfc3339
from coordinator.events import Event, stream_truncated
from coordinator.store import Reader, Store

log = structlog.get_logger()

LIVE_BUFFER = 4096
REPLAY_PAGE = 500


class StreamingText(Protocol):
    """A step's text while the model streams it (``actors/step_text.py``), as the bus sees it."""

    @property
    def session_id(self) -> str: ...

    @property
    def started_seq(self) -> int:
        """The seq of the step's ``session.step.started``: no delta of it is delivered before it."""
        ...

    def catch_up(self) -> Event | None:
        """One delta at offset 0 with all the text published so far; None while there is none."""
        ...


class _DeltaSlot:
    """A delta waiting in one subscriber's buffer; later adjacent deltas of its step merge into it."""

    __slots__ = ("end", "event", "more")

    def __init__(self, event: Event) -> None:
        self.event = event  # shared by every subscriber while nothing merged into it (encoded once)
        self.more: list[str] = []
        self.end = event.payload["offset"] + len(event.payload["delta"])

    def merge(self, event: Event) -> bool:
        """Append ``event`` if it continues this delta's text exactly; False otherwise."""
        payload = event.payload
        if payload["step_id"] != self.event.payload["step_id"] or payload["offset"] != self.end:
            return False
        self.more.append(payload["delta"])
        self.end += len(payload["delta"])
        return True

    def take(self) -> Event:
        if not self.more:
            return self.event
        delta = self.event.payload["delta"] + "".join(self.more)
        return attrs.evolve(self.event, payload={**self.event.payload, "delta": delta})


class SessionSet:
    """The sessions a subscriber follows: all (``session_id`` None), one, or one with its sub-agent
    sessions at every depth (``descendants``: those known when it subscribed; a sub-agent created
    later joins as its ``session.created`` passes, which precedes every event of it)."""

    def __init__(self, session_id: str | None, descendants: Iterable[str] | None = None) -> None:
        self.session_id = session_id
        self.members: set[str] | None = None
        if session_id is not None and descendants is not None:
            self.members = {session_id, *descendants}

    @property
    def stored_filter(self) -> str | None:
        """The session the store's replay may filter on (None: every event is read, then ``wants``)."""
        return self.session_id if self.members is None else None

    def wants(self, event: Event) -> bool:
        if self.session_id is None:
            return True
        if self.members is None:
            return event.session_id == self.session_id
        if event.type == "session.created":
            parent = (event.payload.get("session") or {}).get("parent") or {}
            if parent.get("session_id") in self.members and event.session_id is not None:
                self.members.add(event.session_id)
        return event.session_id in self.members

    def follows(self, session_id: str) -> bool:
        """Whether events of ``session_id`` are wanted (for a step's catch-up delta)."""
        if self.session_id is None:
            return True
        return session_id == self.session_id if self.members is None else session_id in self.members


class _Live:
    """A subscriber's live buffer, owned by the bus while attached."""

    def __init__(self, sessions: SessionSet, capacity: int, deltas: bool) -> None:
        self.sessions = sessions
        self.session_id = sessions.session_id
        self.capacity = capacity
        self.deltas = deltas
        self.queue: deque[Event | _DeltaSlot] = deque()
        # The unread delta of each session's streaming step, which its next delta may merge into.
        self.open_deltas: dict[str | None, _DeltaSlot] = {}
        self.overflowed = False
        # Set when another process committed events this bus did not publish: read the store.
        self.stale = False
        # Set when the one session this buffer follows was deleted: the subscription ends.
        self.gone = False
        self.wakeup = trio.Event()

    def wants(self, event: Event) -> bool:
        return self.sessions.wants(event)

    def add_delta(self, event: Event) -> bool:
        """Queue or merge a delta; False when the buffer is full (the caller drops the buffer)."""
        slot = self.open_deltas.get(event.session_id)
        if slot is not None and slot.merge(event):
            return True
        if len(self.queue) >= self.capacity:
            return False
        slot = self.open_deltas[event.session_id] = _DeltaSlot(event)
        self.queue.append(slot)
        return True

    def forget(self, session_id: str) -> None:
        """Drop the queued events of a deleted session."""
        self.queue = deque(item for item in self.queue if _session_of(item) != session_id)
        self.open_deltas.pop(session_id, None)
        if self.session_id == session_id:
            self.gone = True
        self.wakeup.set()

    def pop(self) -> Event:
        item = self.queue.popleft()
        if isinstance(item, Event):
            return item
        if self.open_deltas.get(item.event.session_id) is item:
            del self.open_deltas[item.event.session_id]
        return item.take()


def _session_of(item: Event | _DeltaSlot) -> str | None:
    return item.session_id if isinstance(item, Event) else item.event.session_id


def truncation(reader: Reader, after: int) -> Event | None:
    """``stream.truncated`` when retention deleted events after seq ``after`` (a replay from there
    has lost some), naming the oldest kept event after it; None when nothing after it was pruned."""
    if after >= reader.event_horizon():
        return None
    return stream_truncated(reader.oldest_seq_after(after), now_rfc3339())


@attrs.frozen(kw_only=True)
class _Page:
    """One read of the store for a subscription: its session still there, the events retention
    deleted, and the next events."""

    session_gone: bool
    horizon: int
    truncated: Event | None
    events: list[Event]


def _read_page(
    reader: Reader,
    *,
    session_id: str | None,
    after: int,
    last: int,
    horizon_seen: int,
    stored_filter: str | None,
    upto: int,
) -> _Page:
    if session_id is not None and reader.get_session(session_id) is None:
        return _Page(session_gone=True, horizon=horizon_seen, truncated=None, events=[])
    horizon = reader.event_horizon()
    truncated = truncation(reader, last) if horizon > horizon_seen else None
    events = reader.events_after(after, stored_filter, REPLAY_PAGE, upto=upto)
    return _Page(session_gone=False, horizon=horizon, truncated=truncated, events=events)


class Bus:
    """Fans committed events out to subscribers."""

    def __init__(self, store: Store, published: int, *, live_buffer: int = LIVE_BUFFER) -> None:
        """``published``: the seq of the last event already durable and committed (the store's
        ``last_seq`` when the bus starts)."""
        self._store = store
        # Weak: a subscription dropped without aclose() takes its buffer with it.
        self._live: weakref.WeakSet[_Live] = weakref.WeakSet()
        self._live_buffer = live_buffer
        # Every subscription not yet ended, replaying or attached (``_live`` holds only the attached).
        self._open: weakref.WeakSet[Subscription] = weakref.WeakSet()
        self.lagged = 0
        self.closed = False
        self._highest = published
        self._streaming: dict[str, StreamingText] = {}
        # Deltas of a step whose start is committed but not yet durable, by that event's seq: they are
        # delivered right after it, so the text never overtakes the step's start, and the step never
        # waits for a sync to stream.
        self._held: dict[int, list[Event]] = {}
        self.deltas_published = 0
        # Grows with every session deleted: a subscriber drops the store page it holds and reads again.
        self.deletions = 0

    def publish(self, events: Sequence[Event]) -> None:
        """Hand committed events to every attached subscriber. Never blocks."""
        if not events:
            return
        if events[0].stored_seq > self._highest + 1:
            self._mark_stale()  # another process committed in between: subscribers read the store
        self._highest = max(self._highest, events[-1].stored_seq)
        for live in list(self._live):
            if live.stale:
                continue
            for event in events:
                if not live.wants(event):
                    continue
                if len(live.queue) >= live.capacity:
                    self._overflow(live)
                    break
                live.queue.append(event)
                # A later delta must not merge into one queued before this event: it would jump it.
                live.open_deltas.pop(event.session_id, None)
                if live.deltas and self._held and not self._deliver_held(live, event.stored_seq):
                    break
            live.wakeup.set()
        for event in events:
            self._held.pop(event.stored_seq, None)

    def _deliver_held(self, live: _Live, seq: int) -> bool:
        for delta in self._held.get(seq, ()):
            if not live.add_delta(delta):
                self._overflow(live)
                return False
        return True

    def publish_delta(self, event: Event) -> None:
        """Hand a live-only event (no seq) to every attached subscriber that asked for deltas.

        Never blocks; a subscriber whose buffer is full falls back to the store, losing deltas only.
        """
        self.deltas_published += 1
        self._fan_out_delta(event)

    def publish_delta_after(self, event: Event, started_seq: int) -> None:
        """``publish_delta``, or, while the event of ``started_seq`` is not published yet, held until
        it is and delivered right after it."""
        if started_seq > self._highest:
            self.deltas_published += 1
            self._held.setdefault(started_seq, []).append(event)
        else:
            self.publish_delta(event)

    def _fan_out_delta(self, event: Event) -> None:
        for live in list(self._live):
            if live.deltas and not live.stale and live.wants(event):
                if live.add_delta(event):
                    live.wakeup.set()
                else:
                    self._overflow(live)

    def start_streaming(self, text: StreamingText) -> None:
        """Register a step's text while the model streams it: new subscribers catch up on it."""
        self._streaming[text.session_id] = text

    def stop_streaming(self, text: StreamingText) -> None:
        """The step's stream ended (answered or stopped): no catch-up on it from now on."""
        if self._streaming.get(text.session_id) is text:
            del self._streaming[text.session_id]

    def _catch_up(self, live: _Live) -> None:
        for text in self._streaming.values():
            # A step whose start this subscriber has not been handed yet gets its text after it.
            if text.started_seq > self._highest:
                continue
            if live.sessions.follows(text.session_id):
                event = text.catch_up()
                if event is not None:
                    live.add_delta(event)

    def _overflow(self, live: _Live) -> None:
        live.overflowed = True
        live.queue.clear()
        self._live.discard(live)
        self.lagged += 1
        log.warning("subscriber_lagged", session_id=live.session_id)

    @property
    def subscribers(self) -> int:
        """Subscriptions open now: neither closed by ``aclose()``, ended, nor dropped."""
        return len(self._open)

    @property
    def published_seq(self) -> int:
        """The seq of the last event published (every event up to it is durable)."""
        return self._highest

    async def notice_foreign_commits(self, store: Store) -> None:
        """Wake every subscriber to read the store if another process committed events since.

        Their events are published only after this process has synced the store once more, which
        makes them durable whoever wrote them.
        """
        last = await store.read(lambda reader: reader.last_seq())
        if last <= max(self._highest, store.last_own_seq):
            return  # nothing, or only this process's own commits, which reach the bus by publish()
        await store.sync_now()
        if last > self._highest:
            self._highest = last
            self._mark_stale()

    def forget_session(self, session_id: str) -> None:
        """A session was deleted (and that is durable): no subscriber delivers its events any more.

        Queued events of it are dropped from every live buffer, a subscription of that session alone
        ends, and a store page read before the delete is read again.
        """
        self.deletions += 1
        for live in self._live:
            live.forget(session_id)

    def _mark_stale(self) -> None:
        for live in self._live:
            live.stale = True
            live.wakeup.set()

    def close(self) -> None:
        """End every subscription after it has delivered what is committed."""
        self.closed = True
        for live in self._live:
            live.wakeup.set()

    def subscribe(
        self,
        *,
        after: int = 0,
        session_id: str | None = None,
        deltas: bool = False,
        descendants: bool = False,
        must_exist: bool = False,
    ) -> Subscription:
        """Every event with seq > ``after`` (of one session, or all), replayed then live.

        ``descendants``: the events of the session's sub-agent sessions are wanted too (those known at
        the first read, and those of sub-agents created later).

        Use as ``async for event in bus.subscribe(after=seq)``; it waits for new events once caught up
        and ends when the bus closes. With ``deltas`` the live part also carries live-only events
        (``session.text.delta``, seq None), each attach starting with the catch-up. With
        ``must_exist``, the first ``__anext__`` raises ``SessionNotFound`` for an unknown session.
        """
        subscription = Subscription(self, after, session_id, descendants, deltas, must_exist=must_exist)
        self._open.add(subscription)
        return subscription


class Subscription:
    """An iterator over events, replayed from the store then live.

    A class rather than an async generator, so a subscriber that stops iterating (``break``, a
    cancellation) leaves nothing to finalize: its live buffer is detached on the next publish that
    finds it gone, or at once by ``aclose()``.
    """

    def __init__(
        self,
        bus: Bus,
        after: int,
        session_id: str | None,
        descendants: bool,
        deltas: bool = False,
        *,
        must_exist: bool = False,
    ) -> None:
        self._bus = bus
        self._session_id = session_id
        self._must_exist = must_exist
        self._descendants = descendants
        self._sessions: SessionSet | None = None  # resolved at the first read
        self._deltas = deltas
        self.last = after
        # How far the store has been read: past ``last`` when the events read were not wanted.
        self._read = after
        self._page: deque[Event] = deque()
        self._page_deletions = bus.deletions
        self._live: _Live | None = None
        # The event horizon when this subscription last read the store: a higher one means retention
        # deleted events since, maybe some this subscriber has not had (``stream.truncated``).
        self._horizon_seen = 0
        self._ended = False
        self._look_for_deletion = False  # a session was deleted: is this one still there?

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        """The next event. **Cancellation:** safe at any point; nothing is lost or delivered twice.

        **Raises:** ``SessionNotFound`` (at the first) when the subscription's session does not exist.
        """
        await trio.lowlevel.checkpoint()
        if self._sessions is None:
            self._sessions = await self._resolve()
        while True:
            event = self._next_nowait()
            if event is not None:
                self._delivered(event)
                return event
            if self._ended:
                self._bus._open.discard(self)
                raise StopAsyncIteration
            if self._live is None:
                await self._read_store()
                continue
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
            self._delivered(event)
            batch.append(event)
        return batch

    async def _resolve(self) -> SessionSet:
        """The sessions followed: all, one, or one with its sub-agents known now."""
        session_id = self._session_id
        if session_id is None:
            return SessionSet(None)

        def look(reader: Reader) -> tuple[bool, list[str] | None]:
            family = reader.descendants(session_id) if self._descendants else None
            return reader.get_session(session_id) is not None, family

        exists, family = await self._bus._store.read(look)
        if self._must_exist and not exists:
            self._bus._open.discard(self)
            raise errors.SessionNotFound(message=f"no session {session_id!r}", session_id=session_id)
        return SessionSet(session_id, family)

    def _delivered(self, event: Event) -> None:
        if event.seq is not None:  # a live-only delta does not move the resume point
            self.last = event.seq
            self._read = max(self._read, event.seq)

    def _next_nowait(self) -> Event | None:
        """The next event already at hand (a page read from the store, the live buffer), or None:
        then the store must be read (``_live`` is None), the live buffer waited on, or it ended."""
        bus = self._bus
        if self._ended:
            return None
        if self._page_deletions != bus.deletions:
            self._page.clear()  # it may hold events of a session deleted since it was read
            self._read = self.last  # so it is read again from what was delivered
            self._page_deletions = bus.deletions
            self._detach()  # and whether its session is still there is read with it
            self._look_for_deletion = True
        if self._page:
            return self._page.popleft()
        live = self._live
        if live is None:
            return None
        if live.gone:
            self._detach()
            self._ended = True
            return None
        while live.queue:
            event = live.pop()
            # ``after`` may lie ahead of what is committed yet
            if event.seq is None or event.seq > self._read:
                return event
        if live.overflowed or live.stale or bus.closed:
            self._detach()  # read the store from what was delivered
        return None

    async def _read_store(self) -> None:
        """Read the next page after what was read, or attach live once caught up. **Cancellation:**
        safe: nothing of a page is taken before it is back."""
        bus, sessions = self._bus, self._sessions
        assert sessions is not None
        upto = bus._highest
        page = await bus._store.read(
            functools.partial(
                _read_page,
                session_id=self._session_id if self._look_for_deletion else None,
                after=self._read,
                last=self.last,
                horizon_seen=self._horizon_seen,
                stored_filter=sessions.stored_filter,
                upto=upto,
            )
        )
        if page.session_gone:
            self._ended = True  # its session was deleted
            return
        self._look_for_deletion = False
        if page.truncated is not None:
            self._horizon_seen = page.horizon
            self._page.append(page.truncated)
            return
        self._horizon_seen = page.horizon
        if page.events:
            self._read = page.events[-1].stored_seq
            self._page.extend(event for event in page.events if sessions.wants(event))
            return
        if bus.closed:
            self._ended = True
            return
        if bus._highest != upto or self._page_deletions != bus.deletions:
            return  # published (or deleted) while the page was read: read again
        # Caught up: attach now, with no await since the check above, so nothing is missed.
        self._live = _Live(sessions, bus._live_buffer, self._deltas)
        bus._live.add(self._live)
        if self._deltas:
            bus._catch_up(self._live)

    def _detach(self) -> None:
        if self._live is not None:
            self._bus._live.discard(self._live)
            self._live = None

    async def aclose(self) -> None:
        """Stop receiving live events."""
        self._detach()
        self._bus._open.discard(self)
        await trio.lowlevel.checkpoint()
