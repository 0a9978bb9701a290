"""What actors share: the coordinator's runtime, and the scope of one running turn."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import attrs
import structlog
import trio

from coordinator.actors.handle import ActorHandle
from coordinator.bus import Bus
from coordinator.checkpoints import Injector
from coordinator.config import Config
from coordinator.metrics import Metrics
from coordinator.models.base import Model
from coordinator.models.history import Conversations
from coordinator.store import Fence, Store, Transaction
from coordinator.store.rows import TurnRow
from coordinator.tools.base import Tool
from coordinator.tracing import NO_SPAN, ActorSpan, Tracing

log = structlog.get_logger()

T = TypeVar("T")

# Bound on each cleanup duty (revoke, kill and reap, settle). A settlement is one local commit; the
# longest duty is killing a process group (SIGTERM, a grace period, SIGKILL, reap).
SETTLE_SECONDS = 10.0


class Waiter:
    """The live end of a durable wait: the reply path resolves it, the wait actor awaits it."""

    def __init__(self) -> None:
        self._done = trio.Event()
        self.value: Any = None

    def resolve(self, value: Any) -> None:
        if not self._done.is_set():
            self.value = value
            self._done.set()

    async def wait(self) -> Any:
        await self._done.wait()
        return self.value


@attrs.define
class Waits:
    """Live waiters by request or form id, in this process."""

    by_id: dict[str, Waiter] = attrs.Factory(dict)

    def expect(self, wait_id: str) -> Waiter:
        waiter = self.by_id[wait_id] = Waiter()
        return waiter

    def resolve(self, wait_id: str, value: Any) -> None:
        waiter = self.by_id.get(wait_id)
        if waiter is not None:
            waiter.resolve(value)

    def forget(self, wait_id: str) -> None:
        self.by_id.pop(wait_id, None)

    def count_by_kind(self) -> dict[str, int]:
        """Live waits by kind (``permission``, ``question``), told apart by their ids' kind prefix."""
        counts = dict.fromkeys(_WAIT_KINDS.values(), 0)
        for wait_id in self.by_id:
            kind = _WAIT_KINDS.get(wait_id.partition("_")[0])
            if kind is not None:
                counts[kind] += 1
        return counts


# The kind prefix of a wait's id (``coordinator/ids.py``): a permission request's, a form's.
_WAIT_KINDS = {"per": "permission", "frm": "question"}


@attrs.frozen
class Takeover:
    """How a turn found unfinished at start is taken over, decided by the coordinator's recovery."""

    previous_owner: str | None
    after: str  # "shutdown" | "crash"


class TurnRunner(Protocol):
    """Runs a begun turn (its claim taken, its start published) to its one settlement."""

    async def __call__(
        self, runtime: Runtime, scope: TurnScope, turn: TurnRow, takeover: Takeover | None
    ) -> None: ...


class StreamedText(Protocol):
    """What a step's streamed text (``coordinator/actors/step_text.py``) offers whoever settles its step."""

    @property
    def turn_id(self) -> str: ...

    def unrecorded(self) -> str:
        """The text the model streamed that no commit has recorded yet."""
        ...


@attrs.define(kw_only=True, repr=False)
class Runtime:
    """The coordinator's parts, shared by every actor of one coordinator.

    Its repr is a line: every actor's frame holds it, and an error's traceback that renders the
    frames' locals (structlog's, with or without rich) would otherwise render the whole coordinator
    (its config, its tools, every running turn) once a frame, for seconds on the trio thread.
    """

    store: Store
    bus: Bus
    config: Config
    model: Model
    tools: dict[str, Tool]
    instance_id: str
    workdir: Path
    waits: Waits = attrs.Factory(Waits)
    turns: dict[str, TurnScope] = attrs.Factory(dict)
    # The text of each step whose streamed text no commit has recorded yet, by step id: the step's
    # own failure records it, or, when that commit failed, the session's sweep.
    step_texts: dict[str, StreamedText] = attrs.Factory(dict)
    # Each session's settled turns as the model is sent them, so a step converts only the rest.
    conversations: Conversations = attrs.Factory(Conversations)
    injector: Injector | None = None
    metrics: Metrics = attrs.Factory(Metrics)
    tracing: Tracing = attrs.Factory(Tracing)
    # Set when the coordinator starts shutting down (or is abandoned): decisions are refused from then
    # on, checked inside their transaction, so one either lands before the shutdown's stop or not at all.
    closing: bool = False
    # Starts a session's actor unless it runs (the registry's ``ensure_running``): a sub-agent's task
    # turn wakes its session as it ends, for a prompt a client queued there meanwhile.
    wake: Callable[[str], None] | None = None
    # Runs a sub-agent's turn inside its task call (``coordinator/actors/session.py::run_turn``, given by whoever
    # builds the runtime: the turn runs the very tool calls that need it). None: no sub-agents here.
    run_turn: TurnRunner | None = None

    def __repr__(self) -> str:
        return f"Runtime(instance_id={self.instance_id!r}, turns={len(self.turns)}, closing={self.closing})"


