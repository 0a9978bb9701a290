"""What a running tool may ask of its tool-call actor: progress, forms, nested calls and log lines."""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import weakref
from collections.abc import Iterator
from typing import Any, Protocol

import attrs
import trio

from coordinator import events, wire
from coordinator.actors import task, wait
from coordinator.actors.context import TurnRunner, TurnScope
from coordinator.actors.handle import ActorHandle
from coordinator.actors.settlement import preview
from coordinator.clock import now_rfc3339
from coordinator.errors import ToolFailure
from coordinator.event_payloads import ServerProgress
from coordinator.records import NestedCall, Question
from coordinator.statuses import CallStatus, FormStatus
from coordinator.store import Reader, Transaction
from coordinator.store.rows import ToolCallRow
from coordinator.tools import execute_script
from coordinator.tools.base import (
    CallResult,
    Capabilities,
    FormReply,
    KeptQuestion,
    ServerAsks,
    ToolContext,
    capabilities_of,
)
from coordinator.tools.process_group import GroupOwner, StoredGroups


class CallRunner(Protocol):
    """Runs a stored call as a tool-call actor under ``parent`` to its settlement (``tool_call.run``)."""

    async def __call__(self, turn: TurnScope, parent: ActorHandle, call: ToolCallRow) -> CallResult: ...


def build_context(
    turn: TurnScope,
    handle: ActorHandle,
    call: ToolCallRow,
    capabilities: Capabilities,
    run_nested: CallRunner,
    restored: bool = False,
) -> ToolContext:
    """The context the tool of ``call`` runs with; its state is read back for the partial result.

    It offers the services the tool's ``capabilities`` call for: a script's run (``coordinator/tools/execute_script.py``),
    its nested calls (each run by ``run_nested``: a tool-call actor under this one) and its log lines
    to a tool that ``runs_nested_calls``; a sub-agent's turn to one that ``runs_sub_agent`` (where the
    runtime runs sub-agents); forms, progress and the records of its process groups to any; the
    question it asked before a restart to a call ``restored`` after one.
    """
    context = ToolContext(
        session_id=turn.session_id,
        call_id=call.call_id,
        workdir=turn.runtime.workdir,
        report_progress=lambda detail: None,
    )
    services = _Services(
        turn=turn, handle=handle, call=call, context_ref=weakref.ref(context), run_nested=run_nested
    )
    context.report_progress = services.report_progress
    # A stop reaches the tool through its run's handle: the turn's reason, or its own deadline's.
    context.stop_reason = handle.effective_reason
    context.open_form = services.open_form
    context.publish_progress = services.publish_progress
    if restored:
        # Only a call restored after a restart can have asked a question before: no read for others.
        context.kept_question = services.kept_question
    owner = GroupOwner(instance_id=turn.runtime.instance_id, session_id=turn.session_id, call_id=call.call_id)
    context.process_groups = StoredGroups(turn.runtime.store, owner)
    if turn.runtime.lives is not None:
        context.keep_for_session = functools.partial(turn.runtime.lives.keep, turn.session_id)
    if capabilities.runs_sub_agent and turn.runtime.run_turn is not None:
        context.run_task = functools.partial(services.run_task, turn.runtime.run_turn)
    if capabilities.runs_nested_calls:
        context.call_nested = services.call_nested
        context.write_log = services.write_log
        context.run_script = functools.partial(execute_script.run, context)
    return context


