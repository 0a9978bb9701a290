"""Every event type of contract sections 5, 9 and 14 as an attrs class, for the OpenAPI document only.

Events are built as payload dicts (``coordinator/events.py``); these classes say what each payload
holds, over the same records (``Session``, ``PermissionRequest``, ``Form``, the stop reasons) that the
builders unstructure, so the schemas generated from them describe exactly what a stream carries.
A test validates the events of real turns against them.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import attrs

from coordinator.reasons import StopReason
from coordinator.records import Decision, Form, Outcome, Partial, PermissionRequest, Session, ToolError
from coordinator.server.schema import REF_PREFIX, Schema, SchemaBuilder


@attrs.frozen(kw_only=True)
class _Envelope:
    """The keys of every stored event."""

    seq: int
    session_id: str | None
    at: str


@attrs.frozen(kw_only=True)
class ToolCallRequest:
    """A tool call the model asked for in a step."""

    call_id: str
    name: str
    input: Any


@attrs.frozen(kw_only=True)
class StepMessage:
    """What the model answered in a step: its text and the tool calls it asked for."""

    text: str
    tool_calls: list[ToolCallRequest]


@attrs.frozen(kw_only=True)
class Usage:
    """Tokens the endpoint reported for a step."""

    input_tokens: int
    output_tokens: int


@attrs.frozen(kw_only=True)
class NestedProgress:
    """A nested call of ``execute`` as its progress reports it."""

    call_id: str
    name: str
    status: str
    output: Any = None


@attrs.frozen(kw_only=True)
class SessionCreated(_Envelope):
    type: ClassVar[str] = "session.created"
    session: Session


@attrs.frozen(kw_only=True)
class TurnStarted(_Envelope):
    type: ClassVar[str] = "session.turn.started"
    turn_id: str
    prompt: str


@attrs.frozen(kw_only=True)
class StepStarted(_Envelope):
    type: ClassVar[str] = "session.step.started"
    turn_id: str
    step_id: str


@attrs.frozen(kw_only=True)
class StepSucceeded(_Envelope):
    type: ClassVar[str] = "session.step.succeeded"
    turn_id: str
    step_id: str
    message: StepMessage | None = None
    usage: Usage | None = None


@attrs.frozen(kw_only=True)
class StepFailed(_Envelope):
    type: ClassVar[str] = "session.step.failed"
    turn_id: str
    step_id: str
    reason: StopReason
    partial_text: str | None = None


@attrs.frozen(kw_only=True)
class TextDelta:
    """Live only (``?deltas=true``): never stored, no seq, and its SSE frame has no ``id``."""

    type: ClassVar[str] = "session.text.delta"
    seq: None
    session_id: str
    at: str
    turn_id: str
    step_id: str
    offset: int = attrs.field(metadata={"schema": {"minimum": 0}})
    delta: str


@attrs.frozen(kw_only=True)
class ToolStarted(_Envelope):
    type: ClassVar[str] = "session.tool.started"
    turn_id: str
    call_id: str
    name: str
    input: Any
    parent_call_id: str | None = None


@attrs.frozen(kw_only=True)
class ToolProgress(_Envelope):
    """One of ``nested`` (a nested call of execute), ``log`` (a line it printed) or ``detail``."""

    type: ClassVar[str] = "session.tool.progress"
    call_id: str
    nested: NestedProgress | None = None
    log: str | None = None
    detail: Any = None


@attrs.frozen(kw_only=True)
class ToolSucceeded(_Envelope):
    type: ClassVar[str] = "session.tool.succeeded"
    call_id: str
    output: Any


@attrs.frozen(kw_only=True)
class ToolFailed(_Envelope):
    type: ClassVar[str] = "session.tool.failed"
    call_id: str
    error: ToolError
    partial: Partial | None = None


@attrs.frozen(kw_only=True)
class PermissionAsked(_Envelope):
    type: ClassVar[str] = "permission.asked"
    request: PermissionRequest
    restored: bool = False


@attrs.frozen(kw_only=True)
class PermissionReplied(_Envelope):
    type: ClassVar[str] = "permission.replied"
    request_id: str
    decision: Decision


@attrs.frozen(kw_only=True)
class PermissionRevoked(_Envelope):
    type: ClassVar[str] = "permission.revoked"
    request_id: str
    reason: StopReason


@attrs.frozen(kw_only=True)
class FormAsked(_Envelope):
    type: ClassVar[str] = "form.asked"
    form: Form
    restored: bool = False


@attrs.frozen(kw_only=True)
class FormSubmitted(_Envelope):
    type: ClassVar[str] = "form.submitted"
    form_id: str
    answers: dict[str, str]


@attrs.frozen(kw_only=True)
class FormCancelled(_Envelope):
    type: ClassVar[str] = "form.cancelled"
    form_id: str


@attrs.frozen(kw_only=True)
class FormRevoked(_Envelope):
    type: ClassVar[str] = "form.revoked"
    form_id: str
    reason: StopReason


@attrs.frozen(kw_only=True)
class ExecutionSucceeded(_Envelope):
    type: ClassVar[str] = "session.execution.succeeded"
    turn_id: str


@attrs.frozen(kw_only=True)
class ExecutionInterrupted(_Envelope):
    """Interrupt, declined or timeout; never shutdown (that is suspended)."""

    type: ClassVar[str] = "session.execution.interrupted"
    turn_id: str
    reason: StopReason


@attrs.frozen(kw_only=True)
class ExecutionFailed(_Envelope):
    type: ClassVar[str] = "session.execution.failed"
    turn_id: str
    reason: StopReason


@attrs.frozen(kw_only=True)
class ExecutionSuspended(_Envelope):
    """Shutdown: the turn resumes at the next start."""

    type: ClassVar[str] = "session.execution.suspended"
    turn_id: str
    reason: StopReason


@attrs.frozen(kw_only=True)
class ExecutionResumed(_Envelope):
    type: ClassVar[str] = "session.execution.resumed"
    turn_id: str
    after: Literal["shutdown", "crash"]


@attrs.frozen(kw_only=True)
class SessionIdle(_Envelope):
    type: ClassVar[str] = "session.idle"
    turn_id: str
    outcome: Outcome


@attrs.frozen(kw_only=True)
class StreamTruncated:
    """The data of a ``stream.truncated`` frame (no id): older events were deleted by retention."""

    oldest_seq: int = attrs.field(metadata={"schema": {"minimum": 0}})


EVENT_CLASSES: tuple[type[Any], ...] = (
    SessionCreated,
    TurnStarted,
    StepStarted,
    StepSucceeded,
    StepFailed,
    TextDelta,
    ToolStarted,
    ToolProgress,
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


def event_schema(builder: SchemaBuilder) -> Schema:
    """A ``$ref`` to ``Event``: one schema a type, in a ``oneOf`` discriminated by ``type``."""
    if "Event" not in builder.components:
        refs = {cls.type: builder.ref(cls) for cls in EVENT_CLASSES}
        builder.components["Event"] = {
            "description": "One event (contract sections 5 and 9), by its type.",
            "oneOf": list(refs.values()),
            "discriminator": {
                "propertyName": "type",
                "mapping": {tag: ref["$ref"] for tag, ref in refs.items()},
            },
        }
    return {"$ref": REF_PREFIX + "Event"}


def sse_frame_schema(builder: SchemaBuilder) -> Schema:
    """One frame of ``text/event-stream``: ``id`` (the seq), ``event`` (the type), ``data`` (JSON)."""
    data = {"anyOf": [event_schema(builder), builder.ref(StreamTruncated)]}
    return {
        "type": "object",
        "description": (
            "A server-sent event: `id: SEQ`, `event: TYPE`, `data: JSON`, a blank line. "
            "`session.text.delta` and `stream.truncated` frames have no id; "
            "comment lines (`: keep-alive`) keep an idle stream open."
        ),
        "properties": {
            "id": {"type": "string", "pattern": "^[0-9]+$", "description": "the event's seq"},
            "event": {"type": "string", "description": "the event's type, or `stream.truncated`"},
            "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": data},
        },
        "required": ["event", "data"],
    }
