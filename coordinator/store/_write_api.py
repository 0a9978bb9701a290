"""The store's write transaction, as a Protocol: the read view plus every write the coordinator makes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from coordinator.events import Draft, Emitted
from coordinator.reasons import ParentLink, StopReason, TextStatus
from coordinator.records import Form, Partial, PermissionRequest, Rule, ToolError
from coordinator.statuses import ClaimState, FormStatus, StepStatus, TurnStatus
from coordinator.store._deletion import PruneBatch
from coordinator.store._read_api import Reader
from coordinator.store.rows import InstanceRow, ProcessGroupRow, StoredMessage, ToolCallRow, TurnRow


class Transaction(Reader, Protocol):
    """A write transaction's view. Events it emits reach subscribers only after its commit."""

    def emit(self, draft: Draft) -> Emitted:
        """Append an event to the log in this transaction; its ``event``, with its seq, is known at the
        commit (asked for inside the transaction, it waits for the server)."""
        ...

    def sync_soon(self) -> None:
        """Someone outside waits for this commit (a caller's answer, ``session.idle``): where commits
        are made durable in groups (SQLite), ask its sync as it commits, not once the process is
        idle, so that the disk works while the process goes on. Changes nothing about durability."""
        ...

    # sessions and turns
    def insert_session(
        self,
        session_id: str,
        title: str,
        created_at: str,
        parent: ParentLink | None = None,
        owner: str | None = None,
    ) -> None:
        """Insert a session (``owner``: the principal it belongs to, if any)."""
        ...

    def set_last_outcome(self, session_id: str, outcome: str) -> None: ...
    def delete_session(self, session_id: str) -> int:
        """Delete the session and everything it owns, its events included; returns how many events."""
        ...

    def insert_turn(
        self, turn_id: str, session_id: str, prompt: str, created_at: str, task: ParentLink | None = None
    ) -> None:
        """A queued turn; ``task``: the task call that runs it (a sub-agent's turn, run by that call)."""
        ...

    def set_turn_status(self, turn_id: str, status: TurnStatus) -> None: ...
    def put_turn_first(self, turn_id: str, session_id: str) -> None:
        """Move the queued turn ahead of the session's other queued turns."""
        ...

    def cancel_queued_turn(self, turn_id: str) -> bool:
        """Settle a queued turn as cancelled, never run; False when it is not queued (any more)."""
        ...

    def record_soft_stop(self, turn_id: str, reason: StopReason) -> bool:
        """Record a stop for the turn's next step boundary; False when one is recorded already or
        the turn does not run (nor is suspended)."""
        ...

    def insert_steer(
        self,
        steer_id: str,
        session_id: str,
        turn_id: str | None,
        text: str,
        created_at: str,
        sent_by: str | None = None,
    ) -> None:
        """Accept a text for the running turn's next step boundary (pending; ``turn_id`` None when
        no turn runs: it is queued as a turn of its own in the same transaction)."""
        ...

    def deliver_steer(self, steer_id: str) -> bool:
        """Mark a pending steer delivered; False when it is not pending (any more)."""
        ...

    def queue_steer(self, steer_id: str, turn_id: str) -> bool:
        """Mark a pending steer queued as the turn ``turn_id``; False when it is not pending."""
        ...

    def set_edited_input(self, session_id: str, call_id: str, edited: Any) -> None:
        """Record the input a person approved the call with instead of the model's."""
        ...

    def record_stop_intent(self, turn_id: str, reason: StopReason) -> bool:
        """Durable intent, a compare-and-set: a running (or suspended) turn becomes stopping with
        ``reason``. False, changing nothing, if it is stopping or settled already: the first stop wins."""
        ...

    def settle_turn(
        self, turn_id: str, status: TurnStatus, reason: StopReason | None, outcome: str | None
    ) -> None: ...
    def mark_resumed(self, turn_id: str, after: str) -> bool:
        """Count a resume of a suspended or crashed turn. False if a stop was decided meanwhile."""
        ...

    def park_turn(self, turn_id: str) -> bool:
        """Park an unfinished turn that is not stopping. False if it moved on, is parked already, or a
        resume was asked for it meanwhile."""
        ...

    def release_parked(self, turn_id: str) -> bool:
        """Ask the resume of a parked turn (compare-and-set). False if it is not parked (any more)."""
        ...

    # steps, messages, tool calls
    def insert_step(self, step_id: str, session_id: str, turn_id: str, created_at: str) -> Callable[[], int]:
        """Insert a running step; returns how to learn the session's 0-based model request index,
        known with the commit (asked for inside the transaction, it waits for the server)."""
        ...

    def queued_turn(self, expected: TurnRow) -> TurnRow | None:
        """The turn ``expected`` (read queued earlier) as it reads now, or None when it is not queued
        any more. A store across a network may take it as ``expected`` and have that checked."""
        ...

    def next_turn_later(self, session_id: str) -> Callable[[], TurnRow | None]:
        """``next_turn`` as this transaction reads it here, learned with the commit."""
        ...

    def interruptible_turn_status(
        self, session_id: str, running: str | None
    ) -> tuple[str, TurnStatus] | None:
        """The id and status of ``interruptible_turn``; ``running``: the turn the caller knows runs
        (a store across a network may take it, and have that checked before the commit)."""
        ...

    def pending_waits_of_call(
        self, session_id: str, call_id: str
    ) -> tuple[PermissionRequest | None, Form | None]:
        """The call's pending permission request and form (a store across a network may take none
        to be left, and have that checked before the commit)."""
        ...

    def step_running(self, turn_id: str, step_id: str) -> bool:
        """Whether the step runs still (a store across a network may take it to, checked so)."""
        ...

    def running_calls_of_step(self, turn_id: str, step_id: str) -> list[ToolCallRow]:
        """The step's unsettled calls, in order (a store across a network may take none to be
        left, checked so)."""
        ...

    def history_after_later(
        self, session_id: str, after_ord: int
    ) -> Callable[[], tuple[list[StoredMessage], dict[str, str | None]]]:
        """``history_after`` as this transaction reads it here, learned with the commit."""
        ...

    def session_rules_later(self, session_id: str) -> Callable[[], list[Rule]]:
        """``session_rules`` as this transaction reads them here, learned with the commit."""
        ...

    def stop_intent(self, turn_id: str, expected: StopReason | None) -> StopReason | None:
        """The reason of the stop intent recorded for the turn, None when it has none. ``expected``:
        what the caller knows it to be; a store across a network takes it and has it checked
        before the commit (a wrong one costs the transaction a second run, never a wrong answer)."""
        ...

    def settle_step(self, step_id: str, status: StepStatus, reason: StopReason | None) -> None: ...
    def succeed_step(self, step_id: str) -> bool:
        """Mark a running step succeeded. False, writing nothing, when it is not running (any more)."""
        ...

    def save_streamed_text(self, step_id: str, text: str) -> None: ...
    def insert_message(
        self, message_id: str, session_id: str, turn_id: str, role: str, created_at: str
    ) -> None: ...
    def add_text_part(self, message_id: str, text: str, status: TextStatus = "complete") -> None: ...
    def add_tool_part(self, message_id: str, call_id: str) -> None: ...
    def insert_tool_call(self, call: ToolCallRow, created_at: str) -> None: ...
    def settle_tool_call(
        self,
        session_id: str,
        call_id: str,
        *,
        output: Any = None,
        error: ToolError | None = None,
        partial: Partial | None = None,
    ) -> bool:
        """Settle a running call as succeeded (no ``error``) or failed. False if already settled."""
        ...

    def mark_tool_started(self, session_id: str, call_id: str) -> None: ...
    def set_tool_progress(self, session_id: str, call_id: str, progress: Any) -> None: ...

    # process groups
    def record_process_group(self, group: ProcessGroupRow, created_at: str) -> None:
        """Record a process group just started, before anyone uses it: if its owner dies, a later
        start finds it here and kills it."""
        ...

    def forget_process_group(self, group: ProcessGroupRow) -> None:
        """``forget_process_groups`` of one group, without learning whether it was recorded."""
        ...

    def forget_process_groups(self, groups: list[ProcessGroupRow]) -> int:
        """Delete the records of ``groups`` (each named by its boot id, pgid and start), dead and
        reaped or killed; returns how many there were."""
        ...

    # claims and instances
    def hold_session(self, session_id: str) -> None:
        """Wait for, then hold to this transaction's end, the session's write lock, which every
        fenced write of the session takes first: what this transaction reads of the session after it
        cannot change before its commit. Call it before the reads a claim is decided on. (SQLite
        holds one lock for every write, so there it is held already.)"""
        ...

    def acquire_claim(self, session_id: str, owner: str, since: str, *, takeover_from: str | None) -> int:
        """Compare-and-set: take the claim if released, or (``takeover_from``) held by that owner.
        Returns the new epoch, or 0 when another owner holds the claim. Holds the session's lock
        (``hold_session``) from here on."""
        ...

    def acquire_claim_later(
        self, session_id: str, owner: str, since: str, *, takeover_from: str | None
    ) -> Callable[[], int] | None:
        """``acquire_claim`` with its epoch learned with the commit; None when another owner holds
        the claim. A store across a network may take the claim to be free and have that checked
        before the commit."""
        ...

    def set_claim_state(self, session_id: str, state: ClaimState) -> None:
        """``released`` (the owner is cleared) or ``suspended`` (the owner is kept for the record)."""
        ...

    def suspend_dead_claim(self, session_id: str, dead_owner: str | None) -> bool:
        """Compare-and-set: the claim a dead ``dead_owner`` holds becomes suspended (owner kept, epoch
        unchanged: the next owner's takeover raises it). False if another took it."""
        ...

    def register_instance(self, instance: InstanceRow, started_at: str) -> None:
        """Record an instance; its heartbeat is the store's clock now (``Reader.clock``)."""
        ...

    def beat(self, instance_id: str) -> None:
        """Refresh the instance's heartbeat to the store's clock now."""
        ...

    def mark_instance_stopped(self, instance_id: str) -> None: ...

    # permission requests, rules, forms
    def insert_permission(
        self, request: PermissionRequest, turn_id: str, deadline_at: float | None
    ) -> None: ...
    def reply_permission(
        self, request_id: str, decision: str, message: str | None, edited_input: Any = None
    ) -> bool:
        """Settle a pending request with a reply (and the input the person changed the call's to)."""
        ...

    def revoke_permission(self, request_id: str, reason: StopReason) -> bool: ...
    def add_session_rule(self, session_id: str, rule: Rule) -> None: ...
    def insert_form(
        self, form: Form, turn_id: str, deadline_at: float | None, resume: dict[str, Any] | None = None
    ) -> None:
        """Store a pending form; ``resume``: what a retry of its call needs after a restart (an MCP
        server's 2026-07-28 question)."""
        ...

    def settle_form(
        self,
        form_id: str,
        status: FormStatus,
        *,
        answers: dict[str, Any] | None = None,
        message: str | None = None,
        reason: StopReason | None = None,
    ) -> bool: ...

    # events
    def prune_events(self, cutoff: str, after: int, limit: int) -> PruneBatch:
        """Delete old events of settled turns among the next ``limit`` after ``after`` (retention)."""
        ...
