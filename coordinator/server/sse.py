"""Server-sent events: the event stream of the whole server or of one session, replayed then live.

Each event is ``id: SEQ``, ``event: TYPE``, ``data: JSON`` (exactly ``Event.to_dict()``) and a blank
line; a live-only event (``session.text.delta``, asked for with ``?deltas=true``) has no ``id:`` line,
so a client's ``Last-Event-ID`` never moves for it. A replay from a seq retention has deleted past
starts with ``event: stream.truncated`` and ``data: {"oldest_seq": N}``, no id either. A comment line keeps an idle connection alive. A slow client only delays its own stream: the bus
never waits for a subscriber, and what queued up meanwhile goes out as one chunk.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections import OrderedDict

import attrs
import trio
from starlette.types import Receive, Scope, Send

from coordinator._coordinator import Coordinator
from coordinator.events import STREAM_TRUNCATED, Event
from coordinator.live_buffer import SessionSet
from coordinator.store import Reader
from coordinator.subscription import truncation

KEEPALIVE_SECONDS = 15.0
"""Idle seconds after which a ``: keep-alive`` comment is sent."""

KEEPALIVE_COMMENT = b": keep-alive\n\n"

REPLAY_PAGE = 500

BATCH_EVENTS = 500
"""At most this many events in one chunk of a live stream."""

GATHER_PASSES = 6
"""Passes of trio's loop a live stream lets run once an event is at hand, before it writes the
batch. A pass runs every runnable task a step, so it lasts longer the more streams are writing: a
lone stream waits microseconds, a hundred about as long as a sync, and each of them writes half as
often (a write costs the server about 100 µs of CPU in hypercorn: design/benchmarks.md)."""

SYNC_AMONG_STREAMS = 8
"""From this many live streams on, a stream whose batch is gathered also waits for the sync of a
commit already made, if one is due (``SYNC_WAIT_SECONDS`` at most): a write costs more server CPU
than a sync takes as soon as a few streams write each commit apart. A lone stream never waits."""

SYNC_WAIT_SECONDS = 0.005
"""The longest a live stream's batch waits for a due sync (a WAL sync takes 0.5 ms at the median)."""

MAX_SEQ = 2**63 - 1
"""The largest seq the store can hold (a signed 64-bit integer)."""

LAST_SEQ_HEADER = b"coordinator-last-seq"
"""A header of every event stream: the seq of the last event published when the stream began."""

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # tells a reverse proxy not to buffer the stream
]


def encode(event: Event) -> bytes:
    """One event in the ``text/event-stream`` format (``stream.truncated``: its payload alone)."""
    body = event.payload if event.type == STREAM_TRUNCATED else event.to_dict()
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    if event.seq is None:
        return f"event: {event.type}\ndata: {data}\n\n".encode()
    return f"id: {event.seq}\nevent: {event.type}\ndata: {data}\n\n".encode()


