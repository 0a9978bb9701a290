"""Settling tool calls and turns in the store: what each actor's cleanup and the session's sweep write.

These functions run inside one store transaction (their ``tx``) and never await, so a settlement is
atomic. They keep the order the contract gives, by construction: a call settles only after its own
waits are revoked and its nested calls are settled.

They have only the stored calls: what a call's tool can do (its ``Capabilities``) is looked up by the
call's name in ``tools``, the runtime's tool table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from coordinator import events, wire
from coordinator.actors import revocation, steers, stops
from coordinator.clock import now_rfc3339
from coordinator.ids import new_id
from coordinator.reasons import Failure, ParentLink, Shutdown, StopReason
from coordinator.records import NestedCall, Partial, PermissionRequest, ToolError
from coordinator.statuses import CallStatus, ClaimState, FormStatus, PermissionStatus, StepStatus, TurnStatus
from coordinator.store import Reader, Transaction
from coordinator.store.rows import ToolCallRow
from coordinator.tools.base import Tool, capabilities_of

# A finished nested call's output in a partial result and in progress events is a preview of at most
# this many characters (of its JSON); the full output stays in the store, on the nested call's row.
PREVIEW_CHARS = 2000


def preview(output: Any) -> Any:
    """``output`` itself when its JSON is short, else its JSON text cut to ``PREVIEW_CHARS``."""

    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    if len(text) <= PREVIEW_CHARS:
        return output
    return text[:PREVIEW_CHARS] + f"... [{len(text) - PREVIEW_CHARS} characters truncated]"


def waits_on_a_person(read: Reader, session_id: str, call_id: str) -> bool:
    """Does the call have a pending permission request or form?"""
    return bool(
        read.permission_of_call(session_id, call_id, pending=True)
        or read.form_of_call(session_id, call_id, pending=True)
    )


def runs_a_sub_agent(read: Reader, call: ToolCallRow) -> bool:
    """Has the task call started its sub-agent's turn (which may have ended since)?"""
    return read.turn_of_task_call(call.session_id, call.call_id) is not None


def restorable(read: Reader, call: ToolCallRow) -> bool:
    """Can the next start restore this unsettled call where it left off?

    A top-level call whose wait on a person is still pending, or was answered while no wait was live
    (a reply accepted by another node, or while the turn was suspended): a permission replied to
    whose tool never started, a form submitted or dismissed. Whatever else it did may have acted
    outside the process, so it cannot be restored (design/model/README.md, finding 3). A nested
    call of ``execute`` is never restorable: its script's process is gone.
    """
    if call.parent_call_id is not None:
        return False
    session_id, call_id = call.session_id, call.call_id
    if asked_by_a_server(read, call):
        return False
    if waits_on_a_person(read, session_id, call_id):
        return True
    request = read.permission_of_call(session_id, call_id, pending=False)
    if request is not None:
        return request.status == PermissionStatus.REPLIED and not read.tool_started(session_id, call_id)
    form = read.form_of_call(session_id, call_id, pending=False)
    return form is not None and form.status in (FormStatus.SUBMITTED, FormStatus.CANCELLED)


def asked_by_a_server(read: Reader, call: ToolCallRow) -> bool:
    """Has an MCP server asked the call a question the 2025 way? The question lived in the
    connection, which is gone after a restart, and the call with it: never restored. (One asked the
    2026-07-28 way is kept with what its retry needs, and restored like any form.)"""
    form = read.form_of_call(call.session_id, call.call_id, pending=False)
    return form is not None and form.source is not None and read.form_resume(form.id) is None


def restored_request(read: Reader, call: ToolCallRow) -> PermissionRequest | None:
    """The permission request a restorable call restores: pending (asked again) or replied (applied)."""
    request = read.permission_of_call(call.session_id, call.call_id, pending=False)
    restorable = (PermissionStatus.PENDING, PermissionStatus.REPLIED)
    return request if request is not None and request.status in restorable else None


def kept_for_restore(read: Reader, call: ToolCallRow, reason: StopReason) -> bool:
    """A shutdown keeps a restorable call unsettled, and its wait pending: the next start restores it;
    and a top-level task call whose sub-agent's turn started: the next start resumes that turn inside
    it (or reads how it ended)."""
    if not reason.resumable:
        return False
    return restorable(read, call) or (call.parent_call_id is None and runs_a_sub_agent(read, call))


def revoke_waits_of_call(tx: Transaction, session_id: str, call_id: str, reason: StopReason) -> None:
    """Revoke the call's pending permission request and form, each with one event."""
    request, form = tx.pending_waits_of_call(session_id, call_id)
    if request is not None:
        revocation.revoke_permission(tx, request, reason)
    if form is not None:
        revocation.revoke_form(tx, form, reason)


