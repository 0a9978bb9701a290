"""The event bus: committed events to every subscriber, with no gap, no duplicate and no back-pressure.

``publish`` is called once a commit is durable (``Store.on_durable``), in commit order, so an event
reaches nobody before it is durable. Subscriptions (``subscription.py``) replay from the store, then
attach a live buffer here.

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

from collections.abc import Sequence

from coordinator.events import Event
from coordinator.live_buffer import LiveBuffer
from coordinator.store import Store
from coordinator.subscription import LIVE_BUFFER, Hub, StreamingText, Subscription

__all__ = ["Bus", "StreamingText", "Subscription"]


class Bus:
    """Fans committed events out to subscribers."""

    def __init__(self, store: Store, published: int, *, live_buffer: int = LIVE_BUFFER) -> None:
        """``published``: the seq of the last event already durable and committed (the store's
        ``last_seq`` when the bus starts)."""
        self._hub = Hub(store=store, highest=published, live_buffer=live_buffer)
        # Deltas of a step whose start is committed but not yet durable, by that event's seq: they are
        # delivered right after it, so the text never overtakes the step's start, and the step never
        # waits for a sync to stream.
        self._held: dict[int, list[Event]] = {}
        self.deltas_published = 0

    def note_committed(self, events: Sequence[Event]) -> None:
        """Events this process has just committed, to be published once durable (``Store.on_commit``):
        while they wait, a stream among many waits for them too (``Subscription.next_batch``)."""
        if events:
            self._hub.committed = max(self._hub.committed, events[-1].stored_seq)

    def publish(self, events: Sequence[Event]) -> None:
        """Hand committed events to every attached subscriber. Never blocks."""
        if not events:
            return
        if events[0].stored_seq > self._hub.highest + 1:
            self._mark_stale()  # another process committed in between: subscribers read the store
        self._hub.highest = max(self._hub.highest, events[-1].stored_seq)
        for live in list(self._hub.live):
            if live.stale:
                continue
            for event in events:
                if not live.wants(event):
                    continue
                if len(live.queue) >= live.capacity:
                    self._hub.overflow(live)
                    break
                live.queue.append(event)
                # A later delta must not merge into one queued before this event: it would jump it.
                live.open_deltas.pop(event.session_id, None)
                if live.deltas and self._held and not self._deliver_held(live, event.stored_seq):
                    break
            live.wakeup.set()
        for event in events:
            self._held.pop(event.stored_seq, None)

    def _deliver_held(self, live: LiveBuffer, seq: int) -> bool:
        for delta in self._held.get(seq, ()):
            if not live.add_delta(delta):
                self._hub.overflow(live)
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
        if started_seq > self._hub.highest:
            self.deltas_published += 1
            self._held.setdefault(started_seq, []).append(event)
        else:
            self.publish_delta(event)

    def _fan_out_delta(self, event: Event) -> None:
        for live in list(self._hub.live):
            if live.deltas and not live.stale and live.wants(event):
                if live.add_delta(event):
                    live.wakeup.set()
                else:
                    self._hub.overflow(live)

    def start_streaming(self, text: StreamingText) -> None:
        """Register a step's text while the model streams it: new subscribers catch up on it."""
        self._hub.streaming[text.session_id] = text

    def stop_streaming(self, text: StreamingText) -> None:
        """The step's stream ended (answered or stopped): no catch-up on it from now on."""
        if self._hub.streaming.get(text.session_id) is text:
            del self._hub.streaming[text.session_id]

    @property
    def lagged(self) -> int:
        """How often a subscriber fell behind and went back to the store."""
        return self._hub.lagged

    @property
    def closed(self) -> bool:
        return self._hub.closed

    @property
    def deletions(self) -> int:
        """Sessions deleted while this bus ran."""
        return self._hub.deletions

    @property
    def subscribers(self) -> int:
        """Subscriptions open now: neither closed by ``aclose()``, ended, nor dropped."""
        return len(self._hub.open)

    @property
    def published_seq(self) -> int:
        """The seq of the last event published (every event up to it is durable)."""
        return self._hub.highest

    async def notice_foreign_commits(self, store: Store) -> None:
        """Wake every subscriber to read the store if another process committed events since.

        Their events are published only after this process has synced the store once more, which
        makes them durable whoever wrote them.
        """
        last = await store.read(lambda reader: reader.last_seq())
        if last <= max(self._hub.highest, store.last_own_seq):
            return  # nothing, or only this process's own commits, which reach the bus by publish()
        await store.sync_now()
        if last > self._hub.highest:
            self._hub.highest = last
            self._mark_stale()

    def forget_session(self, session_id: str) -> None:
        """A session was deleted (and that is durable): no subscriber delivers its events any more.

        Queued events of it are dropped from every live buffer, a subscription of that session alone
        ends, and a store page read before the delete is read again.
        """
        self._hub.deletions += 1
        for live in self._hub.live:
            live.forget(session_id)

    def _mark_stale(self) -> None:
        for live in self._hub.live:
            live.stale = True
            live.wakeup.set()

    def close(self) -> None:
        """End every subscription after it has delivered what is committed."""
        self._hub.closed = True
        for live in self._hub.live:
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
        subscription = Subscription(self._hub, after, session_id, descendants, deltas, must_exist=must_exist)
        self._hub.open.add(subscription)
        return subscription
