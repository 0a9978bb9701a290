"""Every wait on a person of one turn, by the call it belongs to: the one tracker a stop orders by.

A stop's events come in a fixed order: every wait's revocation before any call's failure. So a call's
cleanup waits (``settled``) until no wait of the turn is still open or still its call's to settle; and
a call's settlement looks for a pending wait of its own only if it can have one (``may_have_waits``),
skipping two reads for every call that never asked anyone.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterable, Iterator

import attrs
import trio


class WaitState(enum.Enum):
    """Where a call's wait is, as this process knows it."""

    # Its actor began to open it here: its row may be committed before anything else runs.
    OPENING = "opening"
    # An actor waits on it.
    LIVE = "live"
    # Its call settles it: a resumed call's kept wait not re-opened yet, or a wait whose own
    # revocation could not be committed.
    KEPT = "kept"
    # Settled by its own actor.
    SETTLED = "settled"


# The states a stop's call failures wait out.
_OUTSTANDING = frozenset({WaitState.LIVE, WaitState.KEPT})


@attrs.define(eq=False)
class WaitBook:
    """The waits of one turn by call id; owned by the turn, written only by its actors."""

    _state: dict[str, WaitState] = attrs.Factory(dict)
    _changed: trio.Event = attrs.Factory(trio.Event)

    def kept(self, call_ids: Iterable[str]) -> None:
        """A resumed turn's calls whose kept waits are not re-opened yet."""
        self._state.update(dict.fromkeys(call_ids, WaitState.KEPT))

    def began(self, call_id: str) -> None:
        """The call's actor begins to open a wait: recorded before its row is written."""
        if self._state.get(call_id) is not WaitState.KEPT:
            self._state[call_id] = WaitState.OPENING

    @contextlib.contextmanager
    def open(self, call_id: str) -> Iterator[None]:
        """Around a live wait, however it ends."""
        self._state[call_id] = WaitState.LIVE
        try:
            yield
        finally:
            if self._state[call_id] is WaitState.LIVE:
                self._state[call_id] = WaitState.SETTLED
            self._signal()

    @contextlib.contextmanager
    def settling(self, call_id: str) -> Iterator[None]:
        """Around a live wait's own settlement: if it raises (its revocation could not be committed),
        the wait is left to its call, which revokes it as it settles, and it still counts among the
        waits every call's failure comes after."""
        done = False
        try:
            yield
            done = True
        finally:
            if not done:
                self._state[call_id] = WaitState.KEPT

    def forget(self, call_id: str) -> None:
        """The call settled its kept wait (or had it answered) without re-opening it."""
        if self._state.get(call_id) is WaitState.KEPT:
            self._state[call_id] = WaitState.SETTLED
            self._signal()

    def is_kept(self, call_id: str) -> bool:
        """Whether the call itself must settle its wait (``WaitState.KEPT``)."""
        return self._state.get(call_id) is WaitState.KEPT

    def may_have_waits(self, call_id: str) -> bool:
        """Whether the call's settlement must look for a wait of its own left pending: one this
        process began to open for it, or a kept one. Every other call never had one."""
        return call_id in self._state

    async def settled(self) -> None:
        """Wait until no wait of the turn is open or kept."""
        while any(state in _OUTSTANDING for state in self._state.values()):
            await self._changed.wait()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = trio.Event()