def settle_call(
    tx: Transaction,
    call: ToolCallRow,
    *,
    tools: Mapping[str, Tool],
    output: Any = None,
    error: ToolError | None = None,
    partial: Partial | None = None,
    stopped_for: StopReason | None,
    waits: bool = True,
) -> bool:
    """Settle ``call`` (succeeded without ``error``, else failed), after whatever it leaves behind.

    Its still-running nested calls fail first and its own pending waits are revoked, so children
    always settle before their parent, even when a child's own settlement could not be written.
    A call ``stopped_for`` a reason leaves them that reason (a wait whose own revocation could not be
    written is still revoked for the stop, chaos F15); otherwise they are revoked as leftovers.
    ``waits=False``: the call's actor knows it never had a wait (``TurnScope.may_have_waits``), so
    its two reads for one are skipped. Returns False when the call was settled already.
    """
    leftover = stopped_for or Failure.left_over(call.call_id)
    # Only a task call has a sub-agent's turn, only an execute call nested calls: a plain call's
    # settlement skips the reads for them. A call of a tool configured away since (``None``) may have
    # either, so both are read for it.
    tool = tools.get(call.name)
    if tool is None or tool.capabilities.runs_sub_agent:
        settle_sub_agent_turn(tx, call, stopped_for, tools=tools)
    if tool is None or tool.capabilities.runs_nested_calls:
        children = [c for c in tx.tool_calls_of_turn(call.turn_id) if c.parent_call_id == call.call_id]
        fail_calls(tx, [c for c in children if c.status == CallStatus.RUNNING], leftover, tools=tools)
    if waits:
        revoke_waits_of_call(tx, call.session_id, call.call_id, leftover)
    if not tx.settle_tool_call(call.session_id, call.call_id, output=output, error=error, partial=partial):
        return False
    if error is None:
        tx.emit(events.tool_succeeded(call.session_id, call.call_id, output))
    else:
        tx.emit(events.tool_failed(call.session_id, call.call_id, error, partial))
    return True


def fail_calls(
    tx: Transaction,
    calls: list[ToolCallRow],
    reason: StopReason,
    error: ToolError | None = None,
    *,
    tools: Mapping[str, Tool],
) -> None:
    """Fail calls their actors could not settle, with what the store knows each had done.

    Each partial result is read before any of the calls is failed, so that it lists the nested calls
    that had finished before the stop, not those this very stop cuts off. ``error`` overrides the one
    ``reason`` implies (a restart fails calls as ``interrupted``).
    """
    partials = {call.call_id: stored_partial(tx, call, tools) for call in calls}
    for call in children_first(calls):
        started = tool_may_have_started(tx, call)
        revoke_waits_of_call(tx, call.session_id, call.call_id, reason)
        failure = error or ToolError(
            type=reason.tool_error_type(call.call_id), message=reason.describe(), started=started
        )
        settle_call(tx, call, tools=tools, error=failure, partial=partials[call.call_id], stopped_for=reason)


def tool_may_have_started(read: Reader, call: ToolCallRow) -> bool:
    """Whether the call's tool may have begun, as the store knows it: a call that asked a person
    began only if its start was recorded (``mark_tool_started``); any other had nothing to wait for
    before its tool, so it is taken to have begun (it may have taken effect)."""
    if read.permission_of_call(call.session_id, call.call_id, pending=False) is None:
        return True
    return read.tool_started(call.session_id, call.call_id)


def stored_partial(tx: Transaction, call: ToolCallRow, tools: Mapping[str, Tool]) -> Partial | None:
    """The partial result as the store has it: finished nested calls, logged lines, last progress.

    None when the call had done nothing, unless its tool ``keeps_partial_result``.
    """
    children = [c for c in tx.tool_calls_of_turn(call.turn_id) if c.parent_call_id == call.call_id]
    finished = [
        NestedCall(
            call_id=c.call_id,
            name=c.name,
            input=c.input,
            status=c.status,
            output=preview(c.output) if c.status == CallStatus.SUCCEEDED else _error_body(c.error),
        )
        for c in children
        if c.status in (CallStatus.SUCCEEDED, CallStatus.FAILED)
    ]
    logs = tx.logged_lines(call.session_id, call.call_id)
    done_nothing = not finished and not logs and call.progress is None
    if done_nothing and not capabilities_of(tools, call.name).keeps_partial_result:
        return None
    return Partial(logs=logs, calls=finished, progress=call.progress)


