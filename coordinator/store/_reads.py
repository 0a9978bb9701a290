"""The reads of the store, one body of SQL for every backend (over ``_sql.Connection``).

``SqlReader`` implements the read view (``store.api.Reader``), with its reads of turns in
``_turn_reads.py`` and of waits in ``_wait_reads.py``; a transaction reads through the same methods on
its own connection (``_writes.SqlTransaction``), so it sees its own writes.
"""

from __future__ import annotations

import json
from typing import Any

from coordinator import errors
from coordinator.clock import rfc3339
from coordinator.events import Event
from coordinator.reasons import ParentLink
from coordinator.records import ClaimView, Node, Session
from coordinator.statuses import ClaimState
from coordinator.store import api
from coordinator.store._inputs import InputReads
from coordinator.store._process_groups import ProcessGroupReads
from coordinator.store._turn_reads import TurnReads
from coordinator.store._wait_reads import WaitReads
from coordinator.store.rows import CLAIM_ROW, INSTANCE_ROW, ClaimRow, InstanceRow

# A claim's owner as clients see it: the node's name (``[server] node_id``, as ``GET /api/node`` lists
# it) when it has one, else the owning instance's id.
_SESSION_SELECT = """
    SELECT s.id, s.title, s.last_outcome, s.created_at, COALESCE(i.node_id, c.owner), c.state, c.since,
           s.parent_session_id, s.parent_call_id, s.owner
    FROM sessions s LEFT JOIN claims c ON c.session_id = s.id LEFT JOIN instances i ON i.id = c.owner
"""

# A session's status (the wire's word) by its claim's state: idle when it has none, or released.
_SESSION_STATUS: dict[str, str] = {ClaimState.HELD: "busy", ClaimState.SUSPENDED: "suspended"}

MAX_SEQ = 2**63 - 1
"""The largest seq a store holds (a signed 64-bit integer)."""

# Every write of a turn runs it: built once (an enum formatted into a query costs a call each time).
_FENCE = (
    f"SELECT 1 FROM claims WHERE session_id = ? AND owner = ? AND epoch = ? AND state = '{ClaimState.HELD}'"
)


def _session(row: tuple[Any, ...]) -> Session:
    """A session row joined with its claim: the status is the claim's, not a column of its own."""
    id, title, last_outcome, created_at, owner, state, since, parent_session_id, parent_call_id, principal = (
        row
    )
    held = state in (ClaimState.HELD, ClaimState.SUSPENDED)
    status = _SESSION_STATUS.get(state or "", "idle")
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
        owner=principal,
    )


class SqlReader(TurnReads, WaitReads, InputReads, ProcessGroupReads, api.Reader):
    """Every read of every table. Outside a transaction each statement sees what is committed.

    Sessions, claims, instances and events are read here; turns and what runs in them in
    ``TurnReads``, the waits in ``WaitReads``, the recorded process groups in ``ProcessGroupReads``.
    """

    # sessions -------------------------------------------------------------------------------
    def get_session(self, session_id: str) -> Session | None:
        row = self._one(_SESSION_SELECT + " WHERE s.id = ?", (session_id,))
        return None if row is None else _session(row)

    def session_exists(self, session_id: str) -> bool:
        if self.sql.predicts:  # a transaction acts on a session it was asked about: it nearly always exists
            self.sql.expect(
                "EXISTS (SELECT 1 FROM sessions WHERE id = ?)", (session_id,), "the session exists"
            )
            return True
        return self._one("SELECT 1 FROM sessions WHERE id = ?", (session_id,)) is not None

    def list_sessions(self) -> list[Session]:
        return [_session(r) for r in self._all(_SESSION_SELECT + " ORDER BY s.ord")]

    def session_page(self, limit: int, before: str | None, owner: str | None = None) -> list[Session] | None:
        mine, args = ("", ()) if owner is None else (" AND s.owner = ?", (owner,))
        if before is None:
            rows = self._all(
                _SESSION_SELECT + f" WHERE 1 = 1{mine} ORDER BY s.ord DESC LIMIT ?", (*args, limit)
            )
        else:
            # Another principal's session is no cursor for this one: as unknown as one never made.
            cursor = self._one(f"SELECT s.ord FROM sessions s WHERE s.id = ?{mine}", (before, *args))
            if cursor is None:
                return None
            rows = self._all(
                _SESSION_SELECT + f" WHERE s.ord < ?{mine} ORDER BY s.ord DESC LIMIT ?",
                (cursor[0], *args, limit),
            )
        return [_session(r) for r in rows]

    def session_owner(self, session_id: str) -> tuple[bool, str | None]:
        """Whether the session exists, and the principal it belongs to."""
        row = self._one("SELECT owner FROM sessions WHERE id = ?", (session_id,))
        return (False, None) if row is None else (True, row[0])

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
        held = self._one(_FENCE, (session_id, owner, epoch))
        if held is None:
            raise errors.Fenced(session_id=session_id, epoch=epoch)

    def live_nodes(self, lease: float) -> list[Node]:
        now = self.clock()
        rows = self._all(
            "SELECT i.id, i.node_id, i.host, i.started_at, i.heartbeat, "
            f"(SELECT COUNT(*) FROM claims c WHERE c.owner = i.id AND c.state = '{ClaimState.HELD}') "
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
