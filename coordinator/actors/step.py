"""The step actor: one model request, then the tool calls it asked for, run concurrently.

A step starts with ``session.step.started`` and ends with ``session.step.succeeded`` once the model
answered and every tool call it asked for has settled, or with ``session.step.failed`` carrying the
turn's stop reason. A model failure (after the client's retries) or the step deadline is a stop the step
decides itself: it commits the intent through the turn and leaves through its cleanup.

While the model streams, its text lives in the step's ``StepText`` (memory, published as deltas). The
commit that records the reply records the text; a stop before that records it in the step's failure
(``partial_text``, and a history text part whose status is the stop's).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import attrs
import trio

from coordinator import events, timeslice
from coordinator.actors import settlement, steers, stops, tool_call
from coordinator.actors.context import SETTLE_SECONDS, TurnScope
from coordinator.actors.handle import ActorHandle
from coordinator.actors.step_text import StepText
from coordinator.clock import now_rfc3339
from coordinator.errors import ModelError
from coordinator.events import Draft, Emitted
from coordinator.ids import new_id
from coordinator.logs import get_logger
from coordinator.models.base import ChatMessage, ModelReply, ModelRequest, ModelToolCall
from coordinator.reasons import Failure, StopReason, Timeout
from coordinator.records import Rule, StepMessage, StepToolCall
from coordinator.statuses import CallStatus, TurnStatus
from coordinator.store import Transaction
from coordinator.store.rows import StoredMessage, ToolCallRow
from coordinator.tracing import ActorSpan

log = get_logger(__name__)


async def run(turn: TurnScope) -> bool:
    """Ask the model once and run the tool calls it asks for. Returns True if it asked for any.

    **Cancellation:** the step fails with the turn's reason after its tool calls settled
    (``session.step.failed``); shielded, bounded by ``SETTLE_SECONDS``.

    **Raises:** ``Fenced`` if the claim was taken over.
    """
    step_id = new_id("step")
    handle = turn.handle.child("step", step_id)
    with turn.runtime.tracing.step(turn.session_id, step_id, handle) as span:
        return await _run(turn, step_id, handle, span)


async def _run(turn: TurnScope, step_id: str, handle: ActorHandle, span: ActorSpan) -> bool:
    after_ord = turn.runtime.conversations.kept_until(turn.session_id, turn.epoch)

    def begin(tx: Transaction) -> tuple[Callable[[], int], Emitted, Callable[[], History]] | StopReason:
        # The step boundary: a soft stop takes effect here, and steers are delivered here, so that
        # the request below carries them (coordinator/actors/steers.py).
        boundary = tx.boundary(turn.turn_id)
        if boundary.soft_stop is not None:
            due = stops.soft_stop_due(tx, turn, boundary.soft_stop)
            if due is not None:
                return due
        if boundary.status == TurnStatus.RUNNING and boundary.steers:
            steers.deliver(tx, turn.session_id, turn.turn_id, boundary.steers)
        index = tx.insert_step(step_id, turn.session_id, turn.turn_id, now_rfc3339())
        started = tx.emit(events.step_started(turn.session_id, turn.turn_id, step_id))
        # What the model is sent, read here: a read of its own would cost a read transaction of its
        # own, as much again as the statements. Learned with the commit, like the index.
        stored = tx.history_after_later(turn.session_id, after_ord)
        return index, started, lambda: History(after_ord, *stored())

    begun = await turn.journal.write(begin)
    if not isinstance(begun, tuple):
        # The soft stop's intent is committed: the turn stops here, before asking the model again.
        stops.apply(turn.runtime, turn.turn_id, begun)
        await timeslice.checkpoint()
        raise AssertionError("a stopped turn did not cancel its step")
    index, started, history = begun[0](), begun[1], begun[2]()
    text = StepText(turn=turn, step_id=step_id, started_seq=started.event.stored_seq)
    turn.runtime.step_texts[step_id] = text
    with handle.scope, stops.failing_on_error(turn, f"step {step_id}"):
        try:
            # Inside the try: an unexpected exception stops the turn with a typed Failure before the
            # cleanup below asks for the reason.
            with stops.failing_on_error(turn, f"step {step_id}"):
                reply = await _ask_model(turn, index, text, history)
                span.add_usage(reply.usage)
                turn.span.add_usage(reply.usage)
                turn.runtime.metrics.model_used(reply.usage)
                if not reply.tool_calls:
                    await _answer(turn, step_id, reply, text)
                    span.succeeded()
                    return False
                calls, rules = await _record_reply(turn, step_id, reply, text)
                siblings = tool_call.Siblings(running=len(calls), rules=rules)
                async with trio.open_nursery() as nursery:
                    for call in calls:
                        await nursery.start(
                            functools.partial(tool_call.run, turn, handle, call, siblings=siblings)
                        )
        except BaseException:
            reason = handle.reason_or_failure()
            with trio.move_on_after(SETTLE_SECONDS, shield=True):
                reason = await _settle(turn, step_id, reason, text)
            span.stopped(reason)
            raise
        succeeded = events.step_succeeded(
            turn.session_id, turn.turn_id, step_id, _message(reply, calls), reply.usage
        )
        # The next step's start (or the stop that comes instead) commits it: nothing waits between.
        await turn.journal.step_succeeded(functools.partial(_succeed, step_id=step_id, succeeded=succeeded))
        span.succeeded()
        return True
    raise AssertionError("a step's own scope is never stopped alone")


def _message(reply: ModelReply, calls: list[ToolCallRow]) -> StepMessage:
    """The reply as ``session.step.succeeded`` reports it, with the coordinator's call ids."""
    tool_calls = [StepToolCall(call_id=c.call_id, name=c.name, input=c.input) for c in calls]
    return StepMessage(text=reply.text, tool_calls=tool_calls)


