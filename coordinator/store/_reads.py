"""The reads of the store, one body of SQL for every backend (over ``_sql.Connection``).

``SqlReader`` implements the read view (``store.api.Reader``); a transaction reads through the same
methods on its own connection (``_writes.SqlTransaction``), so it sees its own writes.
"""

from __future__ import annotations

import json
from typing import Any

from coordinator import errors
from coordinator.clock import rfc3339
from coordinator.events import Event
from coordinator.reasons import ParentLink
from coordinator.records import ClaimView, Form, Message, Node, PermissionRequest, Rule, Session
from coordinator.store import _history, api
from coordinator.store._sql import Connection, one
from coordinator.store.rows import (
    CLAIM_ROW,
    FORM_ROW,
    INSTANCE_ROW,
    PERMISSION_ROW,
    TOOL_CALL_ROW,
    TURN_ROW,
    WAIT_ROW,
    ClaimRow,
    InstanceRow,
    StoredMessage,
    ToolCallRow,
    TurnRow,
    WaitRow,
)

# A claim's owner as clients see it: the node's name (``[server] node_id``, as ``GET /api/node`` lists
# it) when it has one, else the owning instance's id.
_SESSION_SELECT = """
    SELECT s.id, s.title, s.last_outcome, s.created_at, COALESCE(i.node_id, c.owner), c.state, c.since,
           s.parent_session_id, s.parent_call_id
    FROM sessions s LEFT JOIN claims c ON c.session_id = s.id LEFT JOIN instances i ON i.id = c.owner
"""

_TURNS = f"SELECT {TURN_ROW.select} FROM turns"
_CALLS = f"SELECT {TOOL_CALL_ROW.select} FROM tool_calls"
_PERMISSIONS = f"SELECT {PERMISSION_ROW.select} FROM permission_requests"
_FORMS = f"SELECT {FORM_ROW.select} FROM forms"
# ``parked != 0`` is the partial index's own condition (``turns_parked``): a query uses that index
# only when its WHERE says so itself.
_PARKED = "SELECT id FROM turns WHERE parked != 0 AND parked = ?"
_TURN_STATUS, _TURN_ORD = TURN_ROW.columns.index("status"), TURN_ROW.columns.index("ord")


def _queued_last(row: tuple[Any, ...]) -> tuple[bool, int]:
    return row[_TURN_STATUS] == "queued", row[_TURN_ORD]


MAX_SEQ = 2**63 - 1
"""The largest seq a store holds (a signed 64-bit integer)."""


def _session(row: tuple[Any, ...]) -> Session:
    """A session row joined with its claim: the status is the claim's, not a column of its own."""
    id, title, last_outcome, created_at, owner, state, since, parent_session_id, parent_call_id = row
    held = state in ("held", "suspended")
    status = {"held": "busy", "suspended": "suspended"}.get(state or "", "idle")
    return Session(
        id=id,
        title=title,
        status=status,  # type: ignore[arg-type]
        claim=ClaimView(owner=owner, since=since) if held else None,
        last_outcome=last_outcome,
        created_at=created_at,
        parent=None
        if parent_session_id is None
        else ParentLink(session_id=parent_session_id, call_id=parent_call_id),
    )


# A call's wait: the pending one, or the latest whatever its status.
_OF_CALL = {
    True: " WHERE session_id = ? AND call_id = ? AND status = 'pending'",
    False: " WHERE session_id = ? AND call_id = ? ORDER BY ord DESC LIMIT 1",
}


_IN_CHUNK = 500
"""Values of one ``IN (...)`` list at most: well under any backend's limit of parameters."""


def _in(column: str, values: list[str]) -> str:
    """`` AND column IN (?, ...)`` for ``values`` (never empty: a session and its descendants)."""
    return f" AND {column} IN ({', '.join('?' for _ in values)})"


