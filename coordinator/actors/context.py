"""What actors share: the coordinator's runtime, and the scope of one running turn."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from coordinator.actors.handle import ActorHandle
from coordinator.actors.journal import Journal
from coordinator.actors.session_life import SessionLives
from coordinator.actors.wait_book import WaitBook
from coordinator.bus import Bus
from coordinator.checkpoints import Injector
from coordinator.config import Config
from coordinator.logs import get_logger
from coordinator.metrics import Metrics
from coordinator.models.base import Model
from coordinator.models.history import Conversations
from coordinator.store import Fence, Store
from coordinator.store.rows import TurnRow
from coordinator.tools.base import Tool
from coordinator.tools.table import ToolTable
from coordinator.tracing import NO_SPAN, ActorSpan, Tracing

if TYPE_CHECKING:
    from coordinator.mcp import McpServers

log = get_logger(__name__)


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
    # Which tools each session may call now (fixed ones, and those providers add and withdraw).
    tools: ToolTable
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
    # The ``[[mcp]]`` servers whose tools the table offers while each is ready; None before they start.
    mcp: McpServers | None = None
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
    # What sessions keep beyond one call (``coordinator/actors/session_life.py``), set as the
    # coordinator starts. None: nothing is kept (a test's bare runtime).
    lives: SessionLives | None = None

    def runs_a_turn_of(self, session_id: str) -> bool:
        """Whether a turn of ``session_id`` runs in this process now (a sub-agent's included)."""
        return self.live_turn_of(session_id) is not None

    def live_turn_of(self, session_id: str) -> TurnScope | None:
        """The turn of ``session_id`` that runs in this process now, if any."""
        return next((turn for turn in self.turns.values() if turn.session_id == session_id), None)

    def __repr__(self) -> str:
        return f"Runtime(instance_id={self.instance_id!r}, turns={len(self.turns)}, closing={self.closing})"


@attrs.frozen
class Turn:
    """Who a running turn is, for its whole run: its ids, the claim its writes are fenced by (the
    instance that holds it and the claim's epoch), and the handle that stops it."""

    session_id: str
    turn_id: str
    owner: str  # the instance id holding the session's claim
    epoch: int
    handle: ActorHandle

    @property
    def fence(self) -> Fence:
        """This turn's claim as every one of its writes must find it held."""
        return (self.session_id, self.owner, self.epoch)


CLAIM_CONFIRMED_SECONDS = 0.25
"""How recent a turn's last fenced commit must be for its claim to count as checked: a few round
trips' time, far below any lease (a takeover needs the owner's heartbeat a whole lease old)."""


@attrs.define(kw_only=True, eq=False)
class TurnScope:
    """One running turn: who it is (``identity``), its writes (``journal``), its waits on people
    (``waits``), and what its actors share while it runs.

    Registered in ``Runtime.turns`` while it runs, so the reply and interrupt paths can stop it.
    """

    runtime: Runtime = attrs.field(repr=False)  # reprs stay a line (``Runtime``)
    # Never reassigned. Not guarded by a setattr hook: attrs would then route every write of the run
    # state below (span, title, settling) through one, a dozen times a turn.
    identity: Turn
    journal: Journal = attrs.field(
        init=False, repr=False, default=attrs.Factory(lambda self: self._new_journal(), takes_self=True)
    )
    waits: WaitBook = attrs.field(init=False, repr=False, factory=WaitBook)
    resumed_after: str | None = None
    # The session's title as the model is sent it, read by the turn's first step (titles never change).
    title: str | None = None
    # The turn's span (``invoke_agent``), where each step adds the tokens its model request used.
    span: ActorSpan = NO_SPAN
    # The turn's nursery, owned by the session actor, for a step's background helper: the delta
    # flusher of a streaming step (``coordinator/actors/step_text.py``), which the step cancels as its
    # stream ends.
    background: trio.Nursery | None = attrs.field(default=None, repr=False)
    settling: bool = False
    # The session's next turn as the turn's committed settlement read it: the session actor's look.
    next_turn: Callable[[], TurnRow | None] | None = attrs.field(default=None, repr=False)

    @classmethod
    def of_claimed(cls, runtime: Runtime, session_id: str, turn_id: str, epoch: int) -> TurnScope:
        """The scope of a turn whose session's claim this runtime just took at ``epoch``."""
        handle = ActorHandle(kind="turn", id=turn_id)
        identity = Turn(
            session_id=session_id, turn_id=turn_id, owner=runtime.instance_id, epoch=epoch, handle=handle
        )
        return cls(runtime=runtime, identity=identity)

    def _new_journal(self) -> Journal:
        return Journal(store=self.runtime.store, fence=self.identity.fence, handle=self.identity.handle)

    @property
    def session_id(self) -> str:
        return self.identity.session_id

    @property
    def turn_id(self) -> str:
        return self.identity.turn_id

    @property
    def epoch(self) -> int:
        return self.identity.epoch

    @property
    def handle(self) -> ActorHandle:
        return self.identity.handle

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools this turn's session may call now, by name."""
        return self.runtime.tools.for_session(self.session_id)

    @property
    def fence(self) -> Fence:
        """This turn's claim as every one of its writes must find it held."""
        return self.identity.fence

    @property
    def stopping(self) -> bool:
        return self.handle.reason is not None

    async def check_claim(self) -> None:
        """Raise ``Fenced`` unless this instance still holds the claim at this turn's epoch.

        For an effect outside the store (a tool's start): a read, unless a fenced write of this turn
        begun within ``CLAIM_CONFIRMED_SECONDS`` (a tenth of the lease at most) committed: it found
        the claim held, and a takeover needs this instance's heartbeat a lease old. A process
        frozen since then, however long, finds that time passed and reads.
        """
        fresh = min(CLAIM_CONFIRMED_SECONDS, self.runtime.config.server.lease / 10)
        if trio.current_time() - self.journal.confirmed_at <= fresh:
            await trio.lowlevel.checkpoint()  # a scheduling point all the same, as the read is
            return
        session_id, owner, epoch = self.fence
        await self.runtime.store.read(lambda reader: reader.fence(session_id, owner, epoch))

    async def checkpoint(self, name: str) -> None:
        """A named checkpoint: an injector may hold the actor here (``Injector.at``); free without one."""
        if self.runtime.injector is not None:
            await self.runtime.injector.at(name, self)