async def _ask_model(turn: TurnScope, index: int, text: StepText, history: History) -> ModelReply:
    runtime = turn.runtime
    messages = await _conversation(turn, history)
    request = ModelRequest(
        session_id=turn.session_id,
        index=index,
        title=await _title(turn),
        messages=messages,
        tools=tuple(tool.spec for tool in turn.tools.values()),
        text=text,
    )
    limit = runtime.config.timeouts.limit("step")
    stop: StopReason
    with trio.move_on_after(math.inf if limit is None else limit) as timer:
        try:
            await turn.checkpoint("model.request")
            reply = await _stream(turn, request, text)
            await turn.checkpoint("model.reply")
            return reply
        except ModelError as exc:
            log.warning("model_failed", error=str(exc))
            stop = Failure.of_model(exc)
    if timer.cancelled_caught:
        assert limit is not None
        stop = Timeout.deadline("step", limit)
    await stops.decide(turn, stop)
    await timeslice.checkpoint()
    raise AssertionError("a stopped turn did not cancel its step")


async def _title(turn: TurnScope) -> str:
    """The session's title, read once a turn at most, and kept beside its conversation between turns."""
    if turn.title is None:
        conversations = turn.runtime.conversations
        turn.title = conversations.title(turn.session_id)
        if turn.title is None:
            session = await turn.runtime.store.read(lambda reader: reader.get_session(turn.session_id))
            turn.title = "" if session is None else session.title
            conversations.keep_title(turn.session_id, turn.title)
    return turn.title


async def _stream(turn: TurnScope, request: ModelRequest, text: StepText) -> ModelReply:
    """The model's reply, its text published as deltas meanwhile (the tail once the reply is whole)."""
    bus = turn.runtime.bus
    bus.start_streaming(text)
    try:
        failure: ModelError | None = None
        with text.streaming():
            try:
                reply = await turn.runtime.model.complete(request)
            except ModelError as exc:
                failure = exc  # raised below, not wrapped in the nursery's exception group
        if failure is not None:
            raise failure
        await text.finish(reply.text)
    finally:
        bus.stop_streaming(text)
    return reply


@attrs.frozen
class History:
    """The session's messages stored after ``after_ord`` (what its kept conversation lacks), and
    their calls' model ids, as the transaction that began the step read them."""

    after_ord: int
    stored: list[StoredMessage]
    model_ids: dict[str, str | None]


async def _conversation(turn: TurnScope, history: History) -> tuple[ChatMessage, ...]:
    """The history as the model is sent it: the session's settled turns are kept converted."""
    runtime, session_id = turn.runtime, turn.session_id
    conversations = runtime.conversations
    # A scheduling point, as the read of its own had been: the chaos campaign's recorded runs replay
    # by the order of checkpoints across sessions (design/chaos.md).
    await timeslice.checkpoint()
    messages = conversations.messages_after(
        session_id, turn.epoch, history.after_ord, history.stored, history.model_ids
    )
    if messages is not None:
        return messages

    async def tail(after_ord: int) -> tuple[list[StoredMessage], dict[str, str | None]]:
        return await runtime.store.read(lambda reader: reader.history_after(session_id, after_ord))

    return await conversations.request_messages(tail, session_id, turn.epoch)


