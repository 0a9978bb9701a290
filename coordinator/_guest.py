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

    def start(self, opened: asyncio.Future[Coordinator], options: dict[str, Any]) -> None:
        trio.lowlevel.start_guest_run(
            self._main,
            opened,
            options,
            run_sync_soon_threadsafe=self._loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=self._loop.call_soon,
            done_callback=self._finished,
            host_uses_signal_set_wakeup_fd=True,
        )

    def _finished(self, result: outcome.Outcome[None]) -> None:
        if not self.done.done():
            self.done.set_result(result)

    async def _main(self, opened: asyncio.Future[Coordinator], options: dict[str, Any]) -> None:
        """Open the coordinator, serve the host's calls until it leaves the block, shut down."""
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
    """``coord.subscribe(...)`` for asyncio: the trio subscription runs in a task of the coordinator,
    and each round trip to it hands over every event that arrived meanwhile (up to ``EVENT_BATCH``).

    ``aclose()`` ends it; so does dropping it (its finalizer cancels the trio task).
    """

    def __init__(self, guest: Guest, open_trio: Callable[[], AsyncIterator[Event]]) -> None:
        self._guest = guest
        self._open_trio = open_trio
        self._pending: deque[Event] = deque()
        self._receive: trio.MemoryReceiveChannel[Event] | None = None
        self._scope = trio.CancelScope()
        self._failure: list[Exception] = []
        self._ended = False
        weakref.finalize(self, guest.cancel_soon, self._scope)

    def __aiter__(self) -> AioSubscription:
        return self

    async def __anext__(self) -> Event:
        if not self._pending:
            if self._ended:
                raise StopAsyncIteration
            if self._receive is None:
                self._receive = await self._guest.call(self._start)
            batch = await self._guest.call(_receive_batch, self._receive)
            if not batch:
                self._ended = True
                if self._failure:
                    raise self._failure[0]
                raise StopAsyncIteration
            self._pending.extend(batch)
        return self._pending.popleft()

    async def aclose(self) -> None:
        """End the subscription; events not yet read are dropped."""
        self._ended = True
        self._pending.clear()
        self._guest.cancel_soon(self._scope)

    async def _start(self) -> trio.MemoryReceiveChannel[Event]:
        """Start the trio side (in trio): a task that feeds a channel from the subscription."""
        send, receive = trio.open_memory_channel[Event](EVENT_BATCH)
        self._guest.start_soon(functools.partial(self._pump, send))
        await trio.lowlevel.checkpoint()
        return receive

    async def _pump(self, send: trio.MemorySendChannel[Event]) -> None:
        with self._scope, send:
            try:
                async for event in self._open_trio():
                    await send.send(event)
            except Exception as exc:
                # The reader raises it once it has read what came before (``SessionNotFound`` at once).
                self._failure.append(exc)


async def _receive_batch(receive: trio.MemoryReceiveChannel[Event]) -> list[Event]:
    """The next event and every one already waiting behind it; empty once the channel ended."""
    try:
        batch = [await receive.receive()]
    except trio.EndOfChannel:
        return []
    while len(batch) < EVENT_BATCH:
        try:
            batch.append(receive.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            break
    return batch
