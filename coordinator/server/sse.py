"""Server-sent events: the event stream of the whole server or of one session, replayed then live.

Each event is ``id: SEQ``, ``event: TYPE``, ``data: JSON`` (exactly ``Event.to_dict()``) and a blank
line. A comment line keeps an idle connection alive. The subscription runs in its own task feeding an
unbuffered channel, so a slow client only delays its own stream: the bus never waits for a subscriber.
"""

from __future__ import annotations

import contextlib
import json

import attrs
import trio
from starlette.types import Receive, Scope, Send

from coordinator._coordinator import Coordinator
from coordinator.events import Event

KEEPALIVE_SECONDS = 15.0
"""Idle seconds after which a ``: keep-alive`` comment is sent."""

KEEPALIVE_COMMENT = b": keep-alive\n\n"

REPLAY_PAGE = 500

MAX_SEQ = 2**63 - 1
"""The largest seq the store can hold (a signed 64-bit integer)."""

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # tells a reverse proxy not to buffer the stream
]


def encode(event: Event) -> bytes:
    """One event in the ``text/event-stream`` format."""
    data = json.dumps(event.to_dict(), separators=(",", ":"), ensure_ascii=False)
    return f"id: {event.seq}\nevent: {event.type}\ndata: {data}\n\n".encode()


@attrs.frozen(kw_only=True)
class EventStream:
    """An ASGI response streaming the events after ``after`` (of ``session_id``, or all).

    With ``follow`` it replays, then streams live until the coordinator shuts down or the client
    leaves; without it, it ends once the events stored when it began have been sent.
    """

    coordinator: Coordinator
    after: int
    session_id: str | None
    follow: bool
    keepalive: float = KEEPALIVE_SECONDS

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
            await self._pump(send)
            nursery.cancel_scope.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _pump(self, send: Send) -> None:
        sender, receiver = trio.open_memory_channel[Event](0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._feed, sender)
            async with receiver:
                while (body := await self._next_body(receiver)) is not None:
                    await send({"type": "http.response.body", "body": body, "more_body": True})

    async def _next_body(self, receiver: trio.MemoryReceiveChannel[Event]) -> bytes | None:
        """The next event, a keep-alive comment after ``keepalive`` idle seconds, or None at the end."""
        with trio.move_on_after(self.keepalive):
            try:
                return encode(await receiver.receive())
            except trio.EndOfChannel:
                return None
        return KEEPALIVE_COMMENT

    async def _feed(self, sender: trio.MemorySendChannel[Event]) -> None:
        async with sender:
            if not self.follow:
                await self._send_stored(sender)
                return
            subscription = self.coordinator.subscribe(after=self.after, session_id=self.session_id)
            async with contextlib.aclosing(subscription) as events:
                async for event in events:
                    await sender.send(event)

    async def _send_stored(self, sender: trio.MemorySendChannel[Event]) -> None:
        """Send the events stored when the stream began, page by page, then stop."""
        reader = self.coordinator.store.read
        high = self.coordinator.published_seq
        last = self.after
        while last < high:
            page = [e for e in reader.events_after(last, self.session_id, REPLAY_PAGE) if e.seq <= high]
            if not page:
                return
            for event in page:
                await sender.send(event)
                last = event.seq


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
