"""A call of an MCP server's tool, run inside the tool-call actor that makes it.

The call's stop is the actor's: an interrupt, a decline, a deadline, a shutdown or a parent's stop
cancels the actor's scope. The SDK call itself runs shielded from that cancellation, so that the
stop reaches the server in order: first the server's pending question, if any, is answered
``cancel`` (and that answer sent), then the SDK call is cancelled, which sends the server
``notifications/cancelled``. The call settles at once with the stop's reason; it never waits for
the server to acknowledge, so a server that ignores the cancellation never holds the turn, and a
result that arrives after the stop is dropped.

The server's questions (``elicitation/create``) and progress notifications arrive in the SDK's own
task; both are carried into the call's actor, where a question becomes a form of the call and each
progress report a ``session.tool.progress`` event, in order, before the call settles.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator
from typing import Any

import attrs
import mcp.types as types
import trio
from mcp import ClientSession, MCPError

from coordinator.errors import ToolFailure
from coordinator.event_payloads import ServerProgress
from coordinator.logs import get_logger
from coordinator.mcp.questions import questions_of
from coordinator.mcp.server import McpServer
from coordinator.mcp.transport import Outbox
from coordinator.tools.base import ServerAsks, ToolContext

log = get_logger(__name__)

ANSWER_SECONDS = 1.0
"""Seconds a stop waits for a pending question's ``cancel`` to be sent before it cancels the call."""


async def run_call(server: McpServer, tool: str, context: ToolContext, arguments: dict[str, Any]) -> Any:
    """Call ``tool`` on ``server`` and return ``{content, structured?}``.

    **Raises:** ``ToolFailure`` (type ``error``) when the server is not ready, answers an error,
    reports ``isError`` (the message is the result's text, which the model sees), or goes away.

    **Cancellation:** as the module says; the stop's own ``Cancelled`` propagates.
    """
    session = server.ready_session()
    asker = Asker(server=server.name)
    async with _turn_to_ask(server, asker):
        progress_in, progress_out = trio.open_memory_channel[ServerProgress](math.inf)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(asker.serve, context)
            nursery.start_soon(_publish_progress, context, progress_out)

            async def report(progress: float, total: float | None, message: str | None) -> None:
                with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
                    progress_in.send_nowait(ServerProgress(progress=progress, total=total, message=message))
                await trio.lowlevel.checkpoint()

            attempt = _Attempt(server, session, tool, arguments, asker, report, nursery)
            # Caught here, not outside: the nursery would wrap the failure in a group.
            failure: ToolFailure | None = None
            try:
                result = await (_rounds(attempt, context) if server.modern else attempt.call())
            except ToolFailure as failed:
                failure = failed
            finally:
                # What the server reported before its result is published before the call settles.
                progress_in.close()
                asker.close()
    if failure is not None:
        raise failure
    return _output(server, result)


@contextlib.asynccontextmanager
async def _turn_to_ask(server: McpServer, asker: Asker) -> AsyncIterator[None]:
    """The call's turn on the connection: a question the server asks now is this call's. A
    2026-07-28 server's question is its call's own result: its calls need no turns."""
    if server.modern:
        yield
        return
    async with server.calls:
        server.asking = asker
        try:
            yield
        finally:
            server.asking = None


@attrs.frozen
class _Attempt:
    """How the call is sent to the server: once, or (2026-07-28) again with answers to its questions."""

    server: McpServer
    session: ClientSession
    tool: str
    arguments: dict[str, Any]
    asker: Asker
    report: Any
    nursery: trio.Nursery

    async def call(
        self, responses: dict[str, Any] | None = None, state: str | None = None
    ) -> types.CallToolResult | types.InputRequiredResult:
        options: dict[str, Any] = {}
        if self.server.modern:
            options = {"allow_input_required": True, "input_responses": responses, "request_state": state}
        return await _call_until_stopped(self, options)


