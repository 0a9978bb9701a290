"""The payload of every event type, declared once: the builders of ``events`` make their JSON from these
classes, and the OpenAPI document describes the event stream by them.

A payload is the event's own keys, after the envelope (``seq``, ``type``, ``session_id``, ``at``) that
``events.Event`` adds. Its fields are written in declaration order; a field with a default is left out
while it holds that default (``usage?``, ``parent_call_id?``, ``partial?``, ``restored``), and a field
without one is always present, even when null.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any, ClassVar, Literal, ParamSpec

import attrs

from coordinator import wire
from coordinator.reasons import StopReason
from coordinator.records import (
    Decision,
    Form,
    Outcome,
    Partial,
    PermissionRequest,
    Session,
    StepMessage,
    ToolError,
    Usage,
)

ResumedAfter = Literal["shutdown", "crash"]
"""Why a turn was suspended before it resumed: an orderly shutdown, or its coordinator's crash."""


@attrs.frozen
class EventPayload:
    """What every event type's payload class has: the event's ``type``, and whether it is stored."""

    type: ClassVar[str]
    stored: ClassVar[bool] = True
    """False for a live-only event: never stored, so its ``seq`` is null."""


@attrs.frozen(kw_only=True)
class SessionCreated(EventPayload):
    """A session was created: the whole session as ``GET /api/session/{sid}`` shows it."""

    type: ClassVar[str] = "session.created"
    session: Session


@attrs.frozen(kw_only=True)
class TurnStarted(EventPayload):
    """A prompt started a turn."""

    type: ClassVar[str] = "session.turn.started"
    turn_id: str
    prompt: str


@attrs.frozen(kw_only=True)
class TurnQueued(EventPayload):
    """A steer became a queued turn of its own: its turn ended or stopped before a step boundary
    delivered it, or no turn ran when it was sent."""

    type: ClassVar[str] = "session.turn.queued"
    turn_id: str
    text: str
    from_steer: str | None = None


@attrs.frozen(kw_only=True)
class TurnSteered(EventPayload):
    """A steer reached the running turn at a step boundary, as a user message before the next
    request to the model."""

    type: ClassVar[str] = "session.turn.steered"
    turn_id: str
    steer_id: str
    text: str
    # The principal who decided (``[[principal]]``), when the server has principals.
    by: str | None = None


@attrs.frozen(kw_only=True)
class TurnCancelled(EventPayload):
    """A person cancelled a queued turn: it never runs."""

    type: ClassVar[str] = "session.turn.cancelled"
    turn_id: str


@attrs.frozen(kw_only=True)
class StepStarted(EventPayload):
    """A request to the model started."""

    type: ClassVar[str] = "session.step.started"
    turn_id: str
    step_id: str


@attrs.frozen(kw_only=True)
class StepSucceeded(EventPayload):
    """The model answered: its text and the tool calls it asked for, and the tokens it reported."""

    type: ClassVar[str] = "session.step.succeeded"
    turn_id: str
    step_id: str
    message: StepMessage
    usage: Usage | None = None


@attrs.frozen(kw_only=True)
class StepFailed(EventPayload):
    """A step was stopped; ``partial_text`` is what the model had streamed by then (absent when none)."""

    type: ClassVar[str] = "session.step.failed"
    turn_id: str
    step_id: str
    reason: StopReason
    partial_text: str | None = None


@attrs.frozen(kw_only=True)
class TextDelta(EventPayload):
    """Live only (``?deltas=true``): never stored, no seq, and its SSE frame has no ``id``.

    ``offset`` is the index, in characters, of the delta's first character in the step's text.
    """

    type: ClassVar[str] = "session.text.delta"
    stored: ClassVar[bool] = False
    turn_id: str
    step_id: str
    offset: int = attrs.field(metadata={"schema": {"minimum": 0}})
    delta: str


@attrs.frozen(kw_only=True)
class ToolStarted(EventPayload):
    """A tool call started; ``parent_call_id`` names the ``execute`` call of a nested one."""

    type: ClassVar[str] = "session.tool.started"
    turn_id: str
    call_id: str
    name: str
    input: Any
    parent_call_id: str | None = None


@attrs.frozen(kw_only=True)
class NestedProgress:
    """A nested call of ``execute`` as its progress reports it."""

    call_id: str
    name: str
    status: str
    output: Any = None


@attrs.frozen(kw_only=True)
class ToolProgress(EventPayload):
    """A running tool's progress: exactly one of ``nested``, ``log``, ``detail`` or ``progress``."""

    type: ClassVar[str] = "session.tool.progress"
    call_id: str


