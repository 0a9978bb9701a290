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
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from coordinator._coordinator import Coordinator
from coordinator._guest import AioSubscription, Guest
from coordinator.config import Config
from coordinator.mcp.state import ServerState
from coordinator.metrics import Metrics
from coordinator.records import Form, Message, Node, PermissionRequest, QueuedTurn, Session, Steered

__all__ = ["AioCoordinator", "AioSubscription", "open_coordinator"]


class AioCoordinator:
    """The coordinator's methods, records and named errors, as asyncio coroutines.

    Each method does what ``coordinator.Coordinator``'s of the same name does (its docstring says
    what), run as a trio task under the coordinator; cancelling the calling asyncio task cancels it.
    After the shutdown, a call raises ``CoordinatorClosed``.
    """

    def __init__(self, guest: Guest, coordinator: Coordinator) -> None:
        self._guest = guest
        self._coordinator = coordinator

    @property
    def config(self) -> Config:
        return self._coordinator.config

    @property
    def instance_id(self) -> str:
        return self._coordinator.instance_id

    @property
    def metrics(self) -> Metrics:
        return self._coordinator.metrics

    @property
    def published_seq(self) -> int:
        return self._coordinator.published_seq

    @property
    def metrics_registry(self) -> Any:
        return self._coordinator.metrics_registry

    def metrics_text(self) -> str:
        return self._coordinator.metrics_text()

    async def create_session(self, title: str = "", *, owner: str | None = None) -> Session:
        return await self._guest.call(functools.partial(self._coordinator.create_session, owner=owner), title)

    async def nodes(self) -> list[Node]:
        return await self._guest.call(self._coordinator.nodes)

    async def list_sessions(self) -> list[Session]:
        return await self._guest.call(self._coordinator.list_sessions)

    def mcp_servers(self) -> list[ServerState]:
        return self._coordinator.mcp_servers()

    async def list_sessions_page(
        self, *, limit: int, before: str | None = None, owner: str | None = None
    ) -> tuple[list[Session], bool]:
        call = functools.partial(
            self._coordinator.list_sessions_page, limit=limit, before=before, owner=owner
        )
        return await self._guest.call(call)

    async def get_session(self, session_id: str) -> Session:
        return await self._guest.call(self._coordinator.get_session, session_id)

    async def history(self, session_id: str) -> list[Message]:
        return await self._guest.call(self._coordinator.history, session_id)

    async def prompt(
        self,
        session_id: str,
        text: str,
        *,
        mode: str = "queue",
        expected_turn_id: str | None = None,
        principal: str | None = None,
    ) -> str:
        call = functools.partial(
            self._coordinator.prompt, mode=mode, expected_turn_id=expected_turn_id, principal=principal
        )
        return await self._guest.call(call, session_id, text)

    async def steer(
        self, session_id: str, text: str, *, expected_turn_id: str | None = None, principal: str | None = None
    ) -> Steered:
        call = functools.partial(
            self._coordinator.steer, expected_turn_id=expected_turn_id, principal=principal
        )
        return await self._guest.call(call, session_id, text)

    async def queued_turns(self, session_id: str) -> list[QueuedTurn]:
        return await self._guest.call(self._coordinator.queued_turns, session_id)

    async def cancel_turn(self, session_id: str, turn_id: str) -> None:
        await self._guest.call(self._coordinator.cancel_turn, session_id, turn_id)

    async def delete_session(self, session_id: str) -> None:
        await self._guest.call(self._coordinator.delete_session, session_id)

    async def interrupt(
        self,
        session_id: str,
        *,
        by: str = "embedder",
        when: str = "now",
        queued: str = "keep",
        principal: str | None = None,
    ) -> bool:
        call = functools.partial(
            self._coordinator.interrupt, by=by, when=when, queued=queued, principal=principal
        )
        return await self._guest.call(call, session_id)

    async def resume(self, session_id: str) -> str:
        return await self._guest.call(self._coordinator.resume, session_id)

    async def pending_permissions(self, session_id: str | None = None) -> list[PermissionRequest]:
        return await self._guest.call(self._coordinator.pending_permissions, session_id)

    async def reply_permission(
        self,
        session_id: str,
        request_id: str,
        decision: str,
        message: str | None = None,
        *,
        input: Any = None,
        principal: str | None = None,
    ) -> PermissionRequest:
        call = functools.partial(self._coordinator.reply_permission, input=input, principal=principal)
        return await self._guest.call(call, session_id, request_id, decision, message)

    async def pending_forms(self, session_id: str) -> list[Form]:
        return await self._guest.call(self._coordinator.pending_forms, session_id)

    async def submit_form(
        self, session_id: str, form_id: str, answers: Mapping[str, Any], *, principal: str | None = None
    ) -> Form:
        call = functools.partial(self._coordinator.submit_form, principal=principal)
        return await self._guest.call(call, session_id, form_id, answers)

    async def dismiss_form(
        self, session_id: str, form_id: str, message: str | None = None, *, principal: str | None = None
    ) -> Form:
        call = functools.partial(self._coordinator.dismiss_form, principal=principal)
        return await self._guest.call(call, session_id, form_id, message)

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
    guest = Guest(loop)
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


async def _shut_down(guest: Guest, *, raise_failure: bool) -> None:
    """Wait for the trio run to end (the graceful shutdown, bounded by ``shutdown_grace``), through
    further cancellations of the waiting task, which are re-raised once it is over."""
    cancelled = False
    while not guest.done.done():
        try:
            await asyncio.shield(guest.done)
        except asyncio.CancelledError:  # noqa: ASYNC103 (re-raised below, once the shutdown is over)
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