async def _rounds(attempt: _Attempt, context: ToolContext) -> types.CallToolResult:
    """A 2026-07-28 call: the server returns its questions as the call's result (``input_required``,
    with a ``requestState``); each is asked as a form kept with what the retry needs, and the call is
    sent again with the answers until it completes. A call restored after a restart starts from its
    kept question."""
    kept = None if context.kept_question is None else await context.kept_question()
    if kept is None:
        result = await attempt.call()
    else:
        resume = kept.resume
        answer = await _ask_person(
            context,
            attempt.server.name,
            kept.form.prompt or "",
            kept.form.schema or {},
            resume=resume,
            restoring=True,
        )
        responses = {**resume["responses"], resume["key"]: _stored(answer)}
        remaining = resume.get("remaining", {})
        result = await _answer_round(attempt, context, resume["request_state"], remaining, responses)
    while isinstance(result, types.InputRequiredResult):
        requests = {key: _stored(request) for key, request in (result.input_requests or {}).items()}
        result = await _answer_round(attempt, context, result.request_state, requests, {})
    return result


async def _answer_round(
    attempt: _Attempt,
    context: ToolContext,
    state: str | None,
    requests: dict[str, Any],
    answered: dict[str, Any],
) -> types.CallToolResult | types.InputRequiredResult:
    """Ask each question of one round (``requests``, by key) after those ``answered`` already, then
    send the call again with every answer and the server's ``state``."""
    answers = dict(answered)
    keys = list(requests)
    for index, key in enumerate(keys):
        params = _form_params(attempt.server, requests[key])
        remaining = {later: requests[later] for later in keys[index + 1 :]}
        resume = {"key": key, "request_state": state, "responses": answers, "remaining": remaining}
        answer = await _ask_person(
            context, attempt.server.name, params.message, dict(params.requested_schema), resume=resume
        )
        answers = {**answers, key: _stored(answer)}
    responses = {key: types.ElicitResult.model_validate(value) for key, value in answers.items()}
    return await attempt.call(responses, state)


def _form_params(server: McpServer, request: dict[str, Any]) -> types.ElicitRequestFormParams:
    """The form a stored input request asks. **Raises:** ``ToolFailure`` for what this client does
    not offer (sampling, roots, a URL to open)."""
    method = request.get("method")
    params = request.get("params") or {}
    if method != "elicitation/create" or params.get("mode", "form") != "form":
        what = params.get("mode") if method == "elicitation/create" else method
        raise ToolFailure(
            type="error", message=f"the MCP server {server.name!r} asked for {what}, which is not offered"
        )
    return types.ElicitRequestFormParams.model_validate(params)


def _stored(value: Any) -> dict[str, Any]:
    """A protocol value as JSON, to keep in a form's ``resume`` (and read back after a restart)."""
    stored: dict[str, Any] = value.model_dump(by_alias=True, exclude_none=True, mode="json")
    return stored


async def _call_until_stopped(
    attempt: _Attempt, options: dict[str, Any]
) -> types.CallToolResult | types.InputRequiredResult:
    server, asker = attempt.server, attempt.asker
    call_scope = trio.CancelScope(shield=True)
    finished = trio.Event()
    attempt.nursery.start_soon(_forward_stop, call_scope, finished, asker, server)
    try:
        with call_scope:
            result: types.CallToolResult | types.InputRequiredResult = await attempt.session.call_tool(
                attempt.tool, attempt.arguments, progress_callback=attempt.report, **options
            )
            return result
        # Cancelled by the stop: the scope that stopped the call raises at the next checkpoint.
        await trio.lowlevel.checkpoint()
        raise AssertionError("a stopped MCP call's own stop did not arrive")
    except MCPError as exc:
        if exc.error.code == types.CONNECTION_CLOSED:
            server.lost("the connection closed during a call")
            raise ToolFailure(
                type="error", message=f"the MCP server {server.name!r} went away during the call"
            ) from exc
        raise ToolFailure(
            type="error", message=f"the MCP server {server.name!r} answered: {exc.error.message}"
        ) from exc
    except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        server.lost(f"the connection failed: {exc}")
        raise ToolFailure(
            type="error", message=f"the MCP server {server.name!r} cannot be reached: {exc}"
        ) from exc
    finally:
        finished.set()


async def _forward_stop(
    call_scope: trio.CancelScope, finished: trio.Event, asker: Asker, server: McpServer
) -> None:
    """Wait for the call's stop; then tell the server, in order (its question, then its call)."""
    try:
        await finished.wait()
    finally:
        if not finished.is_set():
            with trio.move_on_after(ANSWER_SECONDS, shield=True):
                await asker.withdraw(server.outbox)
            call_scope.cancel(reason="the tool call stopped")
            log.info("mcp_call_cancelled", server=server.name)


