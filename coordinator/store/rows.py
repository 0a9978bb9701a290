"""Frozen records of the store's own rows: what actors read back to decide and to resume.

Each record's columns and its reading from a row are derived from its fields (``_records.py``):
the ``*_ROW`` mappers at the end of this module.
"""

from __future__ import annotations

from typing import Any

import attrs

from coordinator.reasons import ParentLink, StopReason
from coordinator.records import Form, Message, Partial, PermissionRequest, ToolError
from coordinator.statuses import CallStatus, ClaimState, SteerStatus, TurnStatus
from coordinator.store._records import mapper


@attrs.frozen(kw_only=True)
class TurnRow:
    """A turn: its prompt, where it is in its life, and the stop it settled (or must settle) as."""

    id: str
    session_id: str
    ord: int
    prompt: str
    status: TurnStatus = attrs.field(converter=TurnStatus)
    stop_reason: StopReason | None
    outcome: str | None
    resumes: int
    suspended_after: str | None
    # A soft stop (``interrupt`` with ``when="after_step"``) waiting for the turn's next step boundary.
    soft_stop: StopReason | None = None
    created_at: str = ""
    # The task call that runs this turn (a sub-agent's turn), or None for a turn of the session's own.
    task: ParentLink | None = None


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
    status: CallStatus = attrs.field(converter=CallStatus)
    output: Any
    error: ToolError | None
    partial: Partial | None
    progress: Any
    # The input a person approved the call with instead of the model's (None: not changed).
    edited_input: Any = None


@attrs.frozen(kw_only=True)
class SteerRow:
    """A text sent into a running turn: pending until its turn's next step boundary delivers it, or
    queued as a turn of its own (``queued_turn_id``) when its turn ended first."""

    id: str
    session_id: str
    turn_id: str | None  # None: sent when no turn ran
    text: str
    status: SteerStatus = attrs.field(converter=SteerStatus)
    queued_turn_id: str | None
    created_at: str
    sent_by: str | None = None  # the principal who sent it, when the server has principals


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
    state: ClaimState = attrs.field(converter=ClaimState)
    since: str | None


@attrs.frozen(kw_only=True)
class InstanceRow:
    """A coordinator process that owned (or owns) claims, with its liveness facts."""

    id: str
    host: str
    pid: int
    boot_id: str
    heartbeat: float
    stopped: bool
    # The node's name among the nodes sharing the store (``[server] node_id``); None: the instance's
    # own id names it (a new one at each start). Older rows have none.
    node_id: str | None = None


@attrs.frozen(kw_only=True)
class ProcessGroupRow:
    """A process group a coordinator instance started and has not yet reaped: what a later start
    needs to kill it if that instance dies first, and what it belongs to (a tool call, or a label
    such as a server's name)."""

    pgid: int
    # The leader's start time, in clock ticks after boot: with ``boot_id``, tells a reused pid apart.
    started: int
    boot_id: str
    owner: str  # the instance that started it
    session_id: str | None = None
    call_id: str | None = None
    label: str | None = None


@attrs.frozen(kw_only=True)
class WaitRow:
    """What a permission request or a form needs beyond its wire record: turn, deadline, message."""

    turn_id: str
    deadline_at: float | None
    message: str | None


TURN_ROW = mapper(TurnRow, nested={"task": ("parent_session_id", "parent_call_id")})
TOOL_CALL_ROW = mapper(ToolCallRow)
CLAIM_ROW = mapper(ClaimRow)
INSTANCE_ROW = mapper(InstanceRow)
WAIT_ROW = mapper(WaitRow)
STEER_ROW = mapper(SteerRow)
PROCESS_GROUP_ROW = mapper(ProcessGroupRow)
PERMISSION_ROW = mapper(PermissionRequest)
FORM_ROW = mapper(Form)
