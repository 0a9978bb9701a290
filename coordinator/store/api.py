"""The store's interface: a read view, a write transaction and the store itself, as Protocols.

The coordinator and the actors are typed against these and nothing else, in the way httpx's client is
written against its transports: ``sqlite`` and ``postgres`` are backends behind them, chosen by
``open_store(url)``. A transaction is a synchronous function of a ``Transaction`` that the store runs
(``await store.write(body)``): on SQLite on the trio thread, on PostgreSQL in a worker thread, and in
both cases whole or not at all. Its body must touch nothing but its ``tx`` and the values it was
given, and may be run again (a PostgreSQL deadlock is retried): it decides, the caller acts on what it
returns once it is committed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import trio

from coordinator.events import Draft, Event
from coordinator.reasons import ParentLink, StopReason, TextStatus
from coordinator.records import Form, Message, Node, Partial, PermissionRequest, Rule, Session, ToolError
from coordinator.store._deletion import PruneBatch
from coordinator.store.rows import ClaimRow, InstanceRow, StoredMessage, ToolCallRow, TurnRow, WaitRow

T = TypeVar("T")

Fence = tuple[str, str, int]
"""A claim a transaction must find held, checked in the same transaction: session id, owner, epoch."""


class Reader(Protocol):
    """The read view. Outside a transaction each call sees what is committed; inside one, its writes."""

    # sessions
    def get_session(self, session_id: str) -> Session | None: ...
    def session_exists(self, session_id: str) -> bool:
        """Whether the session exists: ``get_session``'s answer without its owner and claim."""
        ...

    def list_sessions(self) -> list[Session]: ...
    def session_page(self, limit: int, before: str | None) -> list[Session] | None:
        """At most ``limit`` sessions, newest first, older than ``before``; None if ``before`` is unknown."""
        ...

    def descendants(self, session_id: str) -> list[str]:
        """The ids of the session's sub-agent sessions at every depth (not the session itself)."""
        ...

    def session_depth(self, session_id: str) -> int:
        """How many parents the session has: 0 for a top-level session, 1 for its sub-agents..."""
        ...

    # turns
    def get_turn(self, turn_id: str) -> TurnRow | None: ...
    def turn_of_task_call(self, session_id: str, call_id: str) -> TurnRow | None:
        """The sub-agent turn the task call ``call_id`` of session ``session_id`` runs, if it made one."""
        ...

    def turn_ids_of_session(self, session_id: str) -> list[str]:
        """Every turn of the session, queued ones included, in prompt order."""
        ...

    def next_turn(self, session_id: str) -> TurnRow | None:
        """The turn the session should run next: one left unfinished first, then the oldest queued."""
        ...

    def running_turn(self, session_id: str) -> TurnRow | None: ...
    def unfinished_turns_with_owners(
        self, me: str
    ) -> list[tuple[TurnRow, ClaimRow | None, InstanceRow | None]]:
        """Turns a previous process left running, stopping or suspended, oldest first, each with its
        claim and the claim's owner, leaving out the turns whose claim instance ``me`` holds while it
        lives (not stopped): what the watch looks at. A task call's turn is not among them (its
        parent's resume runs it, inside that call)."""
        ...

    def stopping_turns(self, turn_ids: list[str]) -> list[TurnRow]:
        """Those of ``turn_ids`` whose stop is committed (status stopping)."""
        ...

    def sessions_with_queued_turns(self) -> list[str]:
        """Sessions with a queued turn and no held or suspended claim (those run it themselves)."""
        ...

    def resume_asked_turn_ids(self) -> set[str]:
        """Turns released from parking whose takeover has not happened yet."""
        ...

    def parked_turn_ids(self) -> set[str]: ...
    def is_parked(self, turn_id: str) -> bool: ...
    def parked_turn(self, session_id: str) -> TurnRow | None: ...
    def interruptible_turn(self, session_id: str) -> TurnRow | None:
        """The turn an interrupt stops: the running one, else a parked one (its claim suspended)."""
        ...

    def unsettled_turn_statuses(self, session_id: str) -> list[str]:
        """The statuses of the session's turns that are queued, running, stopping or suspended."""
        ...

    # steps and history
    def streamed_text(self, step_id: str) -> str:
        """The text a step had streamed at its last save ("" when none was saved)."""
        ...

    def running_steps(self, turn_id: str) -> list[str]: ...
    def history(self, session_id: str) -> list[Message]:
        """The session's messages with their parts, tool parts joined with their calls."""
        ...

    def history_with_model_ids(self, session_id: str) -> tuple[list[Message], dict[str, str | None]]:
        """The history, and each tool call's model id (what the model is sent back)."""
        ...

    def history_after(
        self, session_id: str, after_ord: int
    ) -> tuple[list[StoredMessage], dict[str, str | None]]:
        """The messages whose ``ord`` is above ``after_ord``, with their ord and whether their turn is
        settled, and the model ids of their calls: the tail of ``history``."""
        ...

    # tool calls
    def call_id_taken(self, session_id: str, call_id: str) -> bool: ...
    def get_tool_call(self, session_id: str, call_id: str) -> ToolCallRow | None: ...
    def tool_calls_of_session(self, session_id: str) -> list[ToolCallRow]: ...
    def tool_calls_of_turn(self, turn_id: str) -> list[ToolCallRow]: ...
    def running_calls_of_turn(self, turn_id: str) -> list[ToolCallRow]:
        """The turn's unsettled calls, in order: what a settlement's sweep has left to fail."""
        ...

    def tool_started(self, session_id: str, call_id: str) -> bool: ...
    def process_group_of(self, session_id: str, call_id: str) -> Any: ...

    # claims and instances
    def get_claim(self, session_id: str) -> ClaimRow | None: ...
    def claims_in_state(self, state: str) -> list[ClaimRow]: ...
    def fence(self, session_id: str, owner: str, epoch: int) -> None:
        """Raise ``Fenced`` unless ``owner`` still holds the claim at ``epoch``."""
        ...

    def get_instance(self, instance_id: str) -> InstanceRow | None: ...
    def live_nodes(self, lease: float) -> list[Node]:
        """The nodes whose heartbeat is younger than ``lease`` by the store's clock, oldest first,
        each with how many sessions it holds claims of (``GET /api/node``)."""
        ...

    # permission requests, rules, forms
    def get_permission(self, request_id: str) -> PermissionRequest | None: ...
    def permission_wait_row(self, request_id: str) -> WaitRow | None: ...
    def decided_waits(self, wait_ids: list[str]) -> tuple[dict[str, tuple[str, str | None]], list[Form]]:
        """Of ``wait_ids``, the requests replied (id: decision and message) and the forms submitted
        or cancelled."""
        ...

    def pending_permissions(
        self, session_id: str | None = None, turn_id: str | None = None, session_ids: list[str] | None = None
    ) -> list[PermissionRequest]:
        """Pending requests, in the order they were asked; of one session, of several, of one turn."""
        ...

    def permission_of_call(self, session_id: str, call_id: str, *, pending: bool) -> PermissionRequest | None:
        """The call's pending permission request (``pending``), or its last one whatever its status."""
        ...

    def session_rules(self, session_id: str) -> list[Rule]: ...
    def get_form(self, form_id: str) -> Form | None: ...
    def form_wait_row(self, form_id: str) -> WaitRow | None: ...
    def pending_forms(
        self, session_id: str | None = None, turn_id: str | None = None, session_ids: list[str] | None = None
    ) -> list[Form]: ...
    def form_of_call(self, session_id: str, call_id: str, *, pending: bool) -> Form | None:
        """The call's pending form (``pending``), or its last one whatever its status."""
        ...

    # events
    def events_after(
        self, after: int, session_id: str | None = None, limit: int = 500, upto: int | None = None
    ) -> list[Event]:
        """Events with ``after < seq <= upto`` (of one session, or all), in seq order, at most ``limit``."""
        ...

    def logged_lines(self, session_id: str, call_id: str) -> list[str]:
        """The lines a call's script printed, from its ``session.tool.progress`` events."""
        ...

    def last_seq(self) -> int:
        """The highest seq ever given, even if its event was deleted since."""
        ...

    def page_counts(self) -> tuple[int, int]:
        """The database's free pages and all its pages (0, 0 where the backend counts none)."""
        ...

    def clock(self) -> float:
        """The store's time (seconds since the epoch): heartbeats are written and judged by it."""
        ...

    def event_horizon(self) -> int:
        """The highest seq retention deleted (0 when it deleted none): a replay from below it has lost
        events and starts with ``stream.truncated``."""
        ...

    def oldest_seq_after(self, after: int) -> int:
        """The seq of the oldest kept event after ``after``; the next seq to be given when none."""
        ...


