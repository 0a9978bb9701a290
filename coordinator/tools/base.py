"""What a tool is, and what a running tool call may use."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Literal, Protocol

import attrs
import trio

from coordinator.event_payloads import ServerProgress
from coordinator.models.base import ToolSpec
from coordinator.reasons import StopReason
from coordinator.records import Form, NestedCall, Question, ToolError
from coordinator.statuses import CallStatus
from coordinator.tools.process_group import GroupRecords


@attrs.frozen
class FormReply:
    """A person's answer to a form: ``answers`` when submitted, or None with feedback when dismissed."""

    answers: dict[str, Any] | None
    message: str | None = None


@attrs.frozen
class ServerAsks:
    """A form an MCP server asked for: which server, and the JSON Schema its answers must fit.

    A question asked the 2025 way cannot outlive the server's connection: a shutdown revokes its
    form. One asked the 2026-07-28 way carries ``resume`` and is kept like any form.
    """

    server: str
    schema: dict[str, Any]
    prompt: str
    # What a retry of the call after a restart needs (a 2026-07-28 question: its key, the server's
    # ``requestState``, the round's earlier answers); None for a question that dies with the connection.
    resume: dict[str, Any] | None = None
    # The call was restored after a restart: its kept form is shown again (or its answer returned).
    restoring: bool = False


@attrs.frozen
class KeptQuestion:
    """A server's question a restored call asked before the restart: its form (pending, or answered
    while no wait was live) and what the call's retry needs (``ServerAsks.resume``)."""

    form: Form
    resume: dict[str, Any]


class FormOpener(Protocol):
    """Shows a form to a person and waits for the answer (the ``question`` tool uses it, and an MCP
    server's question, ``asked`` by that server).

    While the form waits, the tool's own deadline is paused: a person's time to answer is bounded
    by ``[timeouts] question`` alone.
    """

    async def __call__(self, questions: list[Question], *, asked: ServerAsks | None = None) -> FormReply: ...


@attrs.frozen(kw_only=True)
class CallResult:
    """How a tool call settled: ``output`` when it succeeded, ``error`` when it failed."""

    call_id: str
    status: Literal[CallStatus.SUCCEEDED, CallStatus.FAILED]
    output: Any = None
    error: ToolError | None = None


class NestedCaller(Protocol):
    """Runs a nested tool call as a child actor of the calling tool's actor (``execute`` uses it).

    The call goes through permission rules, deadlines and events exactly as a top-level call; when it
    settles, it is added to the caller's ``calls`` and published as ``session.tool.progress``.
    """

    async def __call__(self, name: str, input: Any) -> CallResult: ...


class TaskRunner(Protocol):
    """Runs one turn of a sub-agent session as a child actor of the calling ``task`` call.

    Returns the call's result ``{session_id, text}``. **Raises:** ``ToolFailure`` when the call fails.
    """

    async def __call__(self, prompt: str, title: str, session_id: str | None) -> dict[str, Any]: ...


class ScriptRunner(Protocol):
    """Runs a script in its own process, serving its nested calls, until it returns (``execute``).

    Returns the call's result ``{result, logs, calls}``. **Raises:** ``ToolFailure`` when the script
    cannot start, fails, or breaks the runner's protocol.
    """

    async def __call__(self, code: str) -> dict[str, Any]: ...


class LogWriter(Protocol):
    """Appends a line to the caller's ``logs`` and publishes it as ``session.tool.progress``."""

    async def __call__(self, line: str) -> None: ...


class SessionKeeper(Protocol):
    """Keeps a resource for the calling session: ``opener()`` (an async context manager) is entered
    once, by the session's life, and its value returned to this and every later call that asks for
    ``key``; it is closed when the session is deleted, at shutdown, or after the session idled.

    **Raises:** what ``opener`` raised while opening; ``SessionEnded`` if the session's life ended.
    """

    async def __call__(self, key: str, opener: Callable[[], AbstractAsyncContextManager[Any]]) -> Any: ...


