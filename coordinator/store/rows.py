"""Frozen records of the store's own rows: what actors read back to decide and to resume."""

from __future__ import annotations

import json
from typing import Any

import attrs

from coordinator import wire
from coordinator.reasons import ParentLink, StopReason
from coordinator.records import Message, Partial, ToolError


def load_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def dump_json(value: Any) -> str | None:
    return None if value is None else json.dumps(wire.unstructure(value), separators=(",", ":"))


def load_reason(text: str | None) -> StopReason | None:
    return None if text is None else wire.structure(json.loads(text), StopReason | None)


def dump_reason(reason: StopReason | None) -> str | None:
    return None if reason is None else json.dumps(wire.converter.unstructure(reason, StopReason))


@attrs.frozen(kw_only=True)
class TurnRow:
    """A turn: its prompt, where it is in its life, and the stop it settled (or must settle) as."""

    id: str
    session_id: str
    ord: int
    prompt: str
    status: str
    stop_reason: StopReason | None
    outcome: str | None
    resumes: int
    suspended_after: str | None
    # The task call that runs this turn (a sub-agent's turn), or None for a turn of the session's own.
    task: ParentLink | None = None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> TurnRow:
        id, session_id, ord, prompt, status, stop_reason, outcome, resumes, suspended_after = row[:9]
        parent_session_id, parent_call_id = row[9:]
        return cls(
            id=id,
            session_id=session_id,
            ord=ord,
            prompt=prompt,
            status=status,
            stop_reason=load_reason(stop_reason),
            outcome=outcome,
            resumes=resumes,
            suspended_after=suspended_after,
            task=None
            if parent_session_id is None
            else ParentLink(session_id=parent_session_id, call_id=parent_call_id),
        )


TURN_COLUMNS = (
    "id, session_id, ord, prompt, status, stop_reason, outcome, resumes, suspended_after, "
    "parent_session_id, parent_call_id"
)


@attrs.frozen(kw_only=True)
class ToolCallRow:
    """A tool call, top-level or nested under ``parent_call_id``."""

    session_id: str
    call_id: str
    turn_id: str
    step_id: str | None
    parent_call_id: str | None
    model_call_id: str | None
    name: str
    input: Any
    status: str
    output: Any
    error: ToolError | None
    partial: Partial | None
    progress: Any

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> ToolCallRow:
        (sid, call_id, turn_id, step_id, parent, model_id, name, inp, status, out, err, partial, prog) = row
        return cls(
            session_id=sid,
            call_id=call_id,
            turn_id=turn_id,
            step_id=step_id,
            parent_call_id=parent,
            model_call_id=model_id,
            name=name,
            input=load_json(inp),
            status=status,
            output=load_json(out),
            error=None if err is None else wire.structure(json.loads(err), ToolError),
            partial=None if partial is None else wire.structure(json.loads(partial), Partial),
            progress=load_json(prog),
        )


TOOL_CALL_COLUMNS = (
    "session_id, call_id, turn_id, step_id, parent_call_id, model_call_id, name, input, status, "
    "output, error, partial, progress"
)


@attrs.frozen(kw_only=True)
class StoredMessage:
    """A message of the history with where it stands: its ``ord`` in the session, and whether its
    turn is settled (then nothing writes to it any more)."""

    ord: int
    turn_settled: bool
    message: Message


@attrs.frozen(kw_only=True)
class ClaimRow:
    """A session's claim: owner instance, fencing epoch and state (held, suspended or released)."""

    session_id: str
    owner: str | None
    epoch: int
    state: str
    since: str | None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> ClaimRow:
        session_id, owner, epoch, state, since = row
        return cls(session_id=session_id, owner=owner, epoch=epoch, state=state, since=since)


@attrs.frozen(kw_only=True)
class InstanceRow:
    """A coordinator process that owned (or owns) claims, with its liveness facts."""

    id: str
    host: str
    pid: int
    boot_id: str
    heartbeat: float
    stopped: bool

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> InstanceRow:
        id, host, pid, boot_id, heartbeat, stopped = row
        return cls(id=id, host=host, pid=pid, boot_id=boot_id, heartbeat=heartbeat, stopped=bool(stopped))


@attrs.frozen(kw_only=True)
class WaitRow:
    """What a permission request or a form needs beyond its wire record: turn, deadline, message."""

    turn_id: str
    deadline_at: float | None
    message: str | None