class Transaction(Reader, Protocol):
    """A write transaction's view. Events it emits reach subscribers only after its commit."""

    def emit(self, draft: Draft) -> Event:
        """Append an event to the log in this transaction; returns it with its seq."""
        ...

    def sync_soon(self) -> None:
        """Someone outside waits for this commit (a caller's answer, ``session.idle``): where commits
        are made durable in groups (SQLite), ask its sync as it commits, not once the process is
        idle, so that the disk works while the process goes on. Changes nothing about durability."""
        ...

    # sessions and turns
    def insert_session(
        self, session_id: str, title: str, created_at: str, parent: ParentLink | None = None
    ) -> None: ...
    def set_last_outcome(self, session_id: str, outcome: str) -> None: ...
    def delete_session(self, session_id: str) -> int:
        """Delete the session and everything it owns, its events included; returns how many events."""
        ...

    def insert_turn(
        self, turn_id: str, session_id: str, prompt: str, created_at: str, task: ParentLink | None = None
    ) -> None:
        """A queued turn; ``task``: the task call that runs it (a sub-agent's turn, run by that call)."""
        ...

    def set_turn_status(self, turn_id: str, status: str) -> None: ...
    def record_stop_intent(self, turn_id: str, reason: StopReason) -> bool:
        """Durable intent, a compare-and-set: a running (or suspended) turn becomes stopping with
        ``reason``. False, changing nothing, if it is stopping or settled already: the first stop wins."""
        ...

    def settle_turn(
        self, turn_id: str, status: str, reason: StopReason | None, outcome: str | None
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
    def insert_step(self, step_id: str, session_id: str, turn_id: str, created_at: str) -> int:
        """Insert a running step; returns the session's 0-based model request index."""
        ...

    def settle_step(self, step_id: str, status: str, reason: StopReason | None) -> None: ...
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

    def set_process_group(self, session_id: str, call_id: str, group: Any) -> None: ...
    def mark_tool_started(self, session_id: str, call_id: str) -> None: ...
    def set_tool_progress(self, session_id: str, call_id: str, progress: Any) -> None: ...

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

    def set_claim_state(self, session_id: str, state: str) -> None:
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
    def reply_permission(self, request_id: str, decision: str, message: str | None) -> bool: ...
    def revoke_permission(self, request_id: str, reason: StopReason) -> bool: ...
    def add_session_rule(self, session_id: str, rule: Rule) -> None: ...
    def insert_form(self, form: Form, turn_id: str, deadline_at: float | None) -> None: ...
    def settle_form(
        self,
        form_id: str,
        status: str,
        *,
        answers: dict[str, str] | None = None,
        message: str | None = None,
        reason: StopReason | None = None,
    ) -> bool: ...

    # events
    def prune_events(self, cutoff: str, after: int, limit: int) -> PruneBatch:
        """Delete old events of settled turns among the next ``limit`` after ``after`` (retention)."""
        ...


class Store(Protocol):
    """A backend: transactions, reads, durability, and who hears of a commit."""

    before_commit: Callable[[Reader], None] | None
    """A hook called inside every transaction right before its commit, with the transaction's view;
    it may raise ``StoreError`` to simulate a failing disk (the chaos campaign's store failures)."""

    last_own_seq: int
    """The seq of the last event this store committed (durable or not yet)."""

    async def write(self, body: Callable[[Transaction], T], *, fence: Fence | None = None) -> T:
        """Run ``body`` in a write transaction and commit it; returns what ``body`` returned.

        With ``fence=(session_id, owner, epoch)`` the transaction first checks that the claim is held
        so, and holds it so until the commit (a takeover waits for it). Returning does not mean
        durable: await ``durable()`` before telling anyone outside the process.

        **Cancellation:** a checkpoint before the transaction begins; once begun, it runs to its end.

        **Raises:** ``Fenced``; ``StoreBusy``, ``StoreFull``, ``StoreError``; whatever ``body`` raises
        (nothing of the transaction is kept then).
        """
        ...

    async def read(self, query: Callable[[Reader], T]) -> T:
        """Run ``query`` on the read view; returns what it returned. **Cancellation:** a checkpoint
        before it begins. **Raises:** ``StoreError``."""
        ...

    async def durable(self) -> None:
        """Wait until every commit made so far is durable and its events handed to ``on_durable``.

        Await it before acknowledging anything outside the process: answering a caller, starting a
        tool. **Cancellation:** safe; the commits become durable anyway. **Raises:** ``StoreError``.
        """
        ...

    def on_commit(self, callback: Callable[[Sequence[Event]], None]) -> None:
        """Call ``callback(events)`` right after each commit that appended events, durable or not yet."""
        ...

    def on_durable(self, callback: Callable[[Sequence[Event]], None]) -> None:
        """Call ``callback(events)`` once a commit that appended events is durable, in commit order."""
        ...

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the trio thread when another process may have committed (a
        notification from another node); never where the backend has no such news (SQLite)."""
        ...

    def observe(self, *, commit: Callable[[float], None], sync: Callable[[float], None]) -> None:
        """Hand the seconds of every successful commit, and of every sync, to these callbacks."""
        ...

    async def sync_now(self) -> None:
        """Make everything committed so far durable, other processes' commits included."""
        ...

    async def reclaim_space(self, pages: int) -> int:
        """Give free space back to the file system, a step at a time; returns what is left to give
        (-1: try later; 0 where the backend does this itself)."""
        ...

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The store's background work until cancelled: making commits durable in groups, and on
        PostgreSQL listening for other nodes' commits."""
        ...
