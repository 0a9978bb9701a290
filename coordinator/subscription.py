"""A subscription: every event after a seq, replayed from the store, then live from the bus.

A subscriber reads pages from the store, up to the last event published when the read began, until a
read finds nothing new and nothing was published meanwhile, then attaches a bounded live buffer
*without awaiting in between*; since publishes run on the same trio thread, no event can slip between
the last page and the attach. A buffer that overflows, or that another process's commit made stale,
is dropped, and the subscriber reads the store again from its last delivered seq: it never loses an
event. The bus (``bus.py``) and its subscriptions share one ``Hub``: what is published, who is
attached, which steps stream.
"""

from __future__ import annotations

import functools
import weakref
from collections import deque
from typing import Protocol

import attrs
import trio

from coordinator import errors
from coordinator.clock import now_rfc3339
from coordinator.events import Event, stream_truncated
from coordinator.live_buffer import LiveBuffer, SessionSet
from coordinator.logs import get_logger
from coordinator.store import Reader, Store

log = get_logger(__name__)

LIVE_BUFFER = 4096
REPLAY_PAGE = 500


class StreamingText(Protocol):
    """A step's text while the model streams it (``coordinator/actors/step_text.py``), as the bus sees it."""

    @property
    def session_id(self) -> str: ...

    @property
    def started_seq(self) -> int:
        """The seq of the step's ``session.step.started``: no delta of it is delivered before it."""
        ...

    def catch_up(self) -> Event | None:
        """One delta at offset 0 with all the text published so far; None while there is none."""
        ...


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
    if session_id is not None and not reader.session_exists(session_id):
        return _Page(session_gone=True, horizon=horizon_seen, truncated=None, events=[])
    horizon = reader.event_horizon()
    truncated = truncation(reader, last) if horizon > horizon_seen else None
    events = reader.events_after(after, stored_filter, REPLAY_PAGE, upto=upto)
    return _Page(session_gone=False, horizon=horizon, truncated=truncated, events=events)


@attrs.define(eq=False)
class Hub:
    """What the bus and its subscriptions share: the store, what is published, who is attached."""

    store: Store
    highest: int
    """The seq of the last event published (every event up to it is durable)."""
    committed: int = 0
    """The seq of the last event this process committed: above ``highest`` while its sync is due."""
    live_buffer: int = LIVE_BUFFER
    # Weak: a subscription dropped without aclose() takes its buffer with it.
    live: weakref.WeakSet[LiveBuffer] = attrs.field(factory=weakref.WeakSet)
    # Every subscription not yet ended, replaying or attached (``live`` holds only the attached).
    open: weakref.WeakSet[Subscription] = attrs.field(factory=weakref.WeakSet)
    streaming: dict[str, StreamingText] = attrs.field(factory=dict)
    closed: bool = False
    # Grows with every session deleted: a subscriber drops the store page it holds and reads again.
    deletions: int = 0
    lagged: int = 0

    def attach(self, sessions: SessionSet, deltas: bool) -> LiveBuffer:
        """A live buffer for a subscriber caught up now, with its catch-up deltas when it wants them."""
        live = LiveBuffer(sessions, self.live_buffer, deltas)
        self.live.add(live)
        if deltas:
            for text in self.streaming.values():
                # A step whose start this subscriber has not been handed yet gets its text after it.
                if text.started_seq <= self.highest and sessions.follows(text.session_id):
                    event = text.catch_up()
                    if event is not None:
                        live.add_delta(event)
        return live

    def overflow(self, live: LiveBuffer) -> None:
        live.overflowed = True
        live.queue.clear()
        self.live.discard(live)
        self.lagged += 1
        log.warning("subscriber_lagged", session_id=live.session_id)


async def _let_run(passes: int) -> None:
    """Let trio's loop run ``passes`` passes: schedule points, not cancellation points (a batch
    whose first event is delivered already is returned)."""
    for _ in range(passes):
        await trio.lowlevel.cancel_shielded_checkpoint()


