"""Events as clients see them (contract section 5): one ``Event`` class and a builder per type.

An event is stored in the same transaction as the state change that causes it; its ``seq`` is given
by the store at that commit. Builders return a ``Draft`` (type, session, payload); the store turns a
draft into an ``Event`` with its seq and time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from coordinator import wire
from coordinator.reasons import StopReason
from coordinator.records import (
    Form,
    NestedCall,
    Partial,
    PermissionRequest,
    Session,
    StepMessage,
    ToolError,
    Usage,
)

TEXT_DELTA = "session.text.delta"
STREAM_TRUNCATED = "stream.truncated"


@attrs.frozen(kw_only=True)
class Event:
    """A committed event: ``seq`` is strictly increasing across the server and never reused.

    A live-only event (``session.text.delta``) is never stored and has no seq (``None``).
    """

    seq: int | None
    type: str
    session_id: str | None
    at: str
    payload: Mapping[str, Any]

    @property
    def stored_seq(self) -> int:
        """The seq of an event read from the store (every stored event has one)."""
        if self.seq is None:
            raise ValueError(f"a live-only {self.type} event has no seq")
        return self.seq

    def to_dict(self) -> dict[str, Any]:
        """Exactly the JSON object of contract section 5."""
        return {
            "seq": self.seq,
            "type": self.type,
            "session_id": self.session_id,
            "at": self.at,
            **self.payload,
        }


@attrs.frozen(kw_only=True)
class Draft:
    """An event before its commit gives it a seq and a time."""

    type: str
    session_id: str | None
    payload: Mapping[str, Any]


def _reason(reason: StopReason) -> Any:
    return wire.converter.unstructure(reason, StopReason)


def session_created(session: Session) -> Draft:
    return Draft(
        type="session.created", session_id=session.id, payload={"session": wire.unstructure(session)}
    )


def turn_started(session_id: str, turn_id: str, prompt: str) -> Draft:
    return Draft(
        type="session.turn.started", session_id=session_id, payload={"turn_id": turn_id, "prompt": prompt}
    )


def step_started(session_id: str, turn_id: str, step_id: str) -> Draft:
    return Draft(
        type="session.step.started", session_id=session_id, payload={"turn_id": turn_id, "step_id": step_id}
    )


def step_succeeded(
    session_id: str, turn_id: str, step_id: str, message: StepMessage, usage: Usage | None
) -> Draft:
    payload: dict[str, Any] = {"turn_id": turn_id, "step_id": step_id, "message": wire.unstructure(message)}
    if usage is not None:
        payload["usage"] = wire.unstructure(usage)
    return Draft(type="session.step.succeeded", session_id=session_id, payload=payload)


def step_failed(
    session_id: str, turn_id: str, step_id: str, reason: StopReason, partial_text: str | None = None
) -> Draft:
    """``partial_text``: what the model had streamed when the stop cut it short (absent when none)."""
    payload: dict[str, Any] = {"turn_id": turn_id, "step_id": step_id, "reason": _reason(reason)}
    if partial_text:
        payload["partial_text"] = partial_text
    return Draft(type="session.step.failed", session_id=session_id, payload=payload)


def text_delta(session_id: str, turn_id: str, step_id: str, offset: int, delta: str, at: str) -> Event:
    """A live-only ``session.text.delta``: never stored, so it is an ``Event`` with no seq at once.

    ``offset`` is the index, in characters, of the delta's first character in the step's text.
    """
    payload = {"turn_id": turn_id, "step_id": step_id, "offset": offset, "delta": delta}
    return Event(seq=None, type=TEXT_DELTA, session_id=session_id, at=at, payload=payload)


def tool_started(
    session_id: str, turn_id: str, call_id: str, name: str, input: Any, parent_call_id: str | None
) -> Draft:
    payload: dict[str, Any] = {"turn_id": turn_id, "call_id": call_id, "name": name, "input": input}
    if parent_call_id is not None:
        payload["parent_call_id"] = parent_call_id
    return Draft(type="session.tool.started", session_id=session_id, payload=payload)


def tool_progress_nested(session_id: str, call_id: str, nested: NestedCall) -> Draft:
    body = wire.unstructure(nested)
    body.pop("input", None)
    return Draft(
        type="session.tool.progress", session_id=session_id, payload={"call_id": call_id, "nested": body}
    )


def tool_progress_log(session_id: str, call_id: str, line: str) -> Draft:
    return Draft(
        type="session.tool.progress", session_id=session_id, payload={"call_id": call_id, "log": line}
    )


def tool_progress_detail(session_id: str, call_id: str, detail: Any) -> Draft:
    payload = {"call_id": call_id, "detail": detail}
    return Draft(type="session.tool.progress", session_id=session_id, payload=payload)


def tool_succeeded(session_id: str, call_id: str, output: Any) -> Draft:
    payload = {"call_id": call_id, "output": output}
    return Draft(type="session.tool.succeeded", session_id=session_id, payload=payload)


def tool_failed(session_id: str, call_id: str, error: ToolError, partial: Partial | None) -> Draft:
    payload: dict[str, Any] = {"call_id": call_id, "error": wire.unstructure(error)}
    if partial is not None:
        payload["partial"] = wire.unstructure(partial)
    return Draft(type="session.tool.failed", session_id=session_id, payload=payload)


def permission_asked(request: PermissionRequest, *, restored: bool) -> Draft:
    payload: dict[str, Any] = {"request": wire.unstructure(request)}
    if restored:
        payload["restored"] = True
    return Draft(type="permission.asked", session_id=request.session_id, payload=payload)


def permission_replied(request: PermissionRequest) -> Draft:
    payload = {"request_id": request.id, "session_id": request.session_id, "decision": request.decision}
    return Draft(type="permission.replied", session_id=request.session_id, payload=payload)


def permission_revoked(request: PermissionRequest, reason: StopReason) -> Draft:
    payload = {"request_id": request.id, "session_id": request.session_id, "reason": _reason(reason)}
    return Draft(type="permission.revoked", session_id=request.session_id, payload=payload)


def form_asked(form: Form, *, restored: bool) -> Draft:
    payload: dict[str, Any] = {"form": wire.unstructure(form)}
    if restored:
        payload["restored"] = True
    return Draft(type="form.asked", session_id=form.session_id, payload=payload)


def form_submitted(form: Form) -> Draft:
    payload = {"form_id": form.id, "answers": dict(form.answers or {})}
    return Draft(type="form.submitted", session_id=form.session_id, payload=payload)


def form_cancelled(form: Form) -> Draft:
    return Draft(type="form.cancelled", session_id=form.session_id, payload={"form_id": form.id})


def form_revoked(form: Form, reason: StopReason) -> Draft:
    payload = {"form_id": form.id, "reason": _reason(reason)}
    return Draft(type="form.revoked", session_id=form.session_id, payload=payload)


def execution_terminal(session_id: str, turn_id: str, reason: StopReason) -> Draft:
    """``session.execution.interrupted|failed|suspended`` by the reason's own table row."""
    payload = {"turn_id": turn_id, "reason": _reason(reason)}
    return Draft(type=reason.terminal_event, session_id=session_id, payload=payload)


def execution_succeeded(session_id: str, turn_id: str) -> Draft:
    return Draft(type="session.execution.succeeded", session_id=session_id, payload={"turn_id": turn_id})


def execution_resumed(session_id: str, turn_id: str, after: str) -> Draft:
    payload = {"turn_id": turn_id, "after": after}
    return Draft(type="session.execution.resumed", session_id=session_id, payload=payload)


def session_idle(session_id: str, turn_id: str, outcome: str) -> Draft:
    payload = {"turn_id": turn_id, "outcome": outcome}
    return Draft(type="session.idle", session_id=session_id, payload=payload)


def stream_truncated(oldest_seq: int, at: str) -> Event:
    """A replay's first item when retention deleted events it asked for (contract section 14): never
    stored, no seq; the replay goes on from the kept event ``oldest_seq``. Its SSE frame's data is
    only ``{"oldest_seq": N}``."""
    return Event(seq=None, type=STREAM_TRUNCATED, session_id=None, at=at, payload={"oldest_seq": oldest_seq})
