"""The trio run inside an asyncio host's loop (guest mode), and what crosses between the two: calls
and subscriptions. ``coordinator/aio.py`` is the public side; ``design/asyncio.md`` the why.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import outcome
import trio

from coordinator import errors
from coordinator._coordinator import Coordinator
from coordinator._open import open_coordinator as open_trio_coordinator
from coordinator.events import Event
from coordinator.timeslice import TimeSlice, share_host_loop

P = ParamSpec("P")
T = TypeVar("T")

EVENT_BATCH = 256
"""Events a subscription hands over to the asyncio side in one round trip, at most."""


class Guest:
    """The trio run inside the host's loop: where the coordinator lives, and the calls it serves.

    Owned by ``open_coordinator``; every method is called in the host loop's thread.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._token: trio.lowlevel.TrioToken | None = None
        self._calls: trio.Nursery | None = None
        self._leave = trio.Event()  # set in trio: the block was left
        self.done: asyncio.Future[outcome.Outcome[None]] = loop.create_future()
        self._slice = TimeSlice()
        self._driving = False
        self._next_ticks: deque[Callable[[], object]] = deque()

    def start(self, opened: asyncio.Future[Coordinator], options: dict[str, Any]) -> None:
        trio.lowlevel.start_guest_run(
            self._main,
            opened,
            options,
            run_sync_soon_threadsafe=self._tick_from_thread,
            run_sync_soon_not_threadsafe=self._tick_soon,
            done_callback=self._finished,
            host_uses_signal_set_wakeup_fd=True,
        )

    def _tick_from_thread(self, tick: Callable[[], object]) -> None:
        self._loop.call_soon_threadsafe(self._drive, tick)

    def _tick_soon(self, tick: Callable[[], object]) -> None:
        if self._driving:
            self._next_ticks.append(tick)
        else:
            self._loop.call_soon(self._drive, tick)

    def _drive(self, tick: Callable[[], object]) -> None:
        """One slice of the host loop's time: trio's rounds one after another until it is used up
        (or trio waits for I/O), then the host loop runs (``coordinator/timeslice.py``).

        Each round would otherwise be one iteration of the host loop, with its own poll for I/O."""
        self._slice.start()
        self._driving = True
        try:
            tick()
            while self._next_ticks and not self._slice.used_up():
                self._next_ticks.popleft()()
        finally:
            self._driving = False
            while self._next_ticks:
                self._loop.call_soon(self._drive, self._next_ticks.popleft())

    def _finished(self, result: outcome.Outcome[None]) -> None:
        if not self.done.done():
            self.done.set_result(result)

    async def _main(self, opened: asyncio.Future[Coordinator], options: dict[str, Any]) -> None:
        """Open the coordinator, serve the host's calls until it leaves the block, shut down."""
        share_host_loop(self._slice)
        async with trio.open_nursery() as calls:
            try:
                async with open_trio_coordinator(**options) as coord:
                    self._calls = calls
                    self._token = trio.lowlevel.current_trio_token()
                    _settle(opened, outcome.Value(coord))
                    await self._leave.wait()
            except BaseException as exc:
                _settle(opened, outcome.Error(exc if isinstance(exc, Exception) else _closed()))
                raise
            finally:
                # The coordinator is shut down: a call still running has nothing to run against.
                calls.cancel_scope.cancel(reason="the coordinator shut down")

    def leave(self) -> None:
        """Ask for the graceful shutdown (from the host's loop); ``done`` resolves once it is over."""
        if self._token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._leave.set)

    async def call(self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` as a trio task under the coordinator and return its result.

        **Cancellation:** cancelling the awaiting asyncio task cancels the trio task.
        **Raises:** what ``fn`` raised; ``CoordinatorClosed`` once the coordinator has shut down.
        """
        if self._token is None or self._leave.is_set():
            raise _closed()
        result: asyncio.Future[T] = self._loop.create_future()
        scope = trio.CancelScope()
        try:
            self._token.run_sync_soon(self._spawn, functools.partial(fn, *args, **kwargs), result, scope)
        except trio.RunFinishedError:
            raise _closed() from None
        try:
            return await result
        except asyncio.CancelledError:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(scope.cancel)
            raise

    def _spawn(
        self, thunk: Callable[[], Awaitable[T]], result: asyncio.Future[T], scope: trio.CancelScope
    ) -> None:
        if self._calls is None or self._calls.cancel_scope.cancel_called:
            _settle(result, outcome.Error(_closed()))
            return
        self._calls.start_soon(self._serve, thunk, result, scope)

    async def _serve(
        self, thunk: Callable[[], Awaitable[T]], result: asyncio.Future[T], scope: trio.CancelScope
    ) -> None:
        try:
            with scope:
                value = await thunk()
        except Exception as exc:
            _settle(result, outcome.Error(exc))
            return
        except BaseException:
            # Cancelled by the coordinator's shutdown (never swallowed): the caller learns it closed.
            _settle(result, outcome.Error(_closed()))
            raise
        if scope.cancelled_caught:
            _settle(result, outcome.Error(_closed()))  # the caller was cancelled first
        else:
            _settle(result, outcome.Value(value))

    def cancel_soon(self, scope: trio.CancelScope) -> None:
        """Cancel ``scope`` in trio, from any thread (a finalizer's included); nothing once it ended."""
        if self._token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(scope.cancel)

    def run_soon(self, fn: Callable[[], object]) -> None:
        """Call ``fn`` in trio soon (from the host's loop); nothing once the run ended."""
        if self._token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(fn)

    def start_soon(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Start ``fn`` as a trio task under the coordinator (called in trio)."""
        assert self._calls is not None
        self._calls.start_soon(fn)


def _closed() -> errors.CoordinatorClosed:
    return errors.CoordinatorClosed("the coordinator has shut down")


def _settle(future: asyncio.Future[Any], result: outcome.Outcome[Any]) -> None:
    """Resolve ``future`` with ``result`` unless its awaiting task gave up on it (cancelled)."""
    if future.done():
        return
    if isinstance(result, outcome.Error):
        future.set_exception(result.error)
    elif isinstance(result, outcome.Value):
        future.set_result(result.value)


class AioSubscription:
    """``coord.subscribe(...)`` for asyncio: the trio subscription runs in a task of the coordinator
    that hands each event straight to this side (same thread, no round trip), up to ``EVENT_BATCH``
    unread; beyond that it stops reading until this side catches up, and the trio subscription falls
    back on the store as for any slow reader.

    ``aclose()`` ends it; so does dropping it (its finalizer cancels the trio task).
    """

    def __init__(self, guest: Guest, open_trio: Callable[[], AsyncIterator[Event]]) -> None:
        self._guest = guest
        self._open_trio = open_trio
        self._feed = _Feed()
        self._started = False
        weakref.finalize(self, guest.cancel_soon, self._feed.scope)

    def __aiter__(self) -> AioSubscription:
        return self

    async def __anext__(self) -> Event:
        feed = self._feed
        if not self._started:
            self._started = True
            await self._guest.call(self._start)
        while not feed.pending:
            if feed.ended:
                if feed.failure:
                    raise feed.failure[0]
                raise StopAsyncIteration
            feed.waiter = self._guest._loop.create_future()
            try:
                await feed.waiter
            finally:
                feed.waiter = None
        event = feed.pending.popleft()
        if feed.room is not None and len(feed.pending) < EVENT_BATCH // 2:
            room, feed.room = feed.room, None
            self._guest.run_soon(room.set)
        return event

    async def aclose(self) -> None:
        """End the subscription; events not yet read are dropped."""
        self._feed.ended = True
        self._feed.pending.clear()
        self._guest.cancel_soon(self._feed.scope)

    async def _start(self) -> None:
        """Start the trio side (in trio)."""
        if not self._feed.ended:
            self._guest.start_soon(functools.partial(_pump, self._feed, self._open_trio))
        await trio.lowlevel.checkpoint()


class _Feed:
    """What the pump (trio) and the reader (asyncio) of one subscription share. Both run in the host
    loop's thread, never at once, so no lock; the pump holds this and not the ``AioSubscription``, so
    dropping the subscription lets its finalizer run."""

    def __init__(self) -> None:
        self.pending: deque[Event] = deque()
        self.waiter: asyncio.Future[None] | None = None  # the reader waits for an event
        self.room: trio.Event | None = None  # the pump waits for the reader to catch up
        self.scope = trio.CancelScope()
        self.failure: list[Exception] = []
        self.ended = False

    def wake_reader(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


async def _pump(feed: _Feed, open_trio: Callable[[], AsyncIterator[Event]]) -> None:
    with feed.scope:
        try:
            async for event in open_trio():
                feed.pending.append(event)
                feed.wake_reader()
                if len(feed.pending) >= EVENT_BATCH:
                    feed.room = trio.Event()
                    await feed.room.wait()
        except Exception as exc:
            # The reader raises it once it has read what came before (``SessionNotFound`` at once).
            feed.failure.append(exc)
        finally:
            feed.ended = True
            feed.wake_reader()