class Subscription:
    """An iterator over events, replayed from the store then live.

    A class rather than an async generator, so a subscriber that stops iterating (``break``, a
    cancellation) leaves nothing to finalize: its live buffer is detached on the next publish that
    finds it gone, or at once by ``aclose()``.
    """

    def __init__(
        self,
        hub: Hub,
        after: int,
        session_id: str | None,
        descendants: bool,
        deltas: bool = False,
        *,
        must_exist: bool = False,
    ) -> None:
        self._hub = hub
        self._session_id = session_id
        self._must_exist = must_exist
        self._descendants = descendants
        self._sessions: SessionSet | None = None  # resolved at the first read
        self._deltas = deltas
        self.last = after
        # How far the store has been read: past ``last`` when the events read were not wanted.
        self._read = after
        self._page: deque[Event] = deque()
        self._page_deletions = hub.deletions
        self._live: LiveBuffer | None = None
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
                self._hub.open.discard(self)
                raise StopAsyncIteration
            if self._live is None:
                await self._read_store()
                continue
            live = self._live
            live.wakeup = trio.Event()
            await live.wakeup.wait()

    async def next_batch(
        self, limit: int, *, gather_passes: int = 0, sync_among: int | None = None, sync_wait: float = 0.0
    ) -> list[Event]:
        """The next events at hand, at least one and at most ``limit``; empty once the bus closed.

        Waits only while none is at hand, so a slow reader gets everything queued meanwhile in one
        batch (the SSE stream writes a batch as one chunk). With ``gather_passes``, once the first
        event is at hand, trio's loop runs that many more passes (each runnable task a step) before
        the rest is taken: what the coordinator publishes meanwhile joins the batch. With
        ``sync_among``, when at least that many subscribers are attached live, the batch also waits
        while a commit of this process waits for its sync, at most ``sync_wait`` seconds in all:
        many streams then write once for several commits.

        **Cancellation:** safe, as ``__anext__``; once the first event is taken, the batch is returned
        (after the sync's wait, which is shielded and bounded by ``sync_wait``).
        """
        batch: list[Event] = []
        try:
            batch.append(await self.__anext__())
        except StopAsyncIteration:
            return batch
        await _let_run(gather_passes)
        if sync_among is not None:
            await self._wait_for_due_syncs(sync_among, sync_wait, gather_passes)
        while len(batch) < limit and (event := self._next_nowait()) is not None:
            self._delivered(event)
            batch.append(event)
        return batch

    async def _wait_for_due_syncs(self, among: int, seconds: float, passes: int) -> None:
        """While a commit of this process waits for its sync, at most ``seconds`` in all, if at least
        ``among`` subscribers are attached live (each of whom would write each commit apart): until
        its publish, then ``passes`` passes of the loop, and again while another is due."""
        hub, live = self._hub, self._live
        if live is None or hub.committed <= hub.highest or len(hub.live) < among:
            return
        with trio.CancelScope(deadline=trio.current_time() + seconds, shield=True):
            while hub.committed > hub.highest and not (live.stale or hub.closed):
                live.wakeup = trio.Event()
                await live.wakeup.wait()
                await _let_run(passes)  # what the publish set going commits next joins too

    async def _resolve(self) -> SessionSet:
        """The sessions followed: all, one, or one with its sub-agents known now."""
        session_id = self._session_id
        if session_id is None:
            return SessionSet(None)

        def look(reader: Reader) -> tuple[bool, list[str] | None]:
            family = reader.descendants(session_id) if self._descendants else None
            return reader.session_exists(session_id), family

        exists, family = await self._hub.store.read(look)
        if self._must_exist and not exists:
            self._hub.open.discard(self)
            raise errors.SessionNotFound(message=f"no session {session_id!r}", session_id=session_id)
        return SessionSet(session_id, family)

    def _delivered(self, event: Event) -> None:
        if event.seq is not None:  # a live-only delta does not move the resume point
            self.last = event.seq
            self._read = max(self._read, event.seq)

    def _next_nowait(self) -> Event | None:
        """The next event already at hand (a page read from the store, the live buffer), or None:
        then the store must be read (``_live`` is None), the live buffer waited on, or it ended."""
        hub = self._hub
        if self._ended:
            return None
        if self._page_deletions != hub.deletions:
            self._page.clear()  # it may hold events of a session deleted since it was read
            self._read = self.last  # so it is read again from what was delivered
            self._page_deletions = hub.deletions
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
        if live.overflowed or live.stale or hub.closed:
            self._detach()  # read the store from what was delivered
        return None

    async def _read_store(self) -> None:
        """Read the next page after what was read, or attach live once caught up. **Cancellation:**
        safe: nothing of a page is taken before it is back."""
        hub, sessions = self._hub, self._sessions
        assert sessions is not None
        upto = hub.highest
        page = await hub.store.read(
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
        if hub.closed:
            self._ended = True
            return
        if hub.highest != upto or self._page_deletions != hub.deletions:
            return  # published (or deleted) while the page was read: read again
        # Caught up: attach now, with no await since the check above, so nothing is missed.
        self._live = hub.attach(sessions, self._deltas)

    def _detach(self) -> None:
        if self._live is not None:
            self._hub.live.discard(self._live)
            self._live = None

    async def aclose(self) -> None:
        """Stop receiving live events."""
        self._detach()
        self._hub.open.discard(self)
        await trio.lowlevel.checkpoint()