@attrs.frozen(kw_only=True)
class ToolProgressNested(ToolProgress):
    """A nested call of ``execute`` finished."""

    nested: NestedProgress


@attrs.frozen(kw_only=True)
class ToolProgressLog(ToolProgress):
    """A line the tool printed."""

    log: str


@attrs.frozen(kw_only=True)
class ToolProgressDetail(ToolProgress):
    """The tool's latest progress detail, whatever it reported (null included)."""

    detail: Any


@attrs.frozen(kw_only=True)
class ServerProgress:
    """How far an MCP server says its call got: ``progress`` of ``total`` (when it knows), and what it
    is doing."""

    progress: float
    total: float | None = None
    message: str | None = None


@attrs.frozen(kw_only=True)
class ToolProgressServer(ToolProgress):
    """An MCP server's progress notification for the call."""

    progress: ServerProgress


@attrs.frozen(kw_only=True)
class ToolSucceeded(EventPayload):
    """A tool call returned its output."""

    type: ClassVar[str] = "session.tool.succeeded"
    call_id: str
    output: Any


@attrs.frozen(kw_only=True)
class ToolFailed(EventPayload):
    """A tool call failed or was stopped; ``partial`` is what it had done by then."""

    type: ClassVar[str] = "session.tool.failed"
    call_id: str
    error: ToolError
    partial: Partial | None = None


@attrs.frozen(kw_only=True)
class PermissionAsked(EventPayload):
    """A tool call waits for a person's permission; ``restored`` when a restart asks it again."""

    type: ClassVar[str] = "permission.asked"
    request: PermissionRequest
    restored: bool = False


@attrs.frozen(kw_only=True)
class PermissionReplied(EventPayload):
    """A person replied to a permission request."""

    type: ClassVar[str] = "permission.replied"
    request_id: str
    session_id: str
    decision: Decision
    # The input the person approved the call with, when they changed the model's.
    input: Any = None
    # The principal who decided (``[[principal]]``), when the server has principals.
    by: str | None = None


@attrs.frozen(kw_only=True)
class PermissionRevoked(EventPayload):
    """A stop settled a pending permission request before anyone replied."""

    type: ClassVar[str] = "permission.revoked"
    request_id: str
    session_id: str
    reason: StopReason


@attrs.frozen(kw_only=True)
class FormAsked(EventPayload):
    """The ``question`` tool shows a form; ``restored`` when a restart shows it again."""

    type: ClassVar[str] = "form.asked"
    form: Form
    restored: bool = False


@attrs.frozen(kw_only=True)
class FormSubmitted(EventPayload):
    """A person answered a form."""

    type: ClassVar[str] = "form.submitted"
    form_id: str
    answers: dict[str, Any]
    # The principal who decided (``[[principal]]``), when the server has principals.
    by: str | None = None


@attrs.frozen(kw_only=True)
class FormCancelled(EventPayload):
    """A person dismissed a form."""

    type: ClassVar[str] = "form.cancelled"
    form_id: str
    # The principal who decided (``[[principal]]``), when the server has principals.
    by: str | None = None


@attrs.frozen(kw_only=True)
class FormRevoked(EventPayload):
    """A stop settled a pending form before anyone answered it."""

    type: ClassVar[str] = "form.revoked"
    form_id: str
    reason: StopReason


@attrs.frozen(kw_only=True)
class ExecutionSucceeded(EventPayload):
    """The turn finished: the model answered without asking for more tool calls."""

    type: ClassVar[str] = "session.execution.succeeded"
    turn_id: str


@attrs.frozen(kw_only=True)
class ExecutionStopped(EventPayload):
    """A turn ended by a stop; the reason's own ``terminal_event`` says which of the subclasses."""

    turn_id: str
    reason: StopReason


@attrs.frozen(kw_only=True)
class ExecutionInterrupted(ExecutionStopped):
    """Interrupt, declined or timeout; never shutdown (that is suspended)."""

    type: ClassVar[str] = "session.execution.interrupted"


@attrs.frozen(kw_only=True)
class ExecutionFailed(ExecutionStopped):
    """An error ended the turn."""

    type: ClassVar[str] = "session.execution.failed"


@attrs.frozen(kw_only=True)
class ExecutionSuspended(ExecutionStopped):
    """Shutdown: the turn resumes at the next start."""

    type: ClassVar[str] = "session.execution.suspended"


