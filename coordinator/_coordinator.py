"""The embedding API: ``open_coordinator`` and the ``Coordinator`` it yields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio
from prometheus_client import CollectorRegistry

from coordinator import claims, decisions, errors, prompts, retention
from coordinator.actors.context import Runtime
from coordinator.bus import Subscription
from coordinator.config import Config
from coordinator.logs import get_logger
from coordinator.mcp.state import ServerState
from coordinator.metrics import Metrics
from coordinator.records import Form, Message, Node, PermissionRequest, QueuedTurn, Session, Steered
from coordinator.registry import Registry
from coordinator.store import Reader, Store

if TYPE_CHECKING:
    pass

log = get_logger(__name__)


class Coordinator:
    """Runs sessions. Obtain one with ``open_coordinator``; every method is safe to call concurrently."""

    def __init__(self, runtime: Runtime, registry: Registry) -> None:
        self._runtime = runtime
        self._registry = registry

    @property
    def config(self) -> Config:
        return self._runtime.config

    @property
    def instance_id(self) -> str:
        return self._runtime.instance_id

    @property
    def store(self) -> Store:
        """The store, for tools and tests that read state; writes go through the methods below."""
        return self._runtime.store

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """This coordinator's own Prometheus registry, its ``coordinator_*`` series only
        (``design/operations.md``): an embedder registers it in the registry its exposition serves."""
        return self._runtime.metrics.registry

    @property
    def metrics(self) -> Metrics:
        """This coordinator's series, for the server that counts its requests in them."""
        return self._runtime.metrics

    def mcp_servers(self) -> list[ServerState]:
        """The ``[[mcp]]`` servers: each one's status (``connecting``, ``ready``, ``failed``), the
        protocol revision it speaks, its tools as the model sees them, and why it failed."""
        return [] if self._runtime.mcp is None else self._runtime.mcp.states()

    def metrics_text(self) -> str:
        """This coordinator's series and the process's (``process_*``) in the Prometheus text format,
        as ``GET /metrics`` serves them (``coordinator.metrics.CONTENT_TYPE``)."""
        return self._runtime.metrics.text()

    @property
    def published_seq(self) -> int:
        """The seq of the last event published to subscribers: every event up to it is durable."""
        return self._runtime.bus.published_seq

    def _check_open(self) -> None:
        if self._runtime.closing:
            raise errors.CoordinatorClosed(message="the coordinator is shutting down")

    async def _session(self, session_id: str) -> Session:
        found = await self._runtime.store.read(lambda reader: reader.get_session(session_id))
        if found is None:
            raise errors.SessionNotFound(message=f"no session {session_id!r}", session_id=session_id)
        return found

    async def _check_session(self, session_id: str) -> None:
        """``_session``'s check alone: a read by key, not of the session with its owner and claim."""
        if not await self._runtime.store.read(lambda reader: reader.session_exists(session_id)):
            raise errors.SessionNotFound(message=f"no session {session_id!r}", session_id=session_id)

    async def _durable(self) -> None:
        # Every answer of this API shows or confirms committed state: it waits until that state is
        # durable (with synchronous=full, until it would survive a power loss). See store/_durability.py.
        await self._runtime.store.durable()

    async def _durable_to_read(self) -> None:
        # A read waits as an answer does. While the store is crashed (a sync failed and its log is not
        # durable again yet) reads are answered anyway: they may show writes whose callers were told
        # they may be kept or lost, which the store's recovery keeps (or the coordinator stops).
        try:
            await self._runtime.store.durable()
        except errors.StoreNotDurable:
            pass

    async def create_session(self, title: str = "", *, owner: str | None = None) -> Session:
        """Create an idle session and publish ``session.created``.

        ``owner``: the principal (``[[principal]]``) it belongs to: over HTTP only that principal (and
        an admin) sees it. The embedding program is trusted: it sees every session.
        """
        self._check_open()
        session = await decisions.create_session(self._runtime, title, owner)
        await self._durable()
        return session

    async def nodes(self) -> list[Node]:
        """The live nodes sharing this coordinator's store (this one among them), oldest first: each
        node's id, host, start, last heartbeat and how many sessions it runs."""
        lease = self._runtime.config.server.lease
        return await self._runtime.store.read(lambda reader: reader.live_nodes(lease))

    async def list_sessions(self) -> list[Session]:
        await self._durable_to_read()
        return await self._runtime.store.read(lambda reader: reader.list_sessions())

    async def list_sessions_page(
        self, *, limit: int, before: str | None = None, owner: str | None = None
    ) -> tuple[list[Session], bool]:
        """Up to ``limit`` sessions, newest first, created before the session ``before`` (when given),
        of the principal ``owner`` only (when given); and whether older ones remain.

        **Raises:** ``SessionNotFound`` when ``before`` names no session (the cursor is a real id).
        """
        await self._durable_to_read()
        page = await self._runtime.store.read(lambda reader: reader.session_page(limit + 1, before, owner))
        if page is None:
            raise errors.SessionNotFound(
                message=f"query.before: no session {before!r}", session_id=str(before)
            )
        return page[:limit], len(page) > limit

    async def get_session(self, session_id: str) -> Session:
        """The session's status, claim and last outcome. **Raises:** ``SessionNotFound``."""
        await self._durable_to_read()
        return await self._session(session_id)

    async def history(self, session_id: str) -> list[Message]:
        """The session's messages with their parts. **Raises:** ``SessionNotFound``."""
        await self._durable_to_read()
        await self._check_session(session_id)
        return await self._runtime.store.read(lambda reader: reader.history(session_id))

    async def prompt(
        self,
        session_id: str,
        text: str,
        *,
        mode: str = "queue",
        expected_turn_id: str | None = None,
        principal: str | None = None,
    ) -> str:
        """Send a prompt; returns the id of the turn it is, or (``steer``) joins.

        ``mode``: ``queue`` (a new turn after any running or queued one), ``steer`` (see ``steer``:
        the running turn's id, or the queued turn the text became), or ``interrupt`` (the running
        turn stops with reason interrupt and this prompt runs next). ``expected_turn_id``: accept it
        only while that turn is the session's running turn.

        **Raises:** ``SessionNotFound``, ``InvalidRequest`` (empty text, unknown mode),
        ``TurnMismatch``, ``CoordinatorClosed``.
        """
        return (await self._send(session_id, text, mode, expected_turn_id, principal)).turn_id

    async def steer(
        self, session_id: str, text: str, *, expected_turn_id: str | None = None, principal: str | None = None
    ) -> Steered:
        """Send ``text`` into the running turn: it reaches the model at the turn's next step boundary
        (after the current step's tool calls settle, before the next model request) as a user message,
        with ``session.turn.steered``. When no turn runs, or the turn ends or stops before that
        boundary, the text becomes a queued turn (``session.turn.queued`` with ``from_steer``).

        Returns the steer's id and the turn it waits for (or became). Returns once it is durable.

        **Raises:** ``SessionNotFound``, ``InvalidRequest``, ``TurnMismatch`` (``expected_turn_id``
        is not the running turn: nothing is accepted), ``CoordinatorClosed``.
        """
        accepted = await self._send(session_id, text, "steer", expected_turn_id, principal)
        assert accepted.steer_id is not None
        return Steered(turn_id=accepted.turn_id, steer_id=accepted.steer_id)

    async def _send(
        self, session_id: str, text: str, mode: str, expected_turn_id: str | None, principal: str | None
    ) -> prompts.Accepted:
        self._check_open()
        # A scheduling point before the queueing: the chaos campaign replays a run by the order in which
        # sessions pass their checkpoints, and that order counts this one (design/chaos.md).
        await trio.lowlevel.checkpoint()
        accepted = await prompts.send(self._runtime, session_id, text, mode, expected_turn_id, principal)
        if accepted.stopped is not None:
            await self._registry.settle_decided_stop(session_id)  # a parked turn has no actor to stop
        self._registry.ensure_running(session_id, queued=accepted.next_turn)
        await self._durable()
        return accepted

    async def queued_turns(self, session_id: str) -> list[QueuedTurn]:
        """The session's queued turns, in the order they will run. **Raises:** ``SessionNotFound``."""
        await self._durable_to_read()
        await self._check_session(session_id)
        rows = await self._runtime.store.read(lambda reader: reader.queued_turns(session_id))
        return [QueuedTurn(turn_id=row.id, text=row.prompt, created_at=row.created_at) for row in rows]

    async def cancel_turn(self, session_id: str, turn_id: str) -> None:
        """Cancel a queued turn: it never runs (``session.turn.cancelled``). Returns once durable.

        **Raises:** ``SessionNotFound``, ``TurnNotFound``, ``TurnNotQueued`` (it started or ended:
        interrupt it instead).
        """
        await self._check_session(session_id)
        await prompts.cancel_queued(self._runtime, session_id, turn_id)
        await self._durable()

    async def delete_session(self, session_id: str) -> None:
        """Delete a session whose turns are all settled: its history, tool calls, permission requests,
        forms, rules and events, and its sub-agent sessions with theirs, in one transaction. Their
        events leave every replay (and every live buffer of this process); no seq is given again.

        Returns once the delete is durable. A prompt racing the delete either lands first (then the
        delete answers ``SessionBusy``) or finds no session.

        **Raises:** ``SessionNotFound``; ``SessionBusy`` while a turn of it or of a sub-agent is queued,
        running or suspended (nothing is changed: interrupt it, or wait for it to settle).
        """
        deleted = await decisions.delete_session(self._runtime, session_id)
        await self._durable()  # also: every event of the session committed before is handed over
        for each in deleted:
            self._runtime.bus.forget_session(each)
            self._runtime.conversations.forget(each)
            if self._runtime.lives is not None:
                await self._runtime.lives.end(each)  # what its tools kept for it closes now
            self._runtime.tools.forget_session(each)

    async def interrupt(
        self,
        session_id: str,
        *,
        by: str = "embedder",
        when: str = "now",
        queued: str = "keep",
        principal: str | None = None,
    ) -> bool:
        """Stop the running turn with reason interrupt. False when idle or already stopping.

        ``when="after_step"``: a soft stop. The running step and its tool calls finish (their waits
        stay open) and the turn stops before its next model request, with reason
        ``{type: "interrupt", by, soft: true}``; a plain interrupt afterwards stops it at once. A
        step that ends the turn (the model answered without tools) lets it succeed.
        ``queued="cancel"``: every queued turn of the session is cancelled too, each with
        ``session.turn.cancelled`` (and so are steers still waiting for the running turn).

        A turn parked by ``[server] resume = "manual"`` is stopped too: it settles as interrupted (its
        waits revoked) without running again. Returns once the stop is recorded, before cleanup ends.

        **Raises:** ``SessionNotFound``, ``InvalidRequest`` (an unknown ``when`` or ``queued``).
        """
        if when not in ("now", "after_step"):
            raise errors.InvalidRequest(message=f"when must be now or after_step, not {when!r}")
        if queued not in ("keep", "cancel"):
            raise errors.InvalidRequest(message=f"queued must be keep or cancel, not {queued!r}")
        # A scheduling point, as a read of the session was here: the chaos campaign's recorded runs
        # replay by the order of checkpoints across sessions (design/chaos.md). The session is
        # checked in the decision's transaction.
        await trio.lowlevel.checkpoint()
        stopped = await decisions.interrupt(
            self._runtime,
            session_id,
            by,
            soft=when == "after_step",
            cancel_queued=queued == "cancel",
            principal=principal,
        )
        if stopped:
            await self._registry.settle_decided_stop(session_id)  # a parked turn has no actor to stop
        await self._durable()
        return stopped

    async def resume(self, session_id: str) -> str:
        """Resume the session's suspended turn that a start with ``[server] resume = "manual"`` parked;
        returns its id. The turn then runs as an automatic resume would (``session.execution.resumed``,
        its waits restored with their ids), and the resume counts toward ``[server] max_resumes``.

        Returns once the resume is committed, before the turn runs again.

        **Raises:** ``SessionNotFound``; ``NothingToResume`` when no turn of the session is parked (it
        is idle or running, or was resumed already); ``CoordinatorClosed`` during a shutdown.
        """
        self._check_open()
        await self._check_session(session_id)
        turn_id = await self._registry.resume(session_id)
        await self._durable()
        return turn_id

    async def pending_permissions(self, session_id: str | None = None) -> list[PermissionRequest]:
        """Every pending request, or the session's and its sub-agents' (each with its own session_id)."""
        await self._durable_to_read()
        if session_id is None:
            return await self._runtime.store.read(lambda reader: reader.pending_permissions())
        await self._check_session(session_id)
        return await self._runtime.store.read(
            lambda reader: reader.pending_permissions(
                session_ids=[session_id, *reader.descendants(session_id)]
            )
        )

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
        """Answer a permission request: ``once``, ``always`` or ``reject``; ``principal``: who (the
        event's ``by``), when the server has principals.

        ``input`` (with ``once`` or ``always``): the call runs with this input instead of the model's.
        It must fit the tool's input schema (``InvalidInput`` otherwise); ``permission.replied``
        carries it, and the model's next request shows its call as asked, and the result with a note
        that the user changed the input to this one.

        **Raises:** ``PermissionNotFound``, ``PermissionAlreadySettled`` (with its settlement),
        ``InvalidRequest`` (an unknown decision), ``InvalidInput``, ``CoordinatorClosed`` during a shutdown (the request
        is kept and restored with its id by the next start, where the reply is taken).
        """
        self._check_open()  # a shutdown keeps waits as they are; they are answered after the restart
        await self._check_session(session_id)
        replied = await decisions.reply_permission(
            self._runtime, session_id, request_id, decision, message, input, principal
        )
        if decision == "reject" and not message:
            await self._registry.settle_decided_stop(session_id)  # declined while parked: no actor runs it
        await self._durable()
        return replied

    async def pending_forms(self, session_id: str) -> list[Form]:
        await self._durable_to_read()
        await self._check_session(session_id)
        return await self._runtime.store.read(
            lambda reader: reader.pending_forms(session_ids=[session_id, *reader.descendants(session_id)])
        )

    async def submit_form(
        self, session_id: str, form_id: str, answers: Mapping[str, Any], *, principal: str | None = None
    ) -> Form:
        """Answer a question form. **Raises:** ``FormNotFound``, ``FormAlreadySettled``, ``InvalidRequest``."""
        self._check_open()  # a shutdown keeps waits as they are; they are answered after the restart
        await self._check_session(session_id)
        form = await decisions.submit_form(self._runtime, session_id, form_id, dict(answers), principal)
        await self._durable()
        return form

    async def dismiss_form(
        self, session_id: str, form_id: str, message: str | None = None, *, principal: str | None = None
    ) -> Form:
        """Dismiss a form: a declined stop, or, with a ``message``, feedback and the turn goes on."""
        self._check_open()  # a shutdown keeps waits as they are; they are answered after the restart
        await self._check_session(session_id)
        form = await decisions.dismiss_form(self._runtime, session_id, form_id, message, principal)
        if not message:
            await self._registry.settle_decided_stop(session_id)  # declined while parked: no actor runs it
        await self._durable()
        return form

    async def prune_events(self) -> int:
        """Run one retention pass now (``[store] keep_events_days``; the background task runs one every
        so often anyway): delete the events of settled turns older than that; returns how many.

        Returns 0 at once when ``keep_events_days`` is 0 (keep all).

        **Cancellation:** between its small transactions; what was deleted stays deleted.

        **Raises:** ``StoreError``.
        """
        return await retention.prune(self._runtime.store, self._runtime.config.store.keep_events_days)

    def subscribe(
        self,
        *,
        after: int = 0,
        session_id: str | None = None,
        deltas: bool = False,
        descendants: bool = False,
    ) -> Subscription:
        """Every event after seq ``after``, replayed from the store, then live until shutdown.

        Use it as ``async for event in coord.subscribe(after=seq)``; a lagging subscriber falls back to
        the store and never loses an event. With ``deltas=True`` the live part also carries the
        model's text as it streams (``session.text.delta``, an ``Event`` whose ``seq`` is None): first,
        for each step streaming when the replay ends, one delta at offset 0 with its text so far. A
        lagging subscriber may lose deltas (their offsets show it), never a stored event. With
        ``descendants=True`` (and a ``session_id``) the events of the session's sub-agent sessions, at
        every depth, come too.

        When retention deleted events after ``after`` (``[store] keep_events_days``), the replay begins
        with a ``stream.truncated`` event (``seq`` None, payload ``{"oldest_seq": N}``: the oldest kept
        event after ``after``). A subscription of one session ends when that session is deleted.

        **Raises:** ``SessionNotFound``, at the first ``__anext__``, when ``session_id`` names no session.
        """
        return self._runtime.bus.subscribe(
            after=after,
            session_id=session_id,
            deltas=deltas,
            descendants=descendants and session_id is not None,
            must_exist=True,
        )

    async def _last_sync(self) -> None:
        with trio.move_on_after(CLOSE_SYNC_SECONDS, shield=True):
            try:
                await self._runtime.store.durable()
            except errors.StoreError as exc:  # raised by the durability task too; the bus closes anyway
                log.error("last_sync_failed", exc_info=exc)

    async def shutdown(self) -> None:
        """Suspend every running turn with reason shutdown, within ``[server] shutdown_grace``.

        Pending waits stay pending in the store; the next start restores them with the same ids.
        Idempotent. **Cancellation:** shielded; bounded by the grace period.
        """
        if self._runtime.closing:
            return
        self._runtime.closing = True
        grace = self._runtime.config.server.shutdown_grace
        with trio.move_on_after(grace, shield=True) as grace_scope:
            await self._registry.shutdown()
        if grace_scope.cancelled_caught:
            log.error("shutdown_grace_exceeded", grace=grace)
        await self._last_sync()  # subscribers get every event of the settlements
        self._runtime.bus.close()


CLOSE_SYNC_SECONDS = 10.0
"""How long a closing coordinator waits for its last commits to become durable."""


async def crash(coordinator: Coordinator) -> None:
    """Drop everything as a crash of the process would, while the process lives on: the test rigs'
    in-process crash (``coordinator.chaos.crash``), not a method of the embedding API.

    Every later commit fails, the actors are torn down without settling, and the instance counts as
    dead, so the next ``open_coordinator`` on the database resumes its turns as after a crash. What
    was committed is kept (made durable), as after a real crash.
    """
    runtime = coordinator._runtime
    runtime.closing = True
    runtime.store.set_commit_hook(_crashed)
    claims.LIVE_IN_THIS_PROCESS.discard(runtime.instance_id)
    await coordinator._registry.abandon()
    await coordinator._last_sync()
    runtime.bus.close()


def _crashed(tx: Reader) -> None:
    raise errors.StoreError("the coordinator was abandoned: nothing more is written")
