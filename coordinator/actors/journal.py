"""A turn's writes: the actors say what happened, the journal alone decides when it is written.

Every write of a turn is a body, a function of one store transaction that never awaits, fenced by the
turn's claim. What happened decides when its body is committed, by three rules kept here and nowhere
else:

- **Now** (``write``): something outside the process waits on it. A step's or a call's start (a tool
  acts outside only once its start is durable), a wait on a person (it is published to a client), a
  stop's intent (the decision's answer waits for it), a log line or progress of a running call.
- **With the next write** (``step_succeeded``, ``answered``, ``call_succeeded`` of a step's last
  call): nothing outside waits between it and a write that follows at once (the next step's start,
  the turn's settlement). The body is *carried*: the turn's next transaction runs it first, so the
  events keep their order, and a stop that comes first writes it before anything of its own, so the
  sweep finds the step or call settled, never failed over its success. A carried body must be
  idempotent (a compare-and-set): it stays carried until a write that ran it returned, and PostgreSQL
  may commit, then report ``Cancelled``, so the next write runs it again.
- **In the stop's one commit** (``settled`` while the turn stops): a cleanup's settlement (a wait's
  revocation, a call's failure with its partial result, a step's failure with its streamed text) is
  *deferred*; the turn's settlement (``settle_turn``) runs every deferred body, in the order the
  cleanups ran, then its sweep and terminal event, in one fenced transaction. The order is the live
  one by construction: a parent's cleanup runs only after its children's (a call waits for every wait
  of the turn, a step's nursery for its calls), and seq is insertion order. A stop then costs its
  intent's commit and one more, not one commit per actor. A body carried once a settlement is
  deferred joins the deferred ones, behind them: a step's success carried after its call's deferred
  failure came after it.

When the turn's settlement cannot be committed (the disk, an injected store failure), it is written
again without the deferred bodies but with the carried ones: the sweep settles from the store what the
cleanups had left, and an answer the model streamed is never lost with a failed commit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import attrs
import trio

from coordinator import timeslice
from coordinator.actors.handle import ActorHandle
from coordinator.errors import StoreError
from coordinator.logs import get_logger
from coordinator.store import Fence, Store, Transaction

log = get_logger(__name__)

T = TypeVar("T")
Body = Callable[[Transaction], object]


@attrs.define(eq=False, repr=False)
class Journal:
    """The writes of one turn, fenced by its claim; the turn's ``handle`` says whether it stops."""

    store: Store
    fence: Fence
    handle: ActorHandle
    _carried: list[Body] = attrs.Factory(list)
    _deferred: list[Body] = attrs.Factory(list)
    # When (``trio.current_time()``) the last fenced write that committed was begun: the claim was
    # held then, at least.
    confirmed_at: float = -math.inf

    def __repr__(self) -> str:
        return f"Journal(carried={len(self._carried)}, deferred={len(self._deferred)})"

    @property
    def deferred(self) -> tuple[Body, ...]:
        """The settlements deferred to the turn's settlement so far, in order."""
        return tuple(self._deferred)

    async def write(self, body: Callable[[Transaction], T]) -> T:
        """Commit ``body`` now, after whatever is carried, in one transaction fenced by the turn's claim.

        **Raises:** ``Fenced`` when another instance took the claim over; ``StoreError``.
        """
        began = trio.current_time()
        if not self._carried:
            result = await self.store.write(body, fence=self.fence)
            self.confirmed_at = began
            return result
        carried = list(self._carried)

        def with_carried(tx: Transaction) -> T:
            for earlier in carried:
                earlier(tx)
            return body(tx)

        result = await self.store.write(with_carried, fence=self.fence)
        self.confirmed_at = began
        self._carried = [c for c in self._carried if c not in carried]
        return result

    async def step_succeeded(self, body: Body) -> None:
        """A step's success (its calls settled): the next step's start, or the stop that comes
        instead, follows at once. ``body`` is idempotent.

        **Cancellation:** a cancel point; the body is kept whatever happens next.
        """
        await self._carry(body)

    async def answered(self, body: Body) -> None:
        """The model's answer without tool calls, with its step's success: the turn's settlement
        follows at once. ``body`` is idempotent.

        **Cancellation:** a cancel point; the body is kept whatever happens next.
        """
        await self._carry(body)

    async def call_succeeded(self, body: Body, *, ends_its_step: bool) -> None:
        """A call's success. The last running call of a step is followed at once by the step's own
        success and the next step's start: carried. Any other call's (its siblings still run, a
        nested call, a resumed call) is committed now: something outside may wait on it for long.
        ``body`` is idempotent.

        **Raises:** as ``write`` when committed now.
        """
        if ends_its_step:
            await self._carry(body)
        else:
            await self.write(body)

    async def settled(self, body: Body) -> bool:
        """A cleanup's settlement: a wait's revocation, a call's or a step's failure. Deferred to the
        turn's settlement while the turn stops; otherwise (a tool's own failure while the turn goes
        on) committed now. Returns whether it was committed now.

        **Cancellation:** a cancel point when deferred; a deferred body is kept whatever happens next.

        **Raises:** as ``write`` when committed now.
        """
        if self.handle.reason is not None:
            self._deferred.append(body)
            await timeslice.checkpoint()
            return False
        await self.write(body)
        return True

    async def settle_turn(self, settle: Callable[[Transaction], T]) -> T:
        """The turn's own settlement, last of all: every deferred body in order, then ``settle``, in
        one transaction (after what is carried). If that commit fails, ``settle`` is written again
        without the deferred bodies, and ``settle``'s sweep settles from the store what they had left.

        **Raises:** as ``write``.
        """
        deferred, self._deferred = self._deferred, []

        def with_deferred(tx: Transaction) -> T:
            for body in deferred:
                body(tx)
            return settle(tx)

        try:
            return await self.write(with_deferred)
        except StoreError as exc:
            if not deferred and not self._carried:
                raise
            log.warning("turn_settlement_written_again", error=str(exc))
            return await self.write(settle)

    async def _carry(self, body: Body) -> None:
        (self._deferred if self._deferred else self._carried).append(body)
        await timeslice.checkpoint()