class SqlReader(api.Reader):
    """Every read of every table. Outside a transaction each statement sees what is committed."""

    def __init__(self, sql: Connection) -> None:
        self.sql = sql

    def _one(self, query: str, args: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
        return one(self.sql, query, args)

    def _all(self, query: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self.sql.all(query, args)

    # sessions -------------------------------------------------------------------------------
    def get_session(self, session_id: str) -> Session | None:
        row = self._one(_SESSION_SELECT + " WHERE s.id = ?", (session_id,))
        return None if row is None else _session(row)

    def session_exists(self, session_id: str) -> bool:
        return self._one("SELECT 1 FROM sessions WHERE id = ?", (session_id,)) is not None

    def list_sessions(self) -> list[Session]:
        return [_session(r) for r in self._all(_SESSION_SELECT + " ORDER BY s.ord")]

    def session_page(self, limit: int, before: str | None) -> list[Session] | None:
        if before is None:
            rows = self._all(_SESSION_SELECT + " ORDER BY s.ord DESC LIMIT ?", (limit,))
        else:
            cursor = self._one("SELECT ord FROM sessions WHERE id = ?", (before,))
            if cursor is None:
                return None
            rows = self._all(
                _SESSION_SELECT + " WHERE s.ord < ? ORDER BY s.ord DESC LIMIT ?", (cursor[0], limit)
            )
        return [_session(r) for r in rows]

    def descendants(self, session_id: str) -> list[str]:
        rows = self._all(
            "WITH RECURSIVE tree(id) AS (SELECT id FROM sessions WHERE parent_session_id = ? "
            "UNION SELECT s.id FROM sessions s JOIN tree t ON s.parent_session_id = t.id) "
            "SELECT id FROM tree",
            (session_id,),
        )
        return [r[0] for r in rows]

    def session_depth(self, session_id: str) -> int:
        row = self._one(
            "WITH RECURSIVE up(id, depth) AS (SELECT parent_session_id, 0 FROM sessions WHERE id = ? "
            "UNION ALL SELECT s.parent_session_id, up.depth + 1 FROM sessions s JOIN up ON s.id = up.id) "
            "SELECT MAX(depth) FROM up WHERE id IS NOT NULL",
            (session_id,),
        )
        return 0 if row is None or row[0] is None else int(row[0]) + 1

    # turns ----------------------------------------------------------------------------------
    def get_turn(self, turn_id: str) -> TurnRow | None:
        return TURN_ROW.load_or_none(self._one(_TURNS + " WHERE id = ?", (turn_id,)))

    def turn_of_task_call(self, session_id: str, call_id: str) -> TurnRow | None:
        row = self._one(_TURNS + " WHERE parent_session_id = ? AND parent_call_id = ?", (session_id, call_id))
        return TURN_ROW.load_or_none(row)

    def turn_ids_of_session(self, session_id: str) -> list[str]:
        return [
            r[0] for r in self._all("SELECT id FROM turns WHERE session_id = ? ORDER BY ord", (session_id,))
        ]

    def next_turn(self, session_id: str) -> TurnRow | None:
        # A task call's turn is run by that call, never by the session's own actor.
        # The unfinished turn before the queued ones, then by ord; chosen here among the session's
        # few unsettled turns (the ``turns_unsettled`` index), read twice a turn.
        rows = self._all(
            _TURNS + " WHERE session_id = ? AND status != 'settled' AND parent_call_id IS NULL",
            (session_id,),
        )
        return TURN_ROW.load(min(rows, key=_queued_last)) if rows else None

    def stopping_turns(self, turn_ids: list[str]) -> list[TurnRow]:
        rows: list[tuple[Any, ...]] = []
        for start in range(0, len(turn_ids), _IN_CHUNK):
            chunk = turn_ids[start : start + _IN_CHUNK]
            rows += self._all(_TURNS + " WHERE status = 'stopping'" + _in("id", chunk), tuple(chunk))
        return [TURN_ROW.load(row) for row in rows]

    def running_turn(self, session_id: str) -> TurnRow | None:
        return TURN_ROW.load_or_none(
            self._one(_TURNS + " WHERE session_id = ? AND status = 'running'", (session_id,))
        )

    def unfinished_turns_with_owners(
        self, me: str
    ) -> list[tuple[TurnRow, ClaimRow | None, InstanceRow | None]]:
        # One statement for what was a claim and an instance read for each turn, every second (the
        # watch); the turns whose claim ``me`` holds while it lives are not taken over: left out.
        turn = ", ".join(f"t.{column}" for column in TURN_ROW.columns)
        claim = ", ".join(f"c.{column}" for column in CLAIM_ROW.columns)
        owner = ", ".join(f"i.{column}" for column in INSTANCE_ROW.columns)
        rows = self._all(
            f"SELECT {turn}, {claim}, {owner} FROM turns t "
            "LEFT JOIN claims c ON c.session_id = t.session_id LEFT JOIN instances i ON i.id = c.owner "
            "WHERE t.status IN ('running', 'stopping', 'suspended') AND t.parent_call_id IS NULL "
            "AND NOT EXISTS (SELECT 1 FROM claims mine JOIN instances alive ON alive.id = mine.owner "
            "WHERE mine.session_id = t.session_id AND mine.state = 'held' AND mine.owner = ? AND alive.stopped = 0) "
            "ORDER BY t.rowid",
            (me,),
        )
        claim_at = len(TURN_ROW.columns)
        owner_at = claim_at + len(CLAIM_ROW.columns)
        return [
            (
                TURN_ROW.load(row[:claim_at]),
                CLAIM_ROW.load_or_none(row[claim_at:owner_at] if row[claim_at] is not None else None),
                INSTANCE_ROW.load_or_none(row[owner_at:] if row[owner_at] is not None else None),
            )
            for row in rows
        ]

    def sessions_with_queued_turns(self) -> list[str]:
        rows = self._all(
            # A claim is looked up by its session for each queued turn: a NOT IN of every claim not
            # released read every claim ever made (one a session) whenever a turn was queued.
            "SELECT session_id FROM turns t WHERE status = 'queued' AND parent_call_id IS NULL "
            "AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.session_id = t.session_id AND c.state != 'released') "
            "GROUP BY session_id ORDER BY MIN(rowid)"
        )
        return [r[0] for r in rows]

    def resume_asked_turn_ids(self) -> set[str]:
        return {r[0] for r in self._all(_PARKED, (2,))}

    def parked_turn_ids(self) -> set[str]:
        return {r[0] for r in self._all(_PARKED, (1,))}

    def is_parked(self, turn_id: str) -> bool:
        return self._one("SELECT 1 FROM turns WHERE id = ? AND parked = 1", (turn_id,)) is not None

    def parked_turn(self, session_id: str) -> TurnRow | None:
        return TURN_ROW.load_or_none(
            self._one(_TURNS + " WHERE parked != 0 AND session_id = ? AND parked = 1", (session_id,))
        )

    def interruptible_turn(self, session_id: str) -> TurnRow | None:
        row = self._one(
            # ``status != 'settled'`` as the index of unsettled turns says it, so that it is used.
            _TURNS + " WHERE session_id = ? AND status != 'settled' "
            "AND (status = 'running' OR (status = 'suspended' AND parked != 0)) ORDER BY ord LIMIT 1",
            (session_id,),
        )
        return TURN_ROW.load_or_none(row)

    def unsettled_turn_statuses(self, session_id: str) -> list[str]:
        rows = self._all(
            "SELECT status FROM turns WHERE session_id = ? AND status != 'settled' ORDER BY ord",
            (session_id,),
        )
        return [r[0] for r in rows]

    # steps ----------------------------------------------------------------------------------
    def streamed_text(self, step_id: str) -> str:
        row = self._one("SELECT streamed_text FROM steps WHERE id = ?", (step_id,))
        return "" if row is None or row[0] is None else str(row[0])

    def running_steps(self, turn_id: str) -> list[str]:
        rows = self._all(
            "SELECT id FROM steps WHERE turn_id = ? AND status = 'running' ORDER BY ord", (turn_id,)
        )
        return [r[0] for r in rows]

    # history --------------------------------------------------------------------------------
    def history(self, session_id: str) -> list[Message]:
        return self.history_with_model_ids(session_id)[0]

    def history_with_model_ids(self, session_id: str) -> tuple[list[Message], dict[str, str | None]]:
        return _history.history_with_model_ids(self.sql, session_id, self.tool_calls_of_session(session_id))

    def history_after(
        self, session_id: str, after_ord: int
    ) -> tuple[list[StoredMessage], dict[str, str | None]]:
        return _history.history_after(self.sql, session_id, after_ord)

    # tool calls -----------------------------------------------------------------------------
    def call_id_taken(self, session_id: str, call_id: str) -> bool:
        row = self._one(
            "SELECT 1 FROM tool_calls WHERE session_id = ? AND call_id = ?", (session_id, call_id)
        )
        return row is not None

    def get_tool_call(self, session_id: str, call_id: str) -> ToolCallRow | None:
        row = self._one(_CALLS + " WHERE session_id = ? AND call_id = ?", (session_id, call_id))
        return TOOL_CALL_ROW.load_or_none(row)

    def tool_calls_of_session(self, session_id: str) -> list[ToolCallRow]:
        rows = self._all(_CALLS + " WHERE session_id = ? ORDER BY rowid", (session_id,))
        return [TOOL_CALL_ROW.load(r) for r in rows]

    def tool_calls_of_turn(self, turn_id: str) -> list[ToolCallRow]:
        return [
            TOOL_CALL_ROW.load(r) for r in self._all(_CALLS + " WHERE turn_id = ? ORDER BY ord", (turn_id,))
        ]

    def running_calls_of_turn(self, turn_id: str) -> list[ToolCallRow]:
        return [
            TOOL_CALL_ROW.load(r)
            for r in self._all(_CALLS + " WHERE turn_id = ? AND status = 'running' ORDER BY ord", (turn_id,))
        ]

    def tool_started(self, session_id: str, call_id: str) -> bool:
        row = self._one(
            "SELECT tool_started FROM tool_calls WHERE session_id = ? AND call_id = ?", (session_id, call_id)
        )
        return row is not None and bool(row[0])

    def process_group_of(self, session_id: str, call_id: str) -> Any:
        row = self._one(
            "SELECT process_group FROM tool_calls WHERE session_id = ? AND call_id = ?", (session_id, call_id)
        )
        return None if row is None or row[0] is None else json.loads(row[0])

    # claims and instances -------------------------------------------------------------------
    def get_claim(self, session_id: str) -> ClaimRow | None:
        return CLAIM_ROW.load_or_none(
            self._one(f"SELECT {CLAIM_ROW.select} FROM claims WHERE session_id = ?", (session_id,))
        )

    def claims_in_state(self, state: str) -> list[ClaimRow]:
        rows = self._all(f"SELECT {CLAIM_ROW.select} FROM claims WHERE state = ?", (state,))
        return [CLAIM_ROW.load(r) for r in rows]

    def fence(self, session_id: str, owner: str, epoch: int) -> None:
        # One indexed probe, no record built: every write of a turn runs this.
        held = self._one(
            "SELECT 1 FROM claims WHERE session_id = ? AND owner = ? AND epoch = ? AND state = 'held'",
            (session_id, owner, epoch),
        )
        if held is None:
            raise errors.Fenced(session_id=session_id, epoch=epoch)

    def live_nodes(self, lease: float) -> list[Node]:
        now = self.clock()
        rows = self._all(
            "SELECT i.id, i.node_id, i.host, i.started_at, i.heartbeat, "
            "(SELECT COUNT(*) FROM claims c WHERE c.owner = i.id AND c.state = 'held') "
            "FROM instances i WHERE i.stopped = 0 AND i.heartbeat >= ? ORDER BY i.started_at, i.id",
            (now - lease,),
        )
        return [
            Node(
                id=node_id or id, host=host, since=since, heartbeat_at=rfc3339(heartbeat), sessions=int(held)
            )
            for id, node_id, host, since, heartbeat, held in rows
        ]

    def get_instance(self, instance_id: str) -> InstanceRow | None:
        return INSTANCE_ROW.load_or_none(
            self._one(f"SELECT {INSTANCE_ROW.select} FROM instances WHERE id = ?", (instance_id,))
        )

    # permission requests and rules ----------------------------------------------------------
    def get_permission(self, request_id: str) -> PermissionRequest | None:
        return PERMISSION_ROW.load_or_none(self._one(_PERMISSIONS + " WHERE id = ?", (request_id,)))

    def decided_waits(self, wait_ids: list[str]) -> tuple[dict[str, tuple[str, str | None]], list[Form]]:
        # Of the waits this process runs, the few decided meanwhile (by another process): a read of
        # each, every second, cost 21 ms with 1,000 people to answer.
        replied: dict[str, tuple[str, str | None]] = {}
        settled: list[Form] = []
        for start in range(0, len(wait_ids), _IN_CHUNK):
            chunk = wait_ids[start : start + _IN_CHUNK]
            for request_id, decision, message in self._all(
                "SELECT id, decision, message FROM permission_requests WHERE status = 'replied' "
                "AND decision IS NOT NULL" + _in("id", chunk),
                tuple(chunk),
            ):
                replied[request_id] = (decision, message)
            rows = self._all(
                _FORMS + " WHERE status IN ('submitted', 'cancelled')" + _in("id", chunk), tuple(chunk)
            )
            settled += [FORM_ROW.load(row) for row in rows]
        return replied, settled

    def permission_wait_row(self, request_id: str) -> WaitRow | None:
        row = self._one(f"SELECT {WAIT_ROW.select} FROM permission_requests WHERE id = ?", (request_id,))
        return WAIT_ROW.load_or_none(row)

    def pending_permissions(
        self, session_id: str | None = None, turn_id: str | None = None, session_ids: list[str] | None = None
    ) -> list[PermissionRequest]:
        where, args = _pending_filter(session_id, turn_id, session_ids)
        return [PERMISSION_ROW.load(r) for r in self._all(_PERMISSIONS + where + " ORDER BY ord", args)]

    def permission_of_call(self, session_id: str, call_id: str, *, pending: bool) -> PermissionRequest | None:
        return PERMISSION_ROW.load_or_none(self._one(_PERMISSIONS + _OF_CALL[pending], (session_id, call_id)))

    def session_rules(self, session_id: str) -> list[Rule]:
        rows = self._all(
            "SELECT action, resource, effect FROM session_rules WHERE session_id = ? ORDER BY ord",
            (session_id,),
        )
        return [Rule(action=a, resource=r, effect=e) for a, r, e in rows]

    # forms ----------------------------------------------------------------------------------
    def get_form(self, form_id: str) -> Form | None:
        return FORM_ROW.load_or_none(self._one(_FORMS + " WHERE id = ?", (form_id,)))

    def form_wait_row(self, form_id: str) -> WaitRow | None:
        return WAIT_ROW.load_or_none(
            self._one(f"SELECT {WAIT_ROW.select} FROM forms WHERE id = ?", (form_id,))
        )

    def pending_forms(
        self, session_id: str | None = None, turn_id: str | None = None, session_ids: list[str] | None = None
    ) -> list[Form]:
        where, args = _pending_filter(session_id, turn_id, session_ids)
        return [FORM_ROW.load(r) for r in self._all(_FORMS + where + " ORDER BY ord", args)]

    def form_of_call(self, session_id: str, call_id: str, *, pending: bool) -> Form | None:
        return FORM_ROW.load_or_none(self._one(_FORMS + _OF_CALL[pending], (session_id, call_id)))

    # events ---------------------------------------------------------------------------------
    def events_after(
        self, after: int, session_id: str | None = None, limit: int = 500, upto: int | None = None
    ) -> list[Event]:
        high = MAX_SEQ if upto is None else upto
        query = "SELECT seq, type, session_id, at, payload FROM events WHERE seq > ? AND seq <= ?"
        args: tuple[Any, ...] = (after, high)
        if session_id is not None:
            query, args = query + " AND session_id = ?", (*args, session_id)
        rows = self._all(query + " ORDER BY seq LIMIT ?", (*args, limit))
        return [
            Event(seq=seq, type=type, session_id=sid, at=at, payload=json.loads(payload))
            for seq, type, sid, at, payload in rows
        ]

    def logged_lines(self, session_id: str, call_id: str) -> list[str]:
        log, of_call = self.sql.json_text("payload", "log"), self.sql.json_text("payload", "call_id")
        # From the seq the call began at: a read bounded by the call's life, not the session's.
        began = "COALESCE((SELECT seq_at_start FROM tool_calls WHERE session_id = ? AND call_id = ?), 0)"
        rows = self._all(
            f"SELECT {log} FROM events WHERE session_id = ? AND seq > {began} "
            f"AND type = 'session.tool.progress' AND {of_call} = ? AND {log} IS NOT NULL ORDER BY seq",
            (session_id, session_id, call_id, call_id),
        )
        return [r[0] for r in rows]

    def last_seq(self) -> int:
        return self.sql.last_seq()

    def page_counts(self) -> tuple[int, int]:
        return self.sql.page_counts()

    def clock(self) -> float:
        return self.sql.clock()

    def event_horizon(self) -> int:
        row = self._one("SELECT CAST(value AS BIGINT) FROM store_meta WHERE key = 'event_horizon'")
        return 0 if row is None else int(row[0])

    def oldest_seq_after(self, after: int) -> int:
        row = self._one("SELECT MIN(seq) FROM events WHERE seq > ?", (after,))
        return self.last_seq() + 1 if row is None or row[0] is None else int(row[0])


def _pending_filter(
    session_id: str | None, turn_id: str | None, session_ids: list[str] | None
) -> tuple[str, tuple[Any, ...]]:
    """`` WHERE status = 'pending' ...`` of one session, of several, or of one turn."""
    where = " WHERE status = 'pending'"
    args: tuple[Any, ...] = ()
    if session_id is not None:
        where, args = where + " AND session_id = ?", (*args, session_id)
    if session_ids is not None:
        where, args = where + _in("session_id", session_ids), (*args, *session_ids)
    if turn_id is not None:
        where, args = where + " AND turn_id = ?", (*args, turn_id)
    return where, args
