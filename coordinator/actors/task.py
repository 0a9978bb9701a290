"""The task actor: one turn of a sub-agent session, run as a child actor of a ``task`` call.

The sub-agent is an ordinary session (its own claim, events, history and waits) whose ``parent``
names the call. Its turn is begun in the parent's fenced transaction that creates it (or, with
``session_id``, prompts an existing sub-agent of the parent), and is run by ``session.run_turn``
(``Runtime.run_turn``) right here, inside the call's scope, so it never outlives the call:

- **downward**: when the parent's turn stops, the sub-agent's turn is stopped with the same reason
  and ``parent`` on it, and settles (its waits revoked, its calls failed, its processes killed, or
  for a shutdown suspended) before the task call settles;
- **outward**: the call's result is how the sub-agent's turn ended, read back from the store (so a
  resumed call reads it the same way): succeeded gives ``{session_id, text}``; declined stops the
  parent's turn (``Declined(via="task")``); any other stop of its own fails only the call.

A restarted parent resumes the call (``permitted``): the call finds its turn through its link and
takes it over (resuming it after a shutdown or a crash), or reads how it ended.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from coordinator import events, timeslice
from coordinator.actors import stops
from coordinator.actors.context import Runtime, Takeover, TurnRunner, TurnScope
from coordinator.actors.handle import ActorHandle
from coordinator.clock import now_rfc3339
from coordinator.errors import StoreError, ToolFailure
from coordinator.ids import new_id
from coordinator.logs import get_logger
from coordinator.reasons import Declined, ParentLink, tool_error_of_outcome
from coordinator.records import Message, TextPart
from coordinator.statuses import TurnStatus
from coordinator.store import Transaction
from coordinator.store.rows import ToolCallRow, TurnRow

log = get_logger(__name__)


async def run(
    turn: TurnScope,
    running: ActorHandle,
    call: ToolCallRow,
    *,
    prompt: str,
    title: str,
    session_id: str | None,
    started: Callable[[str], None],
    run_turn: TurnRunner,
) -> dict[str, Any]:
    """Run the sub-agent's turn for ``call`` to its settlement and return the call's result.

    ``started`` is told the sub-agent's session id as soon as its turn is begun (or found);
    ``run_turn`` runs the turn (``session.run_turn``, which the sub-agent's tool calls run under).

    **Cancellation:** a stop of the parent's turn stops the sub-agent's with the same reason and
    ``parent``; this returns (raising ``Cancelled``) only once that turn settled, shielded.

    **Raises:** ``ToolFailure``: a depth over ``[limits] task_depth``, a ``session_id`` that is not a
    sub-agent of this session or is busy, or a sub-agent's turn that failed, timed out or was
    interrupted on its own.
    """
    link = ParentLink(session_id=turn.session_id, call_id=call.call_id)
    runtime = turn.runtime
    sub_turn = await runtime.store.read(
        lambda reader: reader.turn_of_task_call(turn.session_id, call.call_id)
    )
    if sub_turn is None:
        scope, sub_turn = await _begin(turn, link, prompt, title, session_id)
        started(sub_turn.session_id)
        await _run_inside(run_turn, running, link, scope, sub_turn, None)
    else:
        started(sub_turn.session_id)
        if sub_turn.status != TurnStatus.SETTLED:
            scope, sub_turn, takeover = await _take_over(runtime, sub_turn)
            await _run_inside(run_turn, running, link, scope, sub_turn, takeover)
    if runtime.wake is not None:
        runtime.wake(sub_turn.session_id)  # a prompt a client queued meanwhile in the sub-agent's session
    return await _result(turn, call, sub_turn.id)


def _check_depth(turn: TurnScope, tx: Transaction) -> None:
    limit = turn.runtime.config.limits.task_depth
    depth = tx.session_depth(turn.session_id) + 1
    if depth > limit:
        raise ToolFailure(
            type="error", message=f"a sub-agent here would be {depth} deep; [limits] task_depth is {limit}"
        )


async def _begin(
    turn: TurnScope, link: ParentLink, prompt: str, title: str, session_id: str | None
) -> tuple[TurnScope, TurnRow]:
    """Create (or find) the sub-agent, queue its turn, take its claim and publish the start, at once.

    One transaction, fenced by the parent's claim: after a crash either nothing of it exists (the
    call never started its sub-agent) or all of it does (the resume finds the turn by its link).
    """
    runtime = turn.runtime
    turn_id = new_id("turn")

    def begin(tx: Transaction) -> tuple[TurnRow | None, int]:
        _check_depth(turn, tx)
        since = now_rfc3339()
        child_id = _sub_agent(tx, link, title, session_id, since)
        tx.insert_turn(turn_id, child_id, prompt, since, task=link)
        epoch = tx.acquire_claim(child_id, runtime.instance_id, since, takeover_from=None)
        if epoch == 0:
            raise ToolFailure(type="error", message=f"the sub-agent session {child_id} is busy with a turn")
        tx.set_turn_status(turn_id, TurnStatus.RUNNING)
        message_id = new_id("msg")
        tx.insert_message(message_id, child_id, turn_id, "user", since)
        tx.add_text_part(message_id, prompt)
        tx.emit(events.turn_started(child_id, turn_id, prompt))
        return tx.get_turn(turn_id), epoch

    row, epoch = await turn.journal.write(begin)
    assert row is not None
    return _scope(runtime, row, epoch), row


def _sub_agent(tx: Transaction, link: ParentLink, title: str, session_id: str | None, since: str) -> str:
    """The sub-agent's session id: a new session made now (``session.created``), or ``session_id``."""
    if session_id is None:
        child_id = new_id("ses")
        # A child belongs to its parent's principal: whoever may see the parent may see its work.
        _, owner = tx.session_owner(link.session_id)
        tx.insert_session(child_id, title, since, parent=link, owner=owner)
        created = tx.get_session(child_id)
        assert created is not None
        tx.emit(events.session_created(created))
        return child_id
    existing = tx.get_session(session_id)
    if existing is None or existing.parent is None or existing.parent.session_id != link.session_id:
        raise ToolFailure(type="error", message=f"{session_id!r} is not a sub-agent session of this session")
    return session_id


