"""A session's life in this process: the owner of what outlives one tool call.

A tool may keep something for its session (a connection, a server process, a browser) rather than
open it at every call: ``ToolContext.keep_for_session(key, opener)`` opens it once, and every later
call of the session's turns gets the same one. The session's life owns it, in a task of its own under
the coordinator's root nursery, and closes it when the life ends:

- when the session is deleted;
- when the coordinator shuts down (after the running turns were suspended);
- when the session has had no running turn for ``IDLE_SECONDS``, so that a daemon that served
  thousands of sessions does not hold a resource for each of them.

A life begins with the first ``keep`` of its session and holds nothing else: a session that keeps
nothing has none. Tools a kept resource offers to its session alone (``provide``) are withdrawn from
the tool table as the life ends.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import attrs
import structlog
import trio

from coordinator.errors import SessionEnded
from coordinator.logs import get_logger
from coordinator.tools.base import Tool
from coordinator.tools.table import ToolTable

log = get_logger(__name__)

T = TypeVar("T")

IDLE_SECONDS = 600.0
"""Seconds a session's life outlasts its last running turn before what it keeps is closed."""

CLOSE_SECONDS = 10.0
"""Bound on closing one kept resource; past it the closing is cancelled."""

Opener = Callable[[], AbstractAsyncContextManager[Any]]


@attrs.define(eq=False)
class _Kept:
    """One resource being opened, held, or failed to open; its holder task sets ``ready``."""

    ready: trio.Event = attrs.Factory(trio.Event)
    value: Any = None
    error: BaseException | None = None
    # The holder's scope: the life's end gives it ``CLOSE_SECONDS`` to open (if it still is) and close.
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)


@attrs.define(eq=False)
class SessionLife:
    """What one session keeps in this process, and the task that holds it."""

    session_id: str
    kept: dict[str, _Kept] = attrs.Factory(dict)
    providers: set[str] = attrs.Factory(set)
    started: trio.Event = attrs.Factory(trio.Event)  # its nursery is open
    ending: trio.Event = attrs.Factory(trio.Event)
    done: trio.Event = attrs.Factory(trio.Event)
    last_turn_at: float = 0.0
    nursery: trio.Nursery | None = None


class SessionLives:
    """Every session's life in this process, owned by the coordinator's root nursery.

    ``busy(session_id)`` says whether a turn of the session runs now (the idle clock waits for it).
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        tools: ToolTable,
        busy: Callable[[str], bool],
        *,
        idle_seconds: float | None = None,
    ) -> None:
        self._nursery = nursery
        self._tools = tools
        self._busy = busy
        self._idle_seconds = IDLE_SECONDS if idle_seconds is None else idle_seconds
        self._lives: dict[str, SessionLife] = {}
        self.closed = False

    def __len__(self) -> int:
        return len(self._lives)

    async def keep(self, session_id: str, key: str, opener: Opener) -> Any:
        """The resource kept as ``key`` for the session, opened with ``opener`` if it is not yet.

        **Raises:** whatever ``opener`` raised while opening (and the next ``keep`` tries again);
        ``SessionEnded`` when the session's life ends before it is open.
        """
        life = await self._life(session_id)
        life.last_turn_at = trio.current_time()
        entry = life.kept.get(key)
        if entry is None:
            entry = life.kept[key] = _Kept()
            assert life.nursery is not None
            life.nursery.start_soon(functools.partial(self._hold, life, key, entry, opener))
        await entry.ready.wait()
        if entry.error is not None:
            raise entry.error
        if life.ending.is_set():
            raise SessionEnded(f"the life of {session_id} ended while its {key!r} was opening")
        return entry.value

    def provide(self, session_id: str, provider: str, tools: Iterable[Tool]) -> None:
        """Offer ``tools`` to the session alone until its life ends (see ``ToolTable.provide``)."""
        life = self._lives.get(session_id)
        if life is None or life.ending.is_set():
            return
        life.providers.add(provider)
        self._tools.provide(provider, tools, session_id=session_id)

    async def end(self, session_id: str) -> None:
        """End the session's life (it was deleted): what it keeps is closed before this returns."""
        life = self._lives.get(session_id)
        if life is not None:
            life.ending.set()
            await life.done.wait()

    async def end_all(self) -> None:
        """End every life (the coordinator is shutting down) and start no other."""
        self.closed = True
        lives = list(self._lives.values())
        for life in lives:
            life.ending.set()
        for life in lives:
            await life.done.wait()

    async def _life(self, session_id: str) -> SessionLife:
        life = self._lives.get(session_id)
        if life is None or life.ending.is_set():
            if self.closed:
                raise SessionEnded(f"the coordinator is shutting down: nothing is kept for {session_id}")
            if life is not None:
                await life.done.wait()  # its resources close before the session's new life opens them
            life = SessionLife(session_id=session_id, last_turn_at=trio.current_time())
            self._lives[session_id] = life
            await self._nursery.start(self._live, life, name=f"session life {session_id}")
        else:
            await life.started.wait()  # another caller is starting it
        return life

    async def _live(self, life: SessionLife, *, task_status: trio.TaskStatus[None]) -> None:
        """The life's task: hold its resources until it ends, then close them (each bounded)."""
        # Started from a tool call: its log context (turn, call) is not the life's.
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(session_id=life.session_id)
        try:
            async with trio.open_nursery() as nursery:
                life.nursery = nursery
                life.started.set()
                task_status.started()
                await self._until_ended(life)
                life.ending.set()  # each holder closes its resource and returns, within its bound
                for entry in life.kept.values():
                    entry.scope.deadline = trio.current_time() + CLOSE_SECONDS
        finally:
            for provider in life.providers:
                self._tools.withdraw(provider, session_id=life.session_id)
            if self._lives.get(life.session_id) is life:
                del self._lives[life.session_id]
            life.done.set()
            log.info("session_life_ended", session_id=life.session_id, kept=len(life.kept))

    async def _until_ended(self, life: SessionLife) -> None:
        """Return once the life is ended, or idle: no turn of the session for ``idle_seconds``."""
        while True:
            with trio.move_on_at(life.last_turn_at + self._idle_seconds):
                await life.ending.wait()
                return
            if self._busy(life.session_id):
                life.last_turn_at = trio.current_time()
            elif trio.current_time() >= life.last_turn_at + self._idle_seconds:
                return

    async def _hold(self, life: SessionLife, key: str, entry: _Kept, opener: Opener) -> None:
        """Open the resource, hand it over, and hold it until the life ends; a failure to open is
        handed to the callers instead, and forgotten (the next ``keep`` opens it again)."""
        with entry.scope:
            try:
                async with opener() as value:
                    entry.value = value
                    entry.ready.set()
                    await life.ending.wait()
            except Exception as exc:
                if entry.ready.is_set():
                    log.warning(
                        "session_resource_close_failed", session_id=life.session_id, key=key, exc_info=exc
                    )
                else:
                    entry.error = exc
                    del life.kept[key]
            finally:
                if not entry.ready.is_set():
                    entry.error = entry.error or SessionEnded(f"the life of {life.session_id} ended")
                    entry.ready.set()
        if entry.scope.cancelled_caught:
            log.warning("session_resource_close_timed_out", session_id=life.session_id, key=key)