@attrs.define(kw_only=True)
class ToolContext:
    """Owned by one tool-call actor while its tool runs.

    ``report_progress`` records the latest progress detail, which is stored and published as
    ``session.tool.progress`` (``remember_progress`` only keeps it); ``logs`` and ``calls`` collect what a script
    printed and which nested calls finished. A stop puts all three into the call's partial result, so
    work done so far is never lost.
    """

    session_id: str
    call_id: str
    workdir: Path
    report_progress: Callable[[Any], None]
    call_nested: NestedCaller | None = None
    write_log: LogWriter | None = None
    open_form: FormOpener | None = None
    run_task: TaskRunner | None = None
    run_script: ScriptRunner | None = None
    # Where the process groups the tool starts are recorded while they run, owned by this call, so
    # that a later start kills them if this coordinator dies first (``open_process_group``).
    process_groups: GroupRecords | None = None
    # Keeps a resource for the session's turns beyond this call, opened once (``SessionKeeper``).
    keep_for_session: SessionKeeper | None = None
    # Why the call is being stopped, for the tool's shielded cleanup to act on (an MCP client tells
    # its server); None while it runs, and when it fails or succeeds on its own.
    stop_reason: Callable[[], StopReason | None] = lambda: None
    # The server's question a restored call asked before the restart (an MCP call's), if any; None
    # for a call that was not restored.
    kept_question: Callable[[], Awaitable[KeptQuestion | None]] | None = None
    # Stores and publishes one progress report of an MCP server at once, in order (none coalesced).
    publish_progress: Callable[[ServerProgress], Awaitable[None]] | None = None
    latest_progress: Any = None
    progress_changed: trio.Event = attrs.Factory(trio.Event)

    logs: list[str] = attrs.Factory(list)
    calls: list[NestedCall] = attrs.Factory(list)

    def remember_progress(self, detail: Any) -> None:
        """Keep ``detail`` for the partial result of a stop, without publishing it (a shell's output)."""
        self.latest_progress = detail


ToolRun = Callable[[ToolContext, dict[str, Any]], Awaitable[Any]]


@attrs.frozen(kw_only=True)
class Capabilities:
    """What the actors do differently for a tool's calls, declared by the tool instead of read off its
    name (``design/actors.md``, "Tool capabilities"). The defaults are a plain tool's, and an unknown
    tool's: it has none.
    """

    # A stopped (or failed) call always reports a partial result, even an empty one (execute).
    keeps_partial_result: bool = False
    # Its calls run a script whose nested tool calls are tool-call actors of their own (execute).
    runs_nested_calls: bool = False
    # It may be called from a script (execute's nested calls).
    nestable: bool = True
    # Its call runs a sub-agent's turn (task).
    runs_sub_agent: bool = False


PLAIN = Capabilities()


@attrs.frozen(kw_only=True)
class Tool:
    """A tool: its spec for the model, how to name its resource for permission rules, and its body.

    ``run`` returns the JSON-able result, or raises ``ToolFailure`` to fail with a typed error.
    """

    spec: ToolSpec
    resource: Callable[[dict[str, Any]], str]
    run: ToolRun
    # Which ``[timeouts]`` key bounds a call; None for a tool that waits on a person under its own.
    deadline_scope: Literal["tool", "execute"] | None = "tool"
    # A plugin's: the module its function is defined in (None for a built-in tool). A fault injector
    # decides by it whether the tool's awaits are checkpoints (``checkpoints.Injector.observes``).
    plugin_module: str | None = None
    capabilities: Capabilities = PLAIN
    # Seconds a call may take instead of its ``[timeouts]`` key's (an MCP server's ``timeout``).
    deadline_seconds: float | None = None

    @property
    def name(self) -> str:
        return self.spec.name


def capabilities_of(tools: Mapping[str, Tool], name: str) -> Capabilities:
    """The capabilities of the tool called ``name`` in ``tools`` (a runtime's tool table), for code
    that has only a stored call: an unknown tool has none (``PLAIN``)."""
    tool = tools.get(name)
    return PLAIN if tool is None else tool.capabilities


def any_resource(input: dict[str, Any]) -> str:
    """The resource of tools that have none to match: ``*``."""
    return "*"