async def _take_over(runtime: Runtime, sub_turn: TurnRow) -> tuple[TurnScope, TurnRow, Takeover]:
    """Claim a sub-agent turn a previous process left (suspended, crashed, or stopping), to resume it."""
    claim = await runtime.store.read(lambda reader: reader.get_claim(sub_turn.session_id))
    previous = None if claim is None else claim.owner
    after = "shutdown" if sub_turn.status == TurnStatus.SUSPENDED else "crash"

    def take(tx: Transaction) -> tuple[TurnRow, int]:
        current = tx.get_turn(sub_turn.id)
        assert current is not None
        if current.status not in (TurnStatus.RUNNING, TurnStatus.STOPPING, TurnStatus.SUSPENDED):
            return current, 0
        return current, tx.acquire_claim(
            current.session_id, runtime.instance_id, now_rfc3339(), takeover_from=previous
        )

    current, epoch = await runtime.store.write(take)
    if epoch == 0:
        raise ToolFailure(
            type="error", message=f"the sub-agent session {sub_turn.session_id} is run elsewhere"
        )
    log.info("sub_agent_taken_over", sub_turn_id=current.id, after=after)
    return _scope(runtime, current, epoch), current, Takeover(previous_owner=previous, after=after)


def _scope(runtime: Runtime, row: TurnRow, epoch: int) -> TurnScope:
    return TurnScope.of_claimed(runtime, row.session_id, row.id, epoch)


async def _run_inside(
    run_turn: TurnRunner,
    running: ActorHandle,
    link: ParentLink,
    scope: TurnScope,
    row: TurnRow,
    takeover: Takeover | None,
) -> None:
    """Run the sub-agent's turn shielded, and forward the parent's stop to it as a typed stop.

    Shielded like a session actor: only a stop with a reason ends the turn, never the bare
    cancellation of the parent's scope, so it always settles itself (and before the call does).
    """
    settled = False
    unwritten: StoreError | None = None

    async def forward_stop() -> None:
        try:
            await trio.sleep_forever()
        finally:
            if not settled:  # the parent's scope was cancelled: its reason, with `parent`, comes down
                stops.forward_from_parent(scope, running, link)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(forward_stop)
        try:
            with trio.CancelScope(shield=True):
                await run_turn(scope.runtime, scope, row, takeover)
        except StoreError as exc:
            # The sub-agent's settlement could not be written: the store keeps its turn as it was, and
            # the call's own settlement settles it (settlement.settle_sub_agent_turn).
            unwritten = exc
        finally:
            settled = True
            nursery.cancel_scope.cancel(reason="the sub-agent's turn ended")
    if unwritten is not None:
        message = f"the sub-agent's turn could not be settled: {type(unwritten).__name__}: {unwritten}"
        raise ToolFailure(type="error", message=message) from unwritten


async def _result(turn: TurnScope, call: ToolCallRow, sub_turn_id: str) -> dict[str, Any]:
    """The call's result, from how the sub-agent's turn ended as the store has it."""
    row = await turn.runtime.store.read(lambda reader: reader.get_turn(sub_turn_id))
    assert row is not None
    if row.outcome == "succeeded":
        history = await turn.runtime.store.read(lambda reader: reader.history(row.session_id))
        return {"session_id": row.session_id, "text": last_text(history, row)}
    reason = row.stop_reason
    if row.status != TurnStatus.SETTLED or reason is None or reason.parent is not None:
        # Stopped (or suspended) because the parent's turn stopped: so does this call, with that reason.
        await timeslice.checkpoint()
        raise ToolFailure(type="error", message=f"the sub-agent's turn {row.id} ended as its parent's stop")
    if row.outcome == "declined":
        await stops.decide(turn, Declined.by_sub_agent(call.call_id))
        await timeslice.checkpoint()
        raise AssertionError("a stopped turn did not cancel its task call")
    assert row.outcome is not None  # a settled stop's outcome is its reason's
    error_type = tool_error_of_outcome(row.outcome)
    message = f"the sub-agent session {row.session_id} stopped: {reason.describe()}"
    raise ToolFailure(type=error_type, message=message)


def last_text(history: list[Message], row: TurnRow) -> str:
    """The text of the last assistant message of the turn that has any (what the sub-agent answered)."""
    for message in reversed(history):
        if message.turn_id != row.id or message.role != "assistant":
            continue
        text = "".join(part.text for part in message.parts if isinstance(part, TextPart))
        if text:
            return text
    return ""
