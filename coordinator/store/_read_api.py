"""The store's read view, as a Protocol: what every query of the coordinator may ask."""

from __future__ import annotations

from typing import Any, Protocol

from coordinator.events import Event
from coordinator.records import Form, Message, Node, PermissionRequest, Rule, Session
from coordinator.store._inputs import Boundary
from coordinator.store.rows import (
    ClaimRow,
    InstanceRow,
    ProcessGroupRow,
    SteerRow,
    StoredMessage,
    ToolCallRow,
    TurnRow,
    WaitRow,
)


class Reader(Protocol):
    """The read view. Outside a transaction each call sees what is committed; inside one, its writes."""

    # sessions
    def get_session(self, session_id: str) -> Session | None: ...
    def session_exists(self, session_id: str) -> bool:
        """Whether the session exists: ``get_session``'s answer without its owner and claim."""
        ...

    def list_sessions(self) -> list[Session]: ...
    def session_page(self, limit: int, before: str | None, owner: str | None = None) -> list[Session] | None:
        """At most ``limit`` sessions, newest first, older than ``before``, of ``owner`` when given;
        None if ``before`` is unknown (or not ``owner``'s)."""
        ...

    def session_owner(self, session_id: str) -> tuple[bool, str | None]:
        """Whether the session exists, and the principal it belongs to (None: nobody's)."""
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

    # steers, the queue, soft stops
    def boundary(self, turn_id: str) -> Boundary:
        """What the turn's next step boundary acts on: its status, its soft stop, its pending steers."""
        ...

    def pending_steers(self, turn_id: str) -> list[SteerRow]:
        """The turn's steers not yet delivered nor queued, in the order they were accepted."""
        ...

    def get_steer(self, steer_id: str) -> SteerRow | None: ...
    def steers_of_session(self, session_id: str) -> list[SteerRow]:
        """Every steer sent into the session's turns, in the order they were accepted."""
        ...

    def active_turn(self, session_id: str) -> TurnRow | None:
        """The session's turn that began and has not settled (running, stopping or suspended)."""
        ...

    def queued_turns(self, session_id: str) -> list[TurnRow]:
        """The session's queued turns in the order they will run (a task call's turns left out)."""
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
    def has_leftovers(self, turn_id: str) -> bool:
        """Whether anything of the turn is unsettled: a running call or step, a pending request or form."""
        ...

    def running_calls_of_turn(self, turn_id: str) -> list[ToolCallRow]:
        """The turn's unsettled calls, in order: what a settlement's sweep has left to fail."""
        ...

    def tool_started(self, session_id: str, call_id: str) -> bool: ...

    # process groups
    def process_group_of(self, session_id: str, call_id: str) -> ProcessGroupRow | None:
        """The process group the call's tool recorded and has not reaped yet (its first), if any."""
        ...

    def process_groups_of(self, owner: str) -> list[ProcessGroupRow]:
        """The process groups instance ``owner`` recorded and has not reaped yet."""
        ...

    def process_groups_with_owners(self, me: str) -> list[tuple[ProcessGroupRow, InstanceRow | None]]:
        """The recorded process groups of every instance but ``me``, each with its owner (None when
        the store has no such instance): what a start and the watch judge by the owner's liveness."""
        ...

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
    def decided_waits(self, wait_ids: list[str]) -> tuple[dict[str, tuple[str, str | None, Any]], list[Form]]:
        """Of ``wait_ids``, the requests replied (id: decision, message, edited input) and the forms submitted
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
    def form_resume(self, form_id: str) -> dict[str, Any] | None:
        """What a retry of the form's call needs after a restart, if it was stored with it."""
        ...

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
