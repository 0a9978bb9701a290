"""Events as clients see them: one ``Event`` class, and a builder per event type.

An event is stored in the same transaction as the state change that causes it; its ``seq`` is given
by the store at that commit. Builders return a ``Draft`` (type, session, payload); the store turns a
draft into an ``Event`` with its seq and time. Each builder fills its type's payload class
(``event_payloads``), whose wire form is the draft's payload.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import attrs

from coordinator import event_payloads as payloads
from coordinator.reasons import StopReason
from coordinator.records import (
    Decision,
    Form,
    NestedCall,
    Outcome,
    Partial,
    PermissionRequest,
    Session,
    StepMessage,
    ToolError,
    Usage,
)

TEXT_DELTA = payloads.TextDelta.type
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
        """The event's JSON object as clients receive it: the envelope, then the payload's keys."""
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


@attrs.frozen(kw_only=True)
class Emitted:
    """An event a write transaction emitted. The store gives it its seq; a store across a network
    learns the seq with the commit's answer, so read ``event`` once the write has returned (read
    inside the transaction, it waits for the server)."""

    draft: Draft
    at: str
    seq_of: Callable[[], int]

    @property
    def event(self) -> Event:
        draft = self.draft
        return Event(
            seq=self.seq_of(), type=draft.type, session_id=draft.session_id, at=self.at, payload=draft.payload
        )


# Each type's payload, from its fields straight to its JSON object (``event_payloads.wire_builder``).
_session_created = payloads.wire_builder(payloads.SessionCreated)
_turn_started = payloads.wire_builder(payloads.TurnStarted)
_turn_queued = payloads.wire_builder(payloads.TurnQueued)
_turn_steered = payloads.wire_builder(payloads.TurnSteered)
_turn_cancelled = payloads.wire_builder(payloads.TurnCancelled)
_step_started = payloads.wire_builder(payloads.StepStarted)
_step_succeeded = payloads.wire_builder(payloads.StepSucceeded)
_step_failed = payloads.wire_builder(payloads.StepFailed)
_text_delta = payloads.wire_builder(payloads.TextDelta)
_tool_started = payloads.wire_builder(payloads.ToolStarted)
_tool_progress_nested = payloads.wire_builder(payloads.ToolProgressNested)
_tool_progress_log = payloads.wire_builder(payloads.ToolProgressLog)
_tool_progress_detail = payloads.wire_builder(payloads.ToolProgressDetail)
_tool_progress_server = payloads.wire_builder(payloads.ToolProgressServer)
_tool_succeeded = payloads.wire_builder(payloads.ToolSucceeded)
_tool_failed = payloads.wire_builder(payloads.ToolFailed)
_permission_asked = payloads.wire_builder(payloads.PermissionAsked)
_permission_replied = payloads.wire_builder(payloads.PermissionReplied)
_permission_revoked = payloads.wire_builder(payloads.PermissionRevoked)
_form_asked = payloads.wire_builder(payloads.FormAsked)
_form_submitted = payloads.wire_builder(payloads.FormSubmitted)
_form_cancelled = payloads.wire_builder(payloads.FormCancelled)
_form_revoked = payloads.wire_builder(payloads.FormRevoked)
_execution_stopped: dict[str, Callable[..., dict[str, Any]]] = {
    tag: payloads.wire_builder(cls) for tag, cls in payloads.EXECUTION_STOPPED.items()
}
_execution_succeeded = payloads.wire_builder(payloads.ExecutionSucceeded)
_execution_resumed = payloads.wire_builder(payloads.ExecutionResumed)
_session_idle = payloads.wire_builder(payloads.SessionIdle)
_stream_truncated = payloads.wire_builder(payloads.StreamTruncated)


def session_created(session: Session) -> Draft:
    payload = _session_created(session=session)
    return Draft(type=payloads.SessionCreated.type, session_id=session.id, payload=payload)


def turn_started(session_id: str, turn_id: str, prompt: str) -> Draft:
    payload = _turn_started(turn_id=turn_id, prompt=prompt)
    return Draft(type=payloads.TurnStarted.type, session_id=session_id, payload=payload)


def turn_queued(session_id: str, turn_id: str, text: str, from_steer: str | None) -> Draft:
    payload = _turn_queued(turn_id=turn_id, text=text, from_steer=from_steer)
    return Draft(type=payloads.TurnQueued.type, session_id=session_id, payload=payload)


def turn_steered(session_id: str, turn_id: str, steer_id: str, text: str, by: str | None = None) -> Draft:
    payload = _turn_steered(turn_id=turn_id, steer_id=steer_id, text=text, by=by)
    return Draft(type=payloads.TurnSteered.type, session_id=session_id, payload=payload)


def turn_cancelled(session_id: str, turn_id: str) -> Draft:
    payload = _turn_cancelled(turn_id=turn_id)
    return Draft(type=payloads.TurnCancelled.type, session_id=session_id, payload=payload)


def step_started(session_id: str, turn_id: str, step_id: str) -> Draft:
    payload = _step_started(turn_id=turn_id, step_id=step_id)
    return Draft(type=payloads.StepStarted.type, session_id=session_id, payload=payload)


def step_succeeded(
    session_id: str, turn_id: str, step_id: str, message: StepMessage, usage: Usage | None
) -> Draft:
    payload = _step_succeeded(turn_id=turn_id, step_id=step_id, message=message, usage=usage)
    return Draft(type=payloads.StepSucceeded.type, session_id=session_id, payload=payload)


def step_failed(
    session_id: str, turn_id: str, step_id: str, reason: StopReason, partial_text: str | None = None
) -> Draft:
    """``partial_text``: what the model had streamed when the stop cut it short (absent when none)."""
    payload = _step_failed(turn_id=turn_id, step_id=step_id, reason=reason, partial_text=partial_text or None)
    return Draft(type=payloads.StepFailed.type, session_id=session_id, payload=payload)


def text_delta(session_id: str, turn_id: str, step_id: str, offset: int, delta: str, at: str) -> Event:
    """A live-only ``session.text.delta``: never stored, so it is an ``Event`` with no seq at once.

    ``offset`` is the index, in characters, of the delta's first character in the step's text.
    """
    payload = _text_delta(turn_id=turn_id, step_id=step_id, offset=offset, delta=delta)
    return Event(seq=None, type=TEXT_DELTA, session_id=session_id, at=at, payload=payload)


def tool_started(
    session_id: str, turn_id: str, call_id: str, name: str, input: Any, parent_call_id: str | None
) -> Draft:
    payload = _tool_started(
        turn_id=turn_id, call_id=call_id, name=name, input=input, parent_call_id=parent_call_id
    )
    return Draft(type=payloads.ToolStarted.type, session_id=session_id, payload=payload)


def tool_progress_nested(session_id: str, call_id: str, nested: NestedCall) -> Draft:
    """A nested call's progress leaves out its input: its own ``session.tool.started`` showed it."""
    progress = payloads.NestedProgress(
        call_id=nested.call_id, name=nested.name, status=nested.status, output=nested.output
    )
    payload = _tool_progress_nested(call_id=call_id, nested=progress)
    return Draft(type=payloads.ToolProgress.type, session_id=session_id, payload=payload)