class _Encoded:
    """The encoding of the events most recently streamed: every stream of a fan-out gets the same
    ``Event`` objects from the bus, so each is encoded once, not once per subscriber."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        # Keyed by identity; the event is kept beside its bytes, so its id is not reused meanwhile.
        self._entries: OrderedDict[int, tuple[Event, bytes]] = OrderedDict()

    def __call__(self, event: Event) -> bytes:
        entry = self._entries.get(id(event))
        if entry is not None and entry[0] is event:
            return entry[1]
        body = encode(event)
        self._entries[id(event)] = (event, body)
        if len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return body


_encoded = _Encoded(capacity=8192)


@attrs.frozen(kw_only=True)
class EventStream:
    """An ASGI response streaming the events after ``after`` (of ``session_id``, or all).

    With ``follow`` it replays, then streams live until the coordinator shuts down or the client
    leaves; without it, it ends once the events published when it began have been sent. Whatever is
    at hand is written as one chunk: a subscriber that fell behind catches up in a few large writes
    rather than one per event.
    """

    coordinator: Coordinator
    after: int
    session_id: str | None
    follow: bool
    keepalive: float = KEEPALIVE_SECONDS
    deltas: bool = False
    descendants: bool = False  # with ``session_id``: its sub-agent sessions' events too
    # Only the events of this principal's sessions (a ``user``'s stream); None: every session's.
    owner: str | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Where the live end is as the stream begins: a client that wants only what comes next (``coordinator
        # events --from-now``) reads it off a stream of nothing (``after`` past it, no follow).
        last = (LAST_SEQ_HEADER, str(self.coordinator.published_seq).encode())
        await send({"type": "http.response.start", "status": 200, "headers": [*_HEADERS, last]})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
            if self.follow:
                await self._stream(send)
            else:
                await self._send_stored(send)
            nursery.cancel_scope.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _stream(self, send: Send) -> None:
        """Replayed, then live: a batch at a time, a keep-alive comment after ``keepalive`` idle seconds."""
        subscription = self.coordinator.subscribe(
            after=self.after, session_id=self.session_id, deltas=self.deltas, descendants=self.descendants
        )
        owned = Owned(self.coordinator, self.owner)
        async with contextlib.aclosing(subscription):
            while True:
                batch: list[Event] | None = None
                with trio.move_on_after(self.keepalive):  # the wait only: a slow send is not cut
                    batch = await subscription.next_batch(
                        BATCH_EVENTS,
                        gather_passes=GATHER_PASSES,
                        sync_among=SYNC_AMONG_STREAMS,
                        sync_wait=SYNC_WAIT_SECONDS,
                    )
                if batch is None:
                    await _send_body(send, KEEPALIVE_COMMENT)
                elif batch:
                    shown = await owned.visible(batch)
                    if shown:
                        await _send_body(send, b"".join(map(_encoded, shown)))
                else:
                    return  # the coordinator shut down

    async def _send_stored(self, send: Send) -> None:
        """Send the events published when the stream began, a page a chunk, then stop."""
        read = self.coordinator.store.read
        high = self.coordinator.published_seq
        last = self.after
        truncated = await read(lambda reader: truncation(reader, last))
        if truncated is not None:
            await _send_body(send, encode(truncated))
        family = None
        if self.descendants and self.session_id is not None:
            session_id = self.session_id
            family = await read(lambda reader: reader.descendants(session_id))
        sessions = SessionSet(self.session_id, family)
        owned = Owned(self.coordinator, self.owner)
        while last < high:
            page = await read(
                functools.partial(_stored_page, after=last, stored_filter=sessions.stored_filter, upto=high)
            )
            if not page:
                return
            wanted = await owned.visible([event for event in page if sessions.wants(event)])
            if wanted:
                await _send_body(send, b"".join(map(encode, wanted)))
            last = page[-1].stored_seq


class Owned:
    """Which events a ``user``'s stream shows: those of its own sessions. Each session's owner is read
    once (from its ``session.created`` when the stream sees it, else from the store), then kept for
    the stream's life; a session that is gone shows nothing."""

    def __init__(self, coordinator: Coordinator, owner: str | None) -> None:
        self._coordinator = coordinator
        self._owner = owner
        self._owners: dict[str, str | None] = {}

    async def visible(self, events: list[Event]) -> list[Event]:
        if self._owner is None:
            return events
        for event in events:
            if event.type == "session.created" and event.session_id is not None:
                self._owners.setdefault(event.session_id, event.payload["session"].get("owner"))
        unknown = {
            e.session_id for e in events if e.session_id is not None and e.session_id not in self._owners
        }
        for session_id in unknown:
            exists, owner = await self._coordinator.store.read(
                functools.partial(_owner_of, session_id=session_id)
            )
            self._owners[session_id] = owner if exists else None
        return [e for e in events if e.session_id is None or self._owners.get(e.session_id) == self._owner]


def _owner_of(reader: Reader, *, session_id: str) -> tuple[bool, str | None]:
    return reader.session_owner(session_id)


async def _send_body(send: Send, body: bytes) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": True})


async def _cancel_on_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def resume_point(after: int, last_event_id: str | None) -> int:
    """Where a stream starts: the larger of ``?after=`` and a valid ``Last-Event-ID``.

    A malformed ``Last-Event-ID`` is ignored rather than refused: browsers send back whatever id
    they last saw, and the stream can still start from ``after``.
    """
    resumed = parse_seq(last_event_id) if last_event_id is not None else None
    return after if resumed is None else max(after, resumed)


def parse_seq(text: str) -> int | None:
    """A seq written in decimal, from 0 to ``MAX_SEQ``, or None."""
    text = text.strip()
    if not text.isascii() or not text.isdigit() or len(text) > len(str(MAX_SEQ)):
        return None
    value = int(text)
    return value if value <= MAX_SEQ else None


def _stored_page(reader: Reader, *, after: int, stored_filter: str | None, upto: int) -> list[Event]:
    return reader.events_after(after, stored_filter, REPLAY_PAGE, upto=upto)