async def _answer(turn: TurnScope, step_id: str, reply: ModelReply, text: StepText) -> None:
    """Store an answer without tool calls with the step's success, carried (``Journal.answered``) to
    the turn's settlement, which follows at once: nothing outside waits between them, and a stop
    that comes first writes it first, so the answer is kept and the step stays succeeded."""
    succeeded = events.step_succeeded(
        turn.session_id, turn.turn_id, step_id, _message(reply, []), reply.usage
    )

    def answer(tx: Transaction) -> None:
        # Idempotent, as a carried body must be: once the step succeeded, writes nothing.
        if tx.succeed_step(step_id):
            _insert_assistant_message(tx, turn, reply)
            tx.emit(succeeded)

    await turn.journal.answered(answer)
    _recorded(turn, step_id, text)


async def _record_reply(
    turn: TurnScope, step_id: str, reply: ModelReply, text: StepText
) -> tuple[list[ToolCallRow], list[Rule]]:
    """Store the assistant message with its tool calls, and publish each call's start, at once.
    Returns the calls, and the session's rules that decide whether each may run, read there."""

    def record(tx: Transaction) -> tuple[list[ToolCallRow], Callable[[], list[Rule]]]:
        message_id = _insert_assistant_message(tx, turn, reply)
        calls = [_start_call(tx, turn, step_id, message_id, model_call) for model_call in reply.tool_calls]
        return calls, tx.session_rules_later(turn.session_id)

    calls, rules = await turn.journal.write(record)
    _recorded(turn, step_id, text)
    return calls, rules()


def _succeed(tx: Transaction, *, step_id: str, succeeded: Draft) -> None:
    """Idempotent, as a carried body must be (``Journal.step_succeeded``): once the step succeeded, writes nothing."""
    if tx.succeed_step(step_id):
        tx.emit(succeeded)


def _recorded(turn: TurnScope, step_id: str, text: StepText) -> None:
    """The step's text is in the store now: no stop has to keep it any more."""
    text.recorded = True
    turn.runtime.step_texts.pop(step_id, None)


def _insert_assistant_message(tx: Transaction, turn: TurnScope, reply: ModelReply) -> str:
    message_id = new_id("msg")
    tx.insert_message(message_id, turn.session_id, turn.turn_id, "assistant", now_rfc3339())
    if reply.text:
        tx.add_text_part(message_id, reply.text)
    return message_id


def _start_call(
    tx: Transaction, turn: TurnScope, step_id: str, message_id: str, model_call: ModelToolCall
) -> ToolCallRow:
    call = ToolCallRow(
        session_id=turn.session_id,
        call_id=_unique_call_id(tx, turn.session_id, model_call.id),
        turn_id=turn.turn_id,
        step_id=step_id,
        parent_call_id=None,
        model_call_id=model_call.id,
        name=model_call.name,
        input=model_call.input,
        status=CallStatus.RUNNING,
        output=None,
        error=None,
        partial=None,
        progress=None,
    )
    tx.insert_tool_call(call, now_rfc3339())
    tx.add_tool_part(message_id, call.call_id)
    tx.emit(events.tool_started(turn.session_id, turn.turn_id, call.call_id, call.name, call.input, None))
    return call


def _unique_call_id(tx: Transaction, session_id: str, model_call_id: str) -> str:
    """The model's own id when it is new in the session (models may reuse ids across requests)."""
    candidate, n = model_call_id or "call", 1
    while tx.call_id_taken(session_id, candidate):
        n += 1
        candidate = f"{model_call_id}-{n}"
    return candidate


async def _settle(turn: TurnScope, step_id: str, reason: StopReason, text: StepText) -> StopReason:
    """Fail the step, keeping the text the stop cut short; returns the reason it failed with. If this
    commit fails, the text stays in ``runtime.step_texts`` for the session's sweep."""
    await turn.checkpoint("settle.step")
    unrecorded, tools = text.unrecorded(), turn.tools

    def fail(tx: Transaction) -> None:
        settled_as = stops.settle_reason(tx, turn.turn_id, reason) or reason
        settlement.fail_step(tx, turn.session_id, turn.turn_id, step_id, settled_as, unrecorded, tools=tools)

    if await turn.journal.settled(fail):
        _recorded(turn, step_id, text)
    # Deferred: the text stays in ``runtime.step_texts`` until the turn's settlement is committed, for
    # the sweep should that transaction be written again without the deferred settlements.
    return reason