def tool_progress_log(session_id: str, call_id: str, line: str) -> Draft:
    payload = _tool_progress_log(call_id=call_id, log=line)
    return Draft(type=payloads.ToolProgress.type, session_id=session_id, payload=payload)


def tool_progress_detail(session_id: str, call_id: str, detail: Any) -> Draft:
    payload = _tool_progress_detail(call_id=call_id, detail=detail)
    return Draft(type=payloads.ToolProgress.type, session_id=session_id, payload=payload)


def tool_progress_server(session_id: str, call_id: str, progress: payloads.ServerProgress) -> Draft:
    payload = _tool_progress_server(call_id=call_id, progress=progress)
    return Draft(type=payloads.ToolProgress.type, session_id=session_id, payload=payload)


def tool_succeeded(session_id: str, call_id: str, output: Any) -> Draft:
    payload = _tool_succeeded(call_id=call_id, output=output)
    return Draft(type=payloads.ToolSucceeded.type, session_id=session_id, payload=payload)


def tool_failed(session_id: str, call_id: str, error: ToolError, partial: Partial | None) -> Draft:
    payload = _tool_failed(call_id=call_id, error=error, partial=partial)
    return Draft(type=payloads.ToolFailed.type, session_id=session_id, payload=payload)


def permission_asked(request: PermissionRequest, *, restored: bool) -> Draft:
    payload = _permission_asked(request=request, restored=restored)
    return Draft(type=payloads.PermissionAsked.type, session_id=request.session_id, payload=payload)