def _error_body(error: ToolError | None) -> Any:
    return None if error is None else wire.unstructure(error)


def children_first(calls: list[ToolCallRow]) -> list[ToolCallRow]:
    """Nested calls before the calls that made them (deeper first; stable within a depth)."""
    depth = {c.call_id: c.call_id.count(".") for c in calls}
    return sorted(calls, key=lambda c: -depth[c.call_id])


def settle_sub_agent_turn(
    tx: Transaction, call: ToolCallRow, stopped_for: StopReason | None, *, tools: Mapping[str, Tool]
) -> None:
    """Settle the sub-agent turn a task call left unsettled, before the call itself: the turn's own
    stop if one was committed, else the stop of the call's turn with ``parent`` naming the call, else
    (the call failed on its own: the sub-agent's settlement could not be written) a failure of its own.

    In a live stop the sub-agent's turn has settled itself inside its call; this settles what a
    crash (or a failed commit) left, e.g. a parent's stop settled at the next start.
    """
    sub_turn = tx.turn_of_task_call(call.session_id, call.call_id)
    if sub_turn is None or sub_turn.status == TurnStatus.SETTLED:
        return
    link = ParentLink(session_id=call.session_id, call_id=call.call_id)
    sub_reason = stops.sub_agent_reason(sub_turn, stopped_for, link)
    sweep(tx, sub_turn.session_id, sub_turn.id, sub_reason, tools=tools)
    end_turn(tx, sub_turn.session_id, sub_turn.id, sub_reason)


def end_turn(tx: Transaction, session_id: str, turn_id: str, reason: StopReason) -> None:
    """A stopped turn's terminal event, then its claim suspended (shutdown) or released with idle."""
    tx.emit(events.execution_terminal(session_id, turn_id, reason))
    if reason.resumable:
        tx.settle_turn(turn_id, TurnStatus.SUSPENDED, reason, None)
        tx.set_claim_state(session_id, ClaimState.SUSPENDED)
    else:
        assert reason.outcome is not None
        finish_turn(tx, session_id, turn_id, reason.outcome, reason)


def finish_turn(
    tx: Transaction, session_id: str, turn_id: str, outcome: str, reason: StopReason | None
) -> None:
    """Settle the turn with ``outcome``, release the claim, and publish ``session.idle``."""
    tx.sync_soon()  # a person, or a parent's call, waits for the idle
    tx.settle_turn(turn_id, TurnStatus.SETTLED, reason, outcome)
    tx.set_claim_state(session_id, ClaimState.RELEASED)
    tx.set_last_outcome(session_id, outcome)
    tx.emit(events.session_idle(session_id, turn_id, outcome))
    # What was sent into the turn and never reached it runs next as turns of their own.
    steers.queue_pending(tx, turn_id)


def fail_step(
    tx: Transaction,
    session_id: str,
    turn_id: str,
    step_id: str,
    reason: StopReason,
    partial_text: str = "",
    *,
    keep: Keep | None = None,
    tools: Mapping[str, Tool],
) -> None:
    """Fail a step after every call it started that is still unsettled (calls it never got to start
    an actor for, calls whose own settlement could not be written): children before parents.

    ``partial_text`` is what the model had streamed when the stop cut it short: it is kept in the
    history as an assistant text part with the stop's status, and reported on ``session.step.failed``,
    so the next request of the session sends it as the assistant's content.

    A step settles once: one settled already is left as it is (a step that had carried its success,
    ``Journal.step_succeeded``, when a stop reached it: the carried body is written first).
    """
    if tx.step_running(turn_id, step_id):
        _fail_running_step(tx, session_id, turn_id, step_id, reason, partial_text, keep=keep, tools=tools)


def _fail_running_step(
    tx: Transaction,
    session_id: str,
    turn_id: str,
    step_id: str,
    reason: StopReason,
    partial_text: str,
    *,
    keep: Keep | None,
    tools: Mapping[str, Tool],
) -> None:
    """``fail_step`` of a step known to be running."""
    calls = tx.running_calls_of_step(turn_id, step_id)
    kept = keep or _kept_for(tx, reason)
    fail_calls(tx, [c for c in calls if not kept(c)], reason, tools=tools)
    keep_partial_text(tx, session_id, turn_id, partial_text, reason)
    tx.settle_step(step_id, StepStatus.FAILED, reason)
    tx.emit(events.step_failed(session_id, turn_id, step_id, reason, partial_text or None))


def keep_partial_text(tx: Transaction, session_id: str, turn_id: str, text: str, reason: StopReason) -> None:
    """Keep text a stop cut short as an assistant message, its part's status the stop's word."""
    if text:
        message_id = new_id("msg")
        tx.insert_message(message_id, session_id, turn_id, "assistant", now_rfc3339())
        tx.add_text_part(message_id, text, reason.text_status)


