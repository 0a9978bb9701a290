"""The coordinator for asyncio programs (FastAPI, Starlette, any ``asyncio.run``).

::

    from coordinator.aio import open_coordinator

    async with open_coordinator(config="coordinator.toml", db="var/app.sqlite") as coord:
        session = await coord.create_session(title="x")
        await coord.prompt(session.id, "hello")
        async for event in coord.subscribe(after=0, session_id=session.id):
            ...

The coordinator runs on trio inside the host's own event loop, in the same thread (trio's guest mode):
trio's scheduler runs in the loop's callbacks, and its waits for I/O in a helper thread. Every method
of ``AioCoordinator`` is an asyncio coroutine callable from any task of the host's loop; each runs as a
trio task under the coordinator, and cancelling the asyncio caller cancels it.

Leaving the block, an exception inside it, cancelling the task that holds it, and SIGTERM or SIGINT
are each a graceful shutdown: running turns are suspended (reason ``shutdown``) and resumed at the next
start. SIGTERM is turned into a cancellation of the holding task only while the host has no handler of
its own for it (uvicorn has one, and leaves the block itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import outcome
import trio

from coordinator import errors
from coordinator._coordinator import Coordinator
from coordinator._open import open_coordinator as open_trio_coordinator
from coordinator.config import Config
from coordinator.events import Event
from coordinator.records import Form, Message, Node, PermissionRequest, Session

P = ParamSpec("P")
T = TypeVar("T")

EVENT_BATCH = 256
"""Events a subscription hands over to the asyncio side in one round trip, at most."""


class _Guest:
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

    def __init__(self, guest: _Guest, open_trio: Callable[[], AsyncIterator[Event]]) -> None:
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


class AioCoordinator:
    """The coordinator's methods, records and named errors, as asyncio coroutines.

    Each method does what ``coordinator.Coordinator``'s of the same name does (its docstring says
    what), run as a trio task under the coordinator; cancelling the calling asyncio task cancels it.
    After the shutdown, a call raises ``CoordinatorClosed``.
    """

    def __init__(self, guest: _Guest, coordinator: Coordinator) -> None:
        self._guest = guest
        self._coordinator = coordinator

    @property
    def config(self) -> Config:
        return self._coordinator.config

    @property
    def instance_id(self) -> str:
        return self._coordinator.instance_id

    @property
    def published_seq(self) -> int:
        return self._coordinator.published_seq

    @property
    def metrics_registry(self) -> Any:
        return self._coordinator.metrics_registry

    def metrics_text(self) -> str:
        return self._coordinator.metrics_text()

    async def create_session(self, title: str = "") -> Session:
        return await self._guest.call(self._coordinator.create_session, title)

    async def nodes(self) -> list[Node]:
        return await self._guest.call(self._coordinator.nodes)

    async def list_sessions(self) -> list[Session]:
        return await self._guest.call(self._coordinator.list_sessions)

    async def list_sessions_page(
        self, *, limit: int, before: str | None = None
    ) -> tuple[list[Session], bool]:
        return await self._guest.call(self._coordinator.list_sessions_page, limit=limit, before=before)

    async def get_session(self, session_id: str) -> Session:
        return await self._guest.call(self._coordinator.get_session, session_id)

    async def history(self, session_id: str) -> list[Message]:
        return await self._guest.call(self._coordinator.history, session_id)

    async def prompt(self, session_id: str, text: str) -> str:
        return await self._guest.call(self._coordinator.prompt, session_id, text)

    async def delete_session(self, session_id: str) -> None:
        await self._guest.call(self._coordinator.delete_session, session_id)

    async def interrupt(self, session_id: str, *, by: str = "embedder") -> bool:
        return await self._guest.call(self._coordinator.interrupt, session_id, by=by)

    async def resume(self, session_id: str) -> str:
        return await self._guest.call(self._coordinator.resume, session_id)

    async def pending_permissions(self, session_id: str | None = None) -> list[PermissionRequest]:
        return await self._guest.call(self._coordinator.pending_permissions, session_id)

    async def reply_permission(
        self, session_id: str, request_id: str, decision: str, message: str | None = None
    ) -> PermissionRequest:
        return await self._guest.call(
            self._coordinator.reply_permission, session_id, request_id, decision, message
        )

    async def pending_forms(self, session_id: str) -> list[Form]:
        return await self._guest.call(self._coordinator.pending_forms, session_id)

    async def submit_form(self, session_id: str, form_id: str, answers: Mapping[str, str]) -> Form:
        return await self._guest.call(self._coordinator.submit_form, session_id, form_id, answers)

    async def dismiss_form(self, session_id: str, form_id: str, message: str | None = None) -> Form:
        return await self._guest.call(self._coordinator.dismiss_form, session_id, form_id, message)

    async def prune_events(self) -> int:
        return await self._guest.call(self._coordinator.prune_events)

    def subscribe(
        self,
        *,
        after: int = 0,
        session_id: str | None = None,
        deltas: bool = False,
        descendants: bool = False,
    ) -> AioSubscription:
        """Every event after seq ``after``, replayed, then live until shutdown: ``async for``."""
        opened = functools.partial(
            self._coordinator.subscribe,
            after=after,
            session_id=session_id,
            deltas=deltas,
            descendants=descendants,
        )
        return AioSubscription(self._guest, opened)

    async def shutdown(self) -> None:
        """Suspend every running turn with reason shutdown; leaving the block does it too."""
        await self._guest.call(self._coordinator.shutdown)


@contextlib.asynccontextmanager
async def open_coordinator(
    config: str | Path | Config | None = None,
    *,
    db: str | None = None,
    model: Any = None,
    synchronous: str = "full",
    workdir: str | Path | None = None,
    tracer_provider: Any = None,
    **overrides: Any,
) -> AsyncIterator[AioCoordinator]:
    """Open the coordinator on the running asyncio loop, resume what a previous process left, and
    yield it. The arguments are ``coordinator.open_coordinator``'s.

    Leaving the block, an exception in it (re-raised after), cancelling the task that holds it, and
    SIGTERM (when the host has no handler of its own) are a graceful shutdown: running turns are
    suspended with reason ``shutdown``, and the next start resumes them once.

    **Raises:** ``ConfigError``, ``StoreError`` as ``coordinator.open_coordinator``.
    """
    loop = asyncio.get_running_loop()
    guest = _Guest(loop)
    opened: asyncio.Future[Coordinator] = loop.create_future()
    options = dict(
        config=config,
        db=db,
        model=model,
        synchronous=synchronous,
        workdir=workdir,
        tracer_provider=tracer_provider,
        **overrides,
    )
    guest.start(opened, options)
    try:
        coordinator = await opened
    except BaseException:
        guest.leave()
        # asyncio's cancellation is delivered once, and _shut_down shields its wait: this await ends.
        await _shut_down(guest, raise_failure=False)
        raise
    task = asyncio.current_task()
    with _sigterm_cancels(loop, task):
        try:
            yield AioCoordinator(guest, coordinator)
        except BaseException:
            guest.leave()
            await _shut_down(guest, raise_failure=False)
            raise
        guest.leave()
        await _shut_down(guest, raise_failure=True)


async def _shut_down(guest: _Guest, *, raise_failure: bool) -> None:
    """Wait for the trio run to end (the graceful shutdown, bounded by ``shutdown_grace``), through
    further cancellations of the waiting task, which are re-raised once it is over."""
    cancelled = False
    while not guest.done.done():
        try:
            await asyncio.shield(guest.done)
        except asyncio.CancelledError:
            cancelled = True
    result = guest.done.result()
    if raise_failure:
        result.unwrap()
    if cancelled:
        raise asyncio.CancelledError()


@contextlib.contextmanager
def _sigterm_cancels(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any] | None) -> Any:
    """While the block runs, SIGTERM cancels ``task`` (a graceful shutdown), unless the host handles
    SIGTERM itself or this is not the main thread."""
    if task is None or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    try:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