def permission_replied(request: PermissionRequest, by: str | None = None) -> Draft:
    # Only a replied request is published as replied, and a replied request has its decision.
    decision = cast(Decision, request.decision)
    payload = _permission_replied(
        request_id=request.id, session_id=request.session_id, decision=decision, input=request.input, by=by
    )
    return Draft(type=payloads.PermissionReplied.type, session_id=request.session_id, payload=payload)


def permission_revoked(request: PermissionRequest, reason: StopReason) -> Draft:
    payload = _permission_revoked(request_id=request.id, session_id=request.session_id, reason=reason)
    return Draft(type=payloads.PermissionRevoked.type, session_id=request.session_id, payload=payload)


def form_asked(form: Form, *, restored: bool) -> Draft:
    payload = _form_asked(form=form, restored=restored)
    return Draft(type=payloads.FormAsked.type, session_id=form.session_id, payload=payload)


def form_submitted(form: Form, by: str | None = None) -> Draft:
    payload = _form_submitted(form_id=form.id, answers=dict(form.answers or {}), by=by)
    return Draft(type=payloads.FormSubmitted.type, session_id=form.session_id, payload=payload)


def form_cancelled(form: Form, by: str | None = None) -> Draft:
    payload = _form_cancelled(form_id=form.id, by=by)
    return Draft(type=payloads.FormCancelled.type, session_id=form.session_id, payload=payload)


def form_revoked(form: Form, reason: StopReason) -> Draft:
    payload = _form_revoked(form_id=form.id, reason=reason)
    return Draft(type=payloads.FormRevoked.type, session_id=form.session_id, payload=payload)


def execution_terminal(session_id: str, turn_id: str, reason: StopReason) -> Draft:
    """``session.execution.interrupted|failed|suspended`` by the reason's own table row."""
    payload = _execution_stopped[reason.terminal_event](turn_id=turn_id, reason=reason)
    return Draft(type=reason.terminal_event, session_id=session_id, payload=payload)


def execution_succeeded(session_id: str, turn_id: str) -> Draft:
    payload = _execution_succeeded(turn_id=turn_id)
    return Draft(type=payloads.ExecutionSucceeded.type, session_id=session_id, payload=payload)


def execution_resumed(session_id: str, turn_id: str, after: str) -> Draft:
    """``after``: ``shutdown`` or ``crash``, as the takeover found the turn."""
    payload = _execution_resumed(turn_id=turn_id, after=cast(payloads.ResumedAfter, after))
    return Draft(type=payloads.ExecutionResumed.type, session_id=session_id, payload=payload)


def session_idle(session_id: str, turn_id: str, outcome: str) -> Draft:
    """``outcome``: one of ``records.Outcome``, the session's new ``last_outcome``."""
    payload = _session_idle(turn_id=turn_id, outcome=cast(Outcome, outcome))
    return Draft(type=payloads.SessionIdle.type, session_id=session_id, payload=payload)


def stream_truncated(oldest_seq: int, at: str) -> Event:
    """A replay's first item when retention deleted events it asked for: never stored, no seq; the
    replay goes on from the kept event ``oldest_seq``. Its SSE frame's data is only
    ``{"oldest_seq": N}``."""
    payload = _stream_truncated(oldest_seq=oldest_seq)
    return Event(seq=None, type=STREAM_TRUNCATED, session_id=None, at=at, payload=payload)