@attrs.define(kw_only=True, eq=False)
class TurnScope:
    """One running turn: its ids, its claim's fencing epoch, its handle, and who is still settling.

    Registered in ``Runtime.turns`` while it runs, so the reply and interrupt paths can stop it.
    """

    runtime: Runtime = attrs.field(repr=False)  # reprs stay a line (``Runtime``)
    session_id: str
    turn_id: str
    epoch: int
    handle: ActorHandle
    resumed_after: str | None = None
    # The session's title as the model is sent it, read by the turn's first step (titles never change).
    title: str | None = None
    # The turn's span (``invoke_agent``), where each step adds the tokens its model request used.
    span: ActorSpan = NO_SPAN
    # The turn's nursery, owned by the session actor, for a step's background helper: the delta
    # flusher of a streaming step (``coordinator/actors/step_text.py``), which the step cancels as its stream ends.
    background: trio.Nursery | None = attrs.field(default=None, repr=False)
    settling: bool = False
    live_waits: int = 0
    # Calls of a resumed turn whose kept wait is not re-opened yet: they count as live waits.
    unopened_waits: set[str] = attrs.Factory(set)
    # Calls that began to open a wait in this process (before its row is written): only these, and
    # the unopened ones, can leave a wait pending that their own settlement must revoke first.
    waiting_calls: set[str] = attrs.Factory(set)
    # The settlements a stop's cleanups left for the turn's own last transaction, in the order the
    # cleanups ran: children before parents (``settle``).
    deferred: list[Callable[[Transaction], object]] = attrs.field(factory=list, repr=False)
    # Writes nothing waits for, carried by the turn's next transaction (``carry``).
    carried: list[Callable[[Transaction], object]] = attrs.field(factory=list, repr=False)
    _waits_changed: trio.Event = attrs.field(factory=trio.Event, repr=False)

    @property
    def fence(self) -> Fence:
        """This turn's claim as every one of its writes must find it held."""
        return (self.session_id, self.runtime.instance_id, self.epoch)

    async def write(self, body: Callable[[Transaction], T]) -> T:
        """Run ``body`` in a store transaction fenced by this turn's claim: a stale owner writes
        nothing (``Store.write``).

        **Raises:** ``Fenced`` when another instance took the claim over; ``StoreError``.
        """
        if not self.carried:
            return await self.runtime.store.write(body, fence=self.fence)
        carried = list(self.carried)

        def with_carried(tx: Transaction) -> T:
            for earlier in carried:
                earlier(tx)
            return body(tx)

        result = await self.runtime.store.write(with_carried, fence=self.fence)
        self.carried = [c for c in self.carried if c not in carried]
        return result

    async def carry(self, body: Callable[[Transaction], object]) -> None:
        """A write nothing outside the process waits for, made by the turn's next transaction, first.

        A step's success is carried so (and the success of its last call), to the next step's start
        that follows at once, and the model's answer, to the turn's settlement; a stop's intent or
        settlement, if one comes first, writes it before anything of its own, so the events keep
        their order and the sweep finds the step settled. ``body`` must be idempotent: a carried body
        stays until a write that carried it returned, and PostgreSQL's may commit, then report
        ``Cancelled``, so the next write runs it again.

        Once a stop's cleanups have deferred a settlement (``settle``), a body carried after it is
        deferred behind it instead: the turn's settlement writes its carried bodies first, and a
        step's success carried after its call's deferred failure would otherwise come first (chaos
        seed 32, run 67). Like any deferred body, it is then dropped if that commit fails, and the
        sweep settles what it left from the store.

        **Cancellation:** a checkpoint; the body is kept whatever happens next.
        """
        (self.deferred if self.deferred else self.carried).append(body)
        await trio.lowlevel.checkpoint()

    async def settle(self, body: Callable[[Transaction], object]) -> bool:
        """A cleanup's settlement: a wait's revocation, a call's or a step's failure. Returns whether it
        was written now.

        While the turn stops, the body is deferred to the turn's own settlement, which runs every
        deferred body in the order the cleanups ran (children before parents, as each parent's
        cleanup waits for its children), then its sweep and terminal event, in one fenced transaction:
        a stop is one commit, not one per actor, and its events keep their order (seq is insertion
        order). Replies to the stopping turn's waits are refused meanwhile (``decisions``), so
        nothing is decided on a wait whose revocation is only deferred. Otherwise (a tool's own
        failure while the turn goes on) it is written at once.

        **Cancellation:** a checkpoint when deferred; a deferred body is kept whatever happens next.

        **Raises:** as ``write`` when written now.
        """
        if self.stopping:
            self.deferred.append(body)
            await trio.lowlevel.checkpoint()
            return False
        await self.write(body)
        return True

    def take_deferred(self) -> list[Callable[[Transaction], object]]:
        """The deferred settlements, handed to the turn's own settlement (once)."""
        deferred, self.deferred = self.deferred, []
        return deferred

    async def check_claim(self) -> None:
        """Raise ``Fenced`` unless this instance still holds the claim at this turn's epoch.

        A read, for an effect outside the store (a tool's start) that no fenced write precedes.
        """
        session_id, owner, epoch = self.fence
        await self.runtime.store.read(lambda reader: reader.fence(session_id, owner, epoch))

    async def checkpoint(self, name: str) -> None:
        """A named await point for fault injection (``coordinator/checkpoints.py``); free in production."""
        if self.runtime.injector is not None:
            await self.runtime.injector.at(name, self)

    @property
    def stopping(self) -> bool:
        return self.handle.reason is not None

    @contextlib.contextmanager
    def wait_opened(self, call_id: str) -> Iterator[None]:
        """Count a live permission or form wait; tool calls settle only after every wait did."""
        self.live_waits += 1
        self.unopened_waits.discard(call_id)
        try:
            yield
        finally:
            self.live_waits -= 1
            self._signal_waits_changed()

    @contextlib.contextmanager
    def settled_by_its_call_unless_done(self, call_id: str) -> Iterator[None]:
        """Around a wait's own settlement: if it raises (its revocation commit failed), the wait is left
        to its call, which revokes it as it settles (first thing, when the turn stops), and meanwhile
        it still counts among the waits every call's failure comes after (chaos F17)."""
        done = False
        try:
            yield
            done = True
        finally:
            if not done:
                self.unopened_waits.add(call_id)

    def may_have_waits(self, call_id: str) -> bool:
        """Whether a call's settlement must look for a wait of the call left pending: one this
        process began to open for it (its own revocation may have failed, chaos F15 and F17), or a
        kept one a resumed call has not re-opened. Every other call never had one."""
        return call_id in self.waiting_calls or call_id in self.unopened_waits

    def forget_unopened_wait(self, call_id: str) -> None:
        """A restored call settled its kept wait without re-opening it."""
        self.unopened_waits.discard(call_id)
        self._signal_waits_changed()

    def _signal_waits_changed(self) -> None:
        self._waits_changed.set()
        self._waits_changed = trio.Event()

    async def waits_settled(self) -> None:
        """Wait until no permission or form wait of this turn is still settling.

        This orders a stop's events as the contract says: every revocation before any tool failure.
        """
        while self.live_waits or self.unopened_waits:
            await self._waits_changed.wait()
