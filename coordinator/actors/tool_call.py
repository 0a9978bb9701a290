"""The tool-call actor: checks permission, runs one tool, and settles the call exactly once.

Its ``session.tool.started`` is committed by its parent (the step, with the assistant message that
asked for the call, or ``execute`` for a nested call) before the actor starts. It settles as
``session.tool.succeeded`` or ``session.tool.failed``:

- a tool's own failure (``ToolFailure``, any exception, a ``[timeouts] tool`` deadline, a ``deny`` rule,
  a ``reject`` with a message) fails the call and the turn goes on;
- a stop of the turn fails the call with the turn's reason and whatever partial result the tool had,
  after every permission or form wait of the turn has been revoked; except a shutdown, which leaves a
  call that waits on a person unsettled, so that the next start restores its wait.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import attrs
import trio

from coordinator import permissions, timeslice
from coordinator.actors import settlement, stops, tool_services, wait
from coordinator.actors.context import SETTLE_SECONDS, TurnScope
from coordinator.actors.handle import ActorHandle
from coordinator.checkpoints import CURRENT_PROBE, PluginProbe
from coordinator.errors import Fenced, ToolFailure
from coordinator.logs import get_logger
from coordinator.reasons import StopReason, Timeout
from coordinator.records import Partial, PermissionRequest, Rule, ToolError
from coordinator.statuses import CallStatus
from coordinator.store import Transaction
from coordinator.store.rows import ToolCallRow
from coordinator.tools.base import CallResult, Capabilities, Tool, ToolContext, capabilities_of

log = get_logger(__name__)


@attrs.define
class Progress:
    """How far one call got: whether its tool began (``session.tool.failed`` says so: a call stopped
    after that may have taken effect), and the input a person approved it with, if they changed it."""

    started: bool = False
    edited_input: Any = None


@attrs.define
class Siblings:
    """The top-level calls of one step: how many still run, and the session's rules as the step's
    transaction that recorded them read them (each call's permission is decided by them, with no
    read of its own).

    The last of them to succeed has its success carried (``Journal.call_succeeded``) to the step's next
    transaction: the next step's start follows it at once, so nothing outside waits between them,
    and one commit a tool turn is saved."""

    running: int
    rules: list[Rule]

    @contextlib.contextmanager
    def one_running(self) -> Iterator[None]:
        """Around one of the calls, however it ends."""
        try:
            yield
        finally:
            self.running -= 1


async def run(
    turn: TurnScope,
    parent: ActorHandle,
    call: ToolCallRow,
    *,
    restore: PermissionRequest | None = None,
    permitted: bool = False,
    restored: bool = False,
    siblings: Siblings | None = None,
    task_status: trio.TaskStatus[ActorHandle] = trio.TASK_STATUS_IGNORED,
) -> CallResult:
    """Run ``call`` (stored as running, its start published) to its one settlement, and return it.

    ``restore``: the kept permission request of a resumed call, asked again; ``permitted``: a resumed
    call that was let run before the restart (a task call whose sub-agent's turn started);
    ``restored``: a resumed call, whose tool may be offered a little after the
    start (its MCP server still connecting);
    ``siblings``: the step's calls running beside this one (``Siblings``), None for a call whose
    success must be committed at once (a nested call, a resumed call).

    **Cancellation:** the call fails with the turn's reason and its partial result, or, for a shutdown
    while it waits on a person, is left for the next start; shielded, bounded by ``SETTLE_SECONDS``.
    """
    handle = parent.child("tool_call", call.call_id)
    # The tool's own run, under its deadline: nested calls of execute are its children (tool-call
    # actors, run by this very function), so a deadline that cuts them off reaches them with its reason.
    running = handle.child("tool_run", call.call_id)
    capabilities = capabilities_of(turn.tools, call.name)
    context = tool_services.build_context(
        turn, running, call, capabilities, run_nested=run, restored=restored
    )
    progress = Progress()
    with (
        turn.runtime.tracing.tool_call(call, handle) as span,
        handle.scope,
        stops.failing_on_error(turn, f"tool call {call.call_id}"),
        contextlib.nullcontext() if siblings is None else siblings.one_running(),
    ):
        task_status.started(handle)
        try:
            # Inside the try: an unexpected exception stops the turn with a typed Failure before the
            # cleanup below asks for the reason.
            with stops.failing_on_error(turn, f"tool call {call.call_id}"):
                output = await _permit_and_run(
                    turn, handle, running, call, context, progress, restore, permitted, restored, siblings
                )
        except ToolFailure as failure:
            error = ToolError(type=failure.type, message=failure.message, started=progress.started)
            stopped_for = handle.effective_reason()
            # A finished result is kept even if a stop arrives now: settle it shielded. A wait it left
            # pending (its own revocation failed) is revoked with it, for the turn's stop if any.
            partial = _partial(context, capabilities, failure.partial)
            with trio.move_on_after(SETTLE_SECONDS, shield=True):
                await _settle_failed(turn, call, error, partial, stopped_for=stopped_for)
            turn.waits.forget(call.call_id)
            # A failure that came with the turn's stop (the tool raised as it was cancelled) is the
            # stop's, on the span as in the wait and step spans around it.
            span.failed(error.type, error.message, stopped_for=stopped_for)
            turn.runtime.metrics.tool_call_settled(call.name, error.type)
            return CallResult(call_id=call.call_id, status=CallStatus.FAILED, error=error)
        except BaseException:
            with trio.move_on_after(SETTLE_SECONDS, shield=True):
                await _settle_stopped(turn, handle, call, context, capabilities, progress)
            raise
        with trio.move_on_after(SETTLE_SECONDS, shield=True):
            await _settle_succeeded(turn, call, output, last=siblings is not None and siblings.running == 1)
        span.succeeded()
        turn.runtime.metrics.tool_call_settled(call.name, CallStatus.SUCCEEDED)
        return CallResult(call_id=call.call_id, status=CallStatus.SUCCEEDED, output=output)
    raise AssertionError("a tool call's own scope is never stopped alone")


async def _permit_and_run(
    turn: TurnScope,
    handle: ActorHandle,
    running: ActorHandle,
    call: ToolCallRow,
    context: ToolContext,
    progress: Progress,
    restore: PermissionRequest | None,
    permitted: bool,
    restored: bool,
    siblings: Siblings | None,
) -> Any:
    tool = turn.tools.get(call.name)
    if tool is None and restored:
        tool = await turn.runtime.tools.wait_offered(turn.session_id, call.name, RESTORED_TOOL_SECONDS)
    if tool is None:
        why = turn.runtime.tools.why_missing(call.name)
        raise ToolFailure(type="error", message=why or f"unknown tool {call.name!r}")
    if not isinstance(call.input, dict):
        raise ToolFailure(type="error", message="tool input must be a JSON object")
    # A resumed task call was let run before the restart (its sub-agent's turn started): no asking.
    asked = False
    if not permitted:
        asked = await _check_permission(turn, handle, call, tool, restore, siblings, progress)
    return await _run_bounded(turn, running, tool, call, context, progress, record_start=asked)


RESTORED_TOOL_SECONDS = 30.0
"""Seconds a restored call waits for its tool's provider (an MCP server connecting at the start)."""


async def _check_permission(
    turn: TurnScope,
    handle: ActorHandle,
    call: ToolCallRow,
    tool: Tool,
    restore: PermissionRequest | None,
    siblings: Siblings | None,
    progress: Progress,
) -> bool:
    """Raise ``ToolFailure`` unless the call may run; return whether a person was asked. A person
    who approved it with a changed input leaves that input in ``progress``."""
    resource = restore.resource if restore is not None else tool.resource(call.input)
    if restore is None:
        configured = turn.runtime.config.permission
        session_rules = await _session_rules(turn, siblings)
        verdict = permissions.evaluate(configured, session_rules, call.name, resource)
        if verdict.effect == "deny":
            raise ToolFailure(type="denied", message=f"denied by {verdict.describe()}")
        if verdict.effect == "allow":
            return False
    asking = wait.PermissionWait(action=call.name, resource=resource, restore=restore)
    replied = await wait.run(
        turn, handle, asking, call_id=call.call_id, restorable=call.parent_call_id is None
    )
    # A reject without a message has just stopped the turn: let that stop arrive here, so this call
    # settles with the others (after every wait's revocation) rather than ahead of them.
    await timeslice.checkpoint()
    if replied.decision == "reject":
        message = replied.message or "the user declined this tool call"
        raise ToolFailure(type="declined", message=message)
    progress.edited_input = replied.input
    return True


async def _session_rules(turn: TurnScope, siblings: Siblings | None) -> list[Rule]:
    """The session's rules: as the step's record read them, else (a nested or resumed call) read now."""
    if siblings is None:
        return await turn.runtime.store.read(lambda reader: reader.session_rules(turn.session_id))
    # A scheduling point, as the read is: the chaos campaign's recorded runs replay by the order of
    # checkpoints across sessions (design/chaos.md).
    await timeslice.checkpoint()
    return siblings.rules


async def _run_bounded(
    turn: TurnScope,
    running: ActorHandle,
    tool: Tool,
    call: ToolCallRow,
    context: ToolContext,
    progress: Progress,
    *,
    record_start: bool,
) -> Any:
    """Run the tool under its ``[timeouts]`` deadline; a passed deadline fails the call as timeout."""
    limit = tool.deadline_seconds
    if limit is None and tool.deadline_scope is not None:
        limit = turn.runtime.config.timeouts.limit(tool.deadline_scope)
    if limit is not None:
        assert tool.deadline_scope is not None
        running.deadline_reason = Timeout.deadline(tool.deadline_scope, limit)
        running.scope.deadline = trio.current_time() + limit
    with running.scope:
        try:
            await turn.checkpoint("tool.start")
            if record_start:
                # A call that waited on a person is restored by the next start while its tool has not
                # started (its reply applied then): so the start is committed, fenced, first.
                await turn.journal.write(lambda tx: tx.mark_tool_started(call.session_id, call.call_id))
            # A tool acts outside the process: its start must be durable first, or after a power loss
            # the call could look never started and run twice.
            await turn.runtime.store.durable()
            # And fenced, with no await between the check and the start: the last fenced commit may
            # be long past (a permission wait), and another instance may have taken the turn over
            # and restored this very call meanwhile (design/model/README.md, finding 1).
            await turn.check_claim()
            progress.started = True
            tool_input = call.input if progress.edited_input is None else progress.edited_input
            with _probed(turn, call, tool):
                output = await _run_publishing_progress(turn, tool, tool_input, context)
            await turn.checkpoint("tool.end")
            return output
        except (ToolFailure, Fenced):
            raise
        except Exception as exc:
            log.info("tool_raised", call_id=call.call_id, exc_info=exc)
            raise ToolFailure(type="error", message=f"{type(exc).__name__}: {exc}") from exc
    assert running.scope.cancelled_caught and limit is not None
    raise ToolFailure(type="timeout", message=f"the {tool.deadline_scope} deadline of {limit:g}s passed")


@contextlib.contextmanager
def _probed(turn: TurnScope, call: ToolCallRow, tool: Tool) -> Iterator[None]:
    """With a fault injector that observes the tool, let its awaits and declared checkpoints reach it."""
    injector = turn.runtime.injector
    if injector is None or not injector.observes(tool):
        yield
        return
    probe = PluginProbe(injector=injector, turn=turn, tool=call.name, task=trio.lowlevel.current_task())
    token = CURRENT_PROBE.set(probe)
    try:
        yield
    finally:
        CURRENT_PROBE.reset(token)


async def _run_publishing_progress(turn: TurnScope, tool: Tool, tool_input: Any, context: ToolContext) -> Any:
    try:
        async with trio.open_nursery() as progress:
            progress.start_soon(tool_services.serve_progress, turn, context)
            output = await tool.run(context, tool_input)
            progress.cancel_scope.cancel(reason="the tool returned: no more progress")
    except BaseExceptionGroup as group:
        # The tool's own exception, alone in the group the progress nursery wrapped it in, or beside
        # the Cancelled of a stop or a deadline that came while the tool was raising it (chaos F18):
        # the tool failed first, and that is its call's failure. The cancellation is not lost: its
        # scope stays cancelled, so the next cancel point outside the settlement raises it again.
        errors = [e for e in group.exceptions if not isinstance(e, trio.Cancelled)]
        if len(errors) == 1 and isinstance(errors[0], Exception):
            raise errors[0] from None  # noqa: ASYNC123 (the tool's error; nothing else is lost)
        raise
    return output


def _partial(context: ToolContext, capabilities: Capabilities, reported: Any = None) -> Partial | None:
    """What the call had done: logs and finished nested calls (execute), and its latest progress.

    None when it had done nothing, unless its tool ``keeps_partial_result``.
    """
    progress = reported if reported is not None else context.latest_progress
    done_nothing = progress is None and not context.logs and not context.calls
    if done_nothing and not capabilities.keeps_partial_result:
        return None
    return Partial(logs=list(context.logs), calls=list(context.calls), progress=progress)


async def _settle_succeeded(turn: TurnScope, call: ToolCallRow, output: Any, *, last: bool) -> None:
    """Tell the journal the call succeeded; ``last``: it ends its step."""
    tools = turn.tools

    def succeed(tx: Transaction) -> None:
        # Idempotent, as a carried body must be (``Journal.call_succeeded``): a settled call is not settled again.
        waits = turn.waits.may_have_waits(call.call_id)
        settlement.settle_call(tx, call, tools=tools, output=output, stopped_for=None, waits=waits)

    await turn.journal.call_succeeded(succeed, ends_its_step=last)


async def _settle_failed(
    turn: TurnScope,
    call: ToolCallRow,
    error: ToolError,
    partial: Partial | None,
    *,
    stopped_for: StopReason | None,
) -> None:
    tools = turn.tools
    await turn.journal.settled(
        lambda tx: settlement.settle_call(
            tx,
            call,
            tools=tools,
            error=error,
            partial=partial,
            stopped_for=stopped_for,
            waits=turn.waits.may_have_waits(call.call_id),
        )
    )


async def _settle_stopped(
    turn: TurnScope,
    handle: ActorHandle,
    call: ToolCallRow,
    context: ToolContext,
    capabilities: Capabilities,
    progress: Progress,
) -> None:
    reason = handle.reason_or_failure()
    if turn.waits.is_kept(call.call_id):
        # A restored call stopped before it re-opened its kept wait: that wait is revoked now, with
        # the stop's reason, and counts among the waits every call's failure comes after.
        if not await _kept_for_restore(turn, call, reason):
            await turn.journal.settled(
                lambda tx: settlement.revoke_waits_of_call(tx, call.session_id, call.call_id, reason)
            )
        turn.waits.forget(call.call_id)
    await turn.waits.settled()
    await turn.checkpoint("settle.tool")
    if await _kept_for_restore(turn, call, reason):
        log.info("tool_call_kept", call_id=call.call_id, reason=reason.type)
        return
    error = ToolError(
        type=reason.tool_error_type(call.call_id), message=reason.describe(), started=progress.started
    )
    await _settle_failed(turn, call, error, _partial(context, capabilities), stopped_for=reason)
    turn.runtime.metrics.tool_call_settled(call.name, error.type)


async def _kept_for_restore(turn: TurnScope, call: ToolCallRow, reason: StopReason) -> bool:
    if not reason.resumable:
        # Only a shutdown keeps anything: any other stop settles with no read (a read of nothing still
        # cost a transaction, several round trips on PostgreSQL).
        await timeslice.checkpoint()
        return False
    return await turn.runtime.store.read(lambda reader: settlement.kept_for_restore(reader, call, reason))