@attrs.define(kw_only=True, eq=False, repr=False)
class _Services:
    """The services of one call's tool context, bound to the call; owned by its tool-call actor.

    They refer to their context weakly: the context holds their bound methods, and a cycle between
    the two kept the call's handles, scopes and rows alive until the collector ran (most of the
    garbage a turn left, design/benchmarks.md). Whoever calls a service holds the context.
    """

    turn: TurnScope
    handle: ActorHandle
    call: ToolCallRow
    context_ref: weakref.ReferenceType[ToolContext]
    run_nested: CallRunner
    numbers: Iterator[int] = attrs.Factory(lambda: itertools.count(1))

    def __repr__(self) -> str:  # the context's bound services render this in every traceback
        return f"_Services(call_id={self.call.call_id!r})"

    @property
    def context(self) -> ToolContext:
        context = self.context_ref()
        if context is None:  # a bound service kept past its context: nothing to report to
            raise RuntimeError(f"the tool context of call {self.call.call_id!r} is gone")
        return context

    def report_progress(self, detail: Any) -> None:
        self.context.latest_progress = detail
        self.context.progress_changed.set()

    async def open_form(self, questions: list[Question], *, asked: ServerAsks | None = None) -> FormReply:
        turn, call = self.turn, self.call
        asking = wait.QuestionWait(questions=questions, server_asks=asked)
        # A server's question asked the 2025 way cannot outlive its connection: a shutdown revokes it.
        restorable = call.parent_call_id is None and (asked is None or asked.resume is not None)
        with _deadline_paused(self.handle.scope):
            form = await wait.run(turn, self.handle, asking, call_id=call.call_id, restorable=restorable)
        if form.status == FormStatus.SUBMITTED:
            return FormReply(answers=dict(form.answers or {}))
        row = await turn.runtime.store.read(lambda reader: reader.form_wait_row(form.id))
        return FormReply(answers=None, message=None if row is None else row.message)

    async def call_nested(self, name: str, input: Any) -> CallResult:
        turn, call = self.turn, self.call
        if not capabilities_of(turn.tools, name).nestable:
            raise ToolFailure(type="error", message=f"{name} cannot be called from a script")
        await turn.checkpoint("nested.call")
        nested = await _start_nested(turn, call, f"{call.call_id}.{next(self.numbers)}", name, input)
        result = await self.run_nested(turn, self.handle, nested)
        await _record_nested(turn, self.context, nested, result)
        return result

    async def run_task(
        self, run_turn: TurnRunner, prompt: str, title: str, session_id: str | None
    ) -> dict[str, Any]:
        # The sub-agent's id is in the call's partial result from its start: a call that stops (or
        # fails) still tells the model which sub-agent to come back to.
        def started(child_id: str) -> None:
            self.context.remember_progress({"session_id": child_id})

        return await task.run(
            self.turn,
            self.handle,
            self.call,
            prompt=prompt,
            title=title,
            session_id=session_id,
            started=started,
            run_turn=run_turn,
        )

    async def kept_question(self) -> KeptQuestion | None:
        """The server's 2026-07-28 question this call asked before a restart, with what its retry
        needs; None for a call that asked none (every call not restored)."""
        session_id, call_id = self.call.session_id, self.call.call_id

        def read(reader: Reader) -> KeptQuestion | None:
            form = reader.form_of_call(session_id, call_id, pending=False)
            if form is None or form.source is None or form.status == FormStatus.REVOKED:
                return None
            resume = reader.form_resume(form.id)
            return None if resume is None else KeptQuestion(form=form, resume=resume)

        return await self.turn.runtime.store.read(read)

    async def publish_progress(self, progress: ServerProgress) -> None:
        self.context.latest_progress = wire.unstructure(progress)
        published = events.tool_progress_server(self.turn.session_id, self.call.call_id, progress)

        def store(tx: Transaction) -> None:
            tx.set_tool_progress(self.call.session_id, self.call.call_id, self.context.latest_progress)
            tx.emit(published)

        await self.turn.journal.write(store)

    async def write_log(self, line: str) -> None:
        self.context.logs.append(line)
        logged = events.tool_progress_log(self.turn.session_id, self.call.call_id, line)
        await self.turn.journal.write(lambda tx: tx.emit(logged))


@contextlib.contextmanager
def _deadline_paused(scope: trio.CancelScope) -> Iterator[None]:
    """While a person answers a form, the tool's deadline does not run: what was left of it is left
    again once the form is answered."""
    if scope.deadline == math.inf:
        yield
        return
    left = scope.deadline - trio.current_time()
    scope.deadline = math.inf
    try:
        yield
    finally:
        scope.deadline = trio.current_time() + left


async def _start_nested(
    turn: TurnScope, parent: ToolCallRow, call_id: str, name: str, input: Any
) -> ToolCallRow:
    if not isinstance(name, str) or not name:
        raise ToolFailure(type="error", message="a nested call needs a tool name")
    nested = ToolCallRow(
        session_id=turn.session_id,
        call_id=call_id,
        turn_id=turn.turn_id,
        step_id=parent.step_id,
        parent_call_id=parent.call_id,
        model_call_id=None,
        name=name,
        input=input,
        status=CallStatus.RUNNING,
        output=None,
        error=None,
        partial=None,
        progress=None,
    )
    started = events.tool_started(turn.session_id, turn.turn_id, call_id, name, input, parent.call_id)

    def start(tx: Transaction) -> None:
        tx.insert_tool_call(nested, now_rfc3339())
        tx.emit(started)

    await turn.journal.write(start)
    return nested


async def _record_nested(
    turn: TurnScope, context: ToolContext, nested: ToolCallRow, result: CallResult
) -> None:
    """Add a settled nested call to the caller's finished calls and publish it as progress."""
    output = preview(result.output) if result.status == CallStatus.SUCCEEDED else _error_body(result)
    finished = NestedCall(
        call_id=nested.call_id, name=nested.name, input=nested.input, status=result.status, output=output
    )
    context.calls.append(finished)
    progress = events.tool_progress_nested(turn.session_id, context.call_id, finished)
    await turn.journal.write(lambda tx: tx.emit(progress))


# At most one progress commit per call in this many seconds; in between, only the latest detail is kept.
PROGRESS_SECONDS = 0.2


async def serve_progress(turn: TurnScope, context: ToolContext) -> None:
    """For as long as the tool runs: store and publish its latest progress detail.

    Details reported faster than ``PROGRESS_SECONDS`` are coalesced: only the latest is written. A stop
    does not need this task: the call's partial result carries the latest detail anyway.
    """
    while True:
        await context.progress_changed.wait()
        context.progress_changed = trio.Event()
        detail = context.latest_progress
        await turn.journal.write(functools.partial(_store_progress, turn.session_id, context.call_id, detail))
        await trio.sleep(PROGRESS_SECONDS)


def _error_body(result: CallResult) -> Any:
    return None if result.error is None else wire.unstructure(result.error)


def _store_progress(session_id: str, call_id: str, detail: Any, tx: Transaction) -> None:
    tx.set_tool_progress(session_id, call_id, detail)
    tx.emit(events.tool_progress_detail(session_id, call_id, detail))