@attrs.frozen(kw_only=True)
class ExecutionResumed(EventPayload):
    """A suspended turn goes on, after a shutdown or after its coordinator crashed."""

    type: ClassVar[str] = "session.execution.resumed"
    turn_id: str
    after: ResumedAfter


@attrs.frozen(kw_only=True)
class SessionIdle(EventPayload):
    """The turn is over and the session takes a prompt again: how the turn ended."""

    type: ClassVar[str] = "session.idle"
    turn_id: str
    outcome: Outcome


@attrs.frozen(kw_only=True)
class StreamTruncated:
    """The data of a ``stream.truncated`` frame (no id): older events were deleted by retention."""

    oldest_seq: int = attrs.field(metadata={"schema": {"minimum": 0}})


EVENT_PAYLOADS: tuple[type[EventPayload], ...] = (
    SessionCreated,
    TurnStarted,
    TurnQueued,
    TurnSteered,
    TurnCancelled,
    StepStarted,
    StepSucceeded,
    StepFailed,
    TextDelta,
    ToolStarted,
    ToolProgressNested,
    ToolProgressLog,
    ToolProgressDetail,
    ToolProgressServer,
    ToolSucceeded,
    ToolFailed,
    PermissionAsked,
    PermissionReplied,
    PermissionRevoked,
    FormAsked,
    FormSubmitted,
    FormCancelled,
    FormRevoked,
    ExecutionSucceeded,
    ExecutionInterrupted,
    ExecutionFailed,
    ExecutionSuspended,
    ExecutionResumed,
    SessionIdle,
)
"""Every payload class of an event that a stream carries, in the order the document lists them."""

EXECUTION_STOPPED: dict[str, type[ExecutionStopped]] = {
    cls.type: cls for cls in (ExecutionInterrupted, ExecutionFailed, ExecutionSuspended)
}
"""The payload class of each ``terminal_event`` of the stop reasons."""

P = ParamSpec("P")


def wire_builder(cls: Callable[P, object]) -> Callable[P, dict[str, Any]]:
    """A function that takes the fields of the payload class ``cls`` as keywords and returns the JSON
    object an instance of ``cls`` stands for, without building the instance.

    Events are built on every turn's hot path, and a frozen attrs instance costs several times the dict
    it becomes; so the builders go from the fields to the dict in one function generated from
    ``attrs.fields(cls)``: the keys in declaration order, a field with a default left out while it holds
    it, records and reasons unstructured by ``wire``'s converter, and JSON scalars and ``Any`` fields (a
    tool's own input, output and progress) as they are.
    """
    name = f"{getattr(cls, '__name__', 'payload')}_wire"
    namespace: dict[str, Any] = {}
    params: list[str] = []
    entries: list[str] = []
    statements: list[str] = []
    for field in attrs.fields(attrs.resolve_types(typing.cast(type[Any], cls))):
        value = _value_code(field, namespace)
        key = f"_res[{field.name!r}] = {value}"
        if field.default is attrs.NOTHING:
            params.append(field.name)
            if statements:
                statements.append(key)
            else:
                entries.append(f"{field.name!r}: {value}")
        else:
            namespace[f"_default_{field.name}"] = field.default
            params.append(f"{field.name}=_default_{field.name}")
            statements.append(f"if {field.name} != _default_{field.name}:\n        {key}")
    literal = f"{{{', '.join(entries)}}}"
    body = [f"_res = {literal}", *statements, "return _res"] if statements else [f"return {literal}"]
    source = "\n    ".join([f"def {name}(*, {', '.join(params)}):", *body])
    exec(compile(source, f"<{name}>", "exec"), namespace)
    built: Callable[P, dict[str, Any]] = namespace[name]
    return built


def _value_code(field: attrs.Attribute[Any], namespace: dict[str, Any]) -> str:
    """The expression of a field's wire value in a ``wire_builder`` function: the argument itself, or
    the argument through ``wire``'s hook for its type."""
    # The generated function's keywords are the field names, and its local names start with "_".
    if field.alias != field.name or isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
        raise TypeError(f"{field.name}: a payload field is public, its default a plain value")
    if _as_is(field.type):
        return field.name
    namespace[f"_unstructure_{field.name}"] = wire.converter.get_unstructure_hook(field.type)
    return f"_unstructure_{field.name}({field.name})"


def _as_is(hint: Any) -> bool:
    """Whether values of ``hint`` are their own JSON: ``Any``, scalars, literals, and lists, dicts and
    unions of those."""
    if hint is Any or hint in (str, int, float, bool, type(None)):
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return True
    return origin in (dict, list, typing.Union, types.UnionType) and all(_as_is(arg) for arg in args)
