"""Frozen records of the contract's objects: sessions, claims, permission requests, forms, history."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import attrs

from coordinator.reasons import ParentLink, StopOutcome, StopReason, TextStatus, ToolErrorType
from coordinator.statuses import FormStatus, PermissionStatus

SessionStatus = Literal["idle", "busy", "suspended"]
# How a turn settled: it succeeded, or a stop's outcome (the reason table's).
Outcome = Literal["succeeded", StopOutcome]
Decision = Literal["once", "always", "reject"]
Effect = Literal["allow", "ask", "deny"]
# The values of ``coordinator.statuses.CallStatus``, as a Literal: the wire schema of a tool part's
# ``state`` is read from its type (tests/coordinator/test_statuses.py checks that the two agree).
CallState = Literal["running", "succeeded", "failed"]

MAX_TITLE = 200
"""Characters in a session title at most."""

MAX_TEXT = 1 << 20
"""Characters in a prompt (and a reply's message) at most: 1 MiB of ASCII."""


@attrs.frozen
class ClaimView:
    """Who runs a session now: the owner instance and since when (RFC 3339)."""

    owner: str
    since: str


@attrs.frozen(kw_only=True)
class Node:
    """A live node sharing the store (``GET /api/node``)."""

    id: str
    host: str
    since: str
    heartbeat_at: str
    sessions: int
    """Sessions whose claim it holds now."""


@attrs.frozen(kw_only=True)
class Session:
    """A session as clients see it."""

    id: str
    title: str
    status: SessionStatus
    claim: ClaimView | None
    last_outcome: Outcome | None
    created_at: str
    # The task call that made this sub-agent session; null for a top-level one.
    parent: ParentLink | None
    # The principal it belongs to (``[[principal]]``), a sub-agent's its parent's; absent when none.
    owner: str | None = None


@attrs.frozen(kw_only=True)
class PermissionRequest:
    """A question to a person: may this tool call run?"""

    id: str
    session_id: str
    call_id: str
    action: str
    resource: str
    status: PermissionStatus = attrs.field(converter=PermissionStatus)
    decision: Decision | None = None
    reason: StopReason | None = None
    created_at: str
    # The input the person approved the call with, when they changed the model's.
    input: Any = None

    def settlement(self) -> Settlement:
        """How it was settled, for a late reply (its wire form ``{status, decision?, reason?}``)."""
        return Settlement(self.status.value, self.decision, self.reason)


@attrs.frozen
class Settlement:
    """How a request or a form was settled, as a 409 reports it."""

    status: str
    decision: Decision | None = None
    reason: StopReason | None = None


@attrs.frozen(kw_only=True)
class Question:
    """One question of a form; ``options`` limits the answers when given."""

    id: str
    prompt: str
    options: list[str] | None = None


@attrs.frozen(kw_only=True)
class Form:
    """A question form shown to a person: by the ``question`` tool, or asked by an MCP server.

    A server's form names it in ``source`` (``{"mcp": SERVER}``), says what the server asked in
    ``prompt``, and keeps the JSON Schema it asked with in ``schema``: its answers are converted and
    checked by that schema (a number, a boolean).
    """

    id: str
    session_id: str
    call_id: str
    questions: list[Question]
    status: FormStatus = attrs.field(converter=FormStatus)
    answers: dict[str, Any] | None = None
    reason: StopReason | None = None
    created_at: str
    source: dict[str, str] | None = None
    schema: dict[str, Any] | None = None
    # What the server said in asking (its questions are the schema's properties).
    prompt: str | None = None

    def settlement(self) -> Settlement:
        """How it was settled, for a late answer (its wire form ``{status, reason?}``)."""
        return Settlement(self.status.value, None, self.reason)


@attrs.frozen(kw_only=True)
class Rule:
    """A permission rule: ``action`` is a tool name or ``*``; ``resource`` a glob."""

    action: str = "*"
    resource: str = "*"
    effect: Effect


@attrs.frozen(kw_only=True)
class ToolError:
    """Why a tool call failed: its type and a message for people and the model."""

    type: ToolErrorType
    message: str
    # Whether the call's tool had begun (a process spawned, a plugin called) when it failed: a call
    # stopped after that may have taken effect. None on failures recorded before this was kept.
    started: bool | None = None


@attrs.frozen(kw_only=True)
class NestedCall:
    """A nested call of ``execute`` as its progress, result and partial result report it."""

    call_id: str
    name: str
    input: Any = None
    # A call's status (``statuses.CallStatus``) as its plain word: it is carried as JSON as it is.
    status: str = attrs.field(converter=str)
    output: Any = None


@attrs.frozen(kw_only=True)
class Partial:
    """What a stopped tool had done: script logs, finished nested calls, and its latest progress."""

    logs: list[str] = attrs.Factory(list)
    calls: list[NestedCall] = attrs.Factory(list)
    progress: Any = None


@attrs.frozen(kw_only=True)
class TextPart:
    """Text in a message: ``complete``, or cut short by a stop while the model streamed it."""

    type: ClassVar[str] = "text"

    text: str
    status: TextStatus


@attrs.frozen(kw_only=True)
class ToolPart:
    """A tool call in an assistant message, with its state and what it produced."""

    type: ClassVar[str] = "tool"

    call_id: str
    name: str
    input: Any
    state: CallState
    output: Any = None
    error: ToolError | None = None
    partial: Partial | None = None
    # The input a person approved the call with instead of ``input`` (the model's), when changed.
    edited_input: Any = None


@attrs.frozen(kw_only=True)
class Steered:
    """A steer accepted: ``turn_id`` is the running turn it waits for (delivered at its next step
    boundary), or the queued turn it became when no turn could take it."""

    turn_id: str
    steer_id: str


@attrs.frozen(kw_only=True)
class QueuedTurn:
    """A turn waiting for the session's earlier turns, as the queue lists it."""

    turn_id: str
    text: str
    created_at: str


@attrs.frozen(kw_only=True)
class Message:
    """One message of the history: a user prompt or note, or what the model answered."""

    id: str
    session_id: str
    turn_id: str
    role: Literal["user", "assistant"]
    parts: list[TextPart | ToolPart]
    created_at: str


@attrs.frozen(kw_only=True)
class Usage:
    """Tokens the model endpoint reported for one request."""

    input_tokens: int
    output_tokens: int


@attrs.frozen(kw_only=True)
class StepToolCall:
    """A tool call as ``session.step.succeeded`` reports it: the coordinator's call id."""

    call_id: str
    name: str
    input: Any


@attrs.frozen(kw_only=True)
class StepMessage:
    """What the model answered in a step, as ``session.step.succeeded.message`` reports it."""

    text: str
    tool_calls: list[StepToolCall]
