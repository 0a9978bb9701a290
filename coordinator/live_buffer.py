"""A subscriber's live buffer: the events the bus hands it while it is attached, deltas merged.

A delta that finds the previous delta of its step still unread in the buffer is merged into it, so a
slow reader gets fewer, larger deltas and the buffer holds at most one unread delta per streaming
step between two durable events.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import attrs
import trio

from coordinator.events import Event


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


class LiveBuffer:
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