def _output(server: McpServer, result: types.CallToolResult | types.InputRequiredResult) -> dict[str, Any]:
    assert isinstance(result, types.CallToolResult)
    content = [block.model_dump(by_alias=True, exclude_none=True, mode="json") for block in result.content]
    if result.is_error:
        text = " ".join(block.get("text", "") for block in content if block.get("type") == "text").strip()
        raise ToolFailure(type="error", message=text or f"the MCP server {server.name!r} reported an error")
    output: dict[str, Any] = {"content": content}
    if result.structured_content is not None:
        output["structured"] = result.structured_content
    return output


async def _publish_progress(context: ToolContext, reports: trio.MemoryReceiveChannel[ServerProgress]) -> None:
    assert context.publish_progress is not None
    async for progress in reports:
        await context.publish_progress(progress)


@attrs.define(eq=False)
class _Question:
    """One ``elicitation/create`` of the server, waiting for its answer."""

    request_id: Any
    message: str
    schema: dict[str, Any]
    answer: types.ElicitResult | None = None
    answered: trio.Event = attrs.Factory(trio.Event)

    def settle(self, answer: types.ElicitResult) -> None:
        if self.answer is None:
            self.answer = answer
            self.answered.set()


_CANCEL = types.ElicitResult(action="cancel")


@attrs.define(eq=False)
class Asker:
    """The questions the server asks during one call, carried from the SDK's task into the call's
    actor (``serve``), where each is a form of the call."""

    server: str
    pending: list[_Question] = attrs.Factory(list)
    _send: trio.MemorySendChannel[_Question] = attrs.field(init=False)
    _receive: trio.MemoryReceiveChannel[_Question] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[_Question](math.inf)

    async def ask(self, request_id: Any, message: str, schema: dict[str, Any]) -> types.ElicitResult:
        """The answer to one question, as the server gets it (in the SDK's task)."""
        question = _Question(request_id=request_id, message=message, schema=dict(schema or {}))
        try:
            self._send.send_nowait(question)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return _CANCEL  # the call has ended: nobody is there to ask
        self.pending.append(question)
        await question.answered.wait()
        assert question.answer is not None
        return question.answer

    async def serve(self, context: ToolContext) -> None:
        """Show each question as a form of the call, in the call's actor, until the call ends."""
        async for question in self._receive:
            try:
                question.settle(await _ask_person(context, self.server, question.message, question.schema))
            finally:
                question.settle(_CANCEL)  # stopped while it waited: the server is answered cancel
                self.pending.remove(question)

    async def withdraw(self, outbox: Outbox | None) -> None:
        """Answer every pending question ``cancel`` (the call is stopping), and return once each
        answer is sent."""
        sent = []
        for question in list(self.pending):
            if outbox is not None:
                sent.append(outbox.answered(question.request_id))
            question.settle(_CANCEL)
        for answer in sent:
            await answer.wait()
        await trio.lowlevel.checkpoint()

    def close(self) -> None:
        self._send.close()
        for question in list(self.pending):
            question.settle(_CANCEL)


async def _ask_person(
    context: ToolContext,
    server: str,
    message: str,
    schema: dict[str, Any],
    *,
    resume: dict[str, Any] | None = None,
    restoring: bool = False,
) -> types.ElicitResult:
    """The person's answer to the server's question: ``accept`` with the converted answers, ``decline``
    when they dismissed it with a message (the call goes on), else ``cancel``. ``resume``: what the
    call's retry needs, kept with the form (a 2026-07-28 question); ``restoring``: the call was
    restored, and its kept form is shown again."""
    if context.open_form is None:
        return types.ElicitResult(action="decline")
    asked = ServerAsks(server=server, schema=schema, prompt=message, resume=resume, restoring=restoring)
    reply = await context.open_form(questions_of(schema, message), asked=asked)
    if reply.answers is not None:
        return types.ElicitResult(action="accept", content=reply.answers)
    if reply.message:
        return types.ElicitResult(action="decline")
    return _CANCEL