Keep = Callable[[ToolCallRow], bool]
"""Which unsettled calls a settlement leaves for a restore (their waits stay pending)."""


def _kept_for(read: Reader, reason: StopReason) -> Keep:
    return lambda call: kept_for_restore(read, call, reason)


def sweep(
    tx: Transaction,
    session_id: str,
    turn_id: str,
    reason: StopReason,
    partial_texts: Mapping[str, str] | None = None,
    *,
    keep: Keep | None = None,
    error: ToolError | None = None,
    tools: Mapping[str, Tool],
) -> None:
    """Settle, with ``reason``, whatever of the turn is still unsettled, children before parents:
    every pending wait revoked, then every call failed (nested calls first), then every step.

    This is the one settlement path of a turn's leftovers. In a clean live stop every child has
    settled itself and this finds nothing; it settles what a child could not (its cleanup ran out of
    time or its commit failed), a stop whose settlement a crash cut short (at the next start), and
    what a dead process left running in a turn that resumes (``recover``). ``keep`` says which calls
    it leaves for a restore (default: what a shutdown keeps, ``kept_for_restore``); ``error``
    overrides the tool error the reason implies. ``partial_texts`` holds, by step id, the streamed
    text of steps whose own failure could not be written. ``tools``: the runtime's tool table.
    """
    if not tx.has_leftovers(turn_id):
        return  # one read where there is nothing to settle, instead of four
    kept = keep or _kept_for(tx, reason)
    running = children_first(tx.running_calls_of_turn(turn_id))
    kept_ids = {c.call_id for c in running if kept(c)}
    for request in tx.pending_permissions(turn_id=turn_id):
        if request.call_id not in kept_ids:
            revocation.revoke_permission(tx, request, reason)
    for form in tx.pending_forms(turn_id=turn_id):
        if form.call_id not in kept_ids:
            revocation.revoke_form(tx, form, reason)
    fail_calls(tx, [call for call in running if call.call_id not in kept_ids], reason, error, tools=tools)
    for step_id in tx.running_steps(turn_id):
        # From this process's memory, else what a dead one saved (a stop settled at the next start).
        text = (partial_texts or {}).get(step_id) or tx.streamed_text(step_id)
        _fail_running_step(tx, session_id, turn_id, step_id, reason, text, keep=kept, tools=tools)


@attrs.frozen
class Recovered:
    """What ``recover`` kept of a resumed turn, for the start to continue."""

    # Calls waiting on a person, or answered while no wait was live: restored, with the permission
    # request they restore (None for a form).
    restorable: list[tuple[ToolCallRow, PermissionRequest | None]] = attrs.Factory(list)
    # Task calls whose sub-agent's turn started: each resumes that turn inside it.
    sub_agents: list[ToolCallRow] = attrs.Factory(list)


# How a call that a dead process left running fails when its turn resumes.
RESTART_ERROR = ToolError(
    type="interrupted", message="the server restarted while this tool call was running", started=True
)


def recover(tx: Transaction, session_id: str, turn_id: str, *, tools: Mapping[str, Tool]) -> Recovered:
    """Settle what a previous process left running in a turn that resumes (after a shutdown or a
    crash), through ``sweep``, exactly as a live stop settles: a restart fails it (``interrupted``).
    Keeps and returns the calls a start can continue: those ``restorable``, and task calls whose
    sub-agent's turn started. A nested call's pending wait is revoked: its script is gone.
    """
    recovered = Recovered()
    for call in tx.tool_calls_of_turn(turn_id):
        if call.status != CallStatus.RUNNING:
            continue
        if restorable(tx, call):
            recovered.restorable.append((call, restored_request(tx, call)))
        elif call.parent_call_id is None and runs_a_sub_agent(tx, call):
            recovered.sub_agents.append(call)
    kept = {c.call_id for c, _ in recovered.restorable} | {c.call_id for c in recovered.sub_agents}
    # A server's question asked the 2025 way dies with the connection that asked it: revoked as at
    # a shutdown, before the turn goes on (its call fails as interrupted below).
    for form in tx.pending_forms(turn_id=turn_id):
        if form.source is not None and tx.form_resume(form.id) is None:
            revocation.revoke_form(tx, form, Shutdown.of_coordinator())
    restart = Failure.restarted()
    sweep(
        tx, session_id, turn_id, restart, keep=lambda c: c.call_id in kept, error=RESTART_ERROR, tools=tools
    )
    return recovered
