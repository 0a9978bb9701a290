"""Deleting rows for good: a whole session (``DELETE /api/session/{sid}``) and old events (retention).

Writes of an open transaction; the caller owns the commit. Neither makes a seq come back: every
backend keeps the highest seq ever given whatever rows are deleted (``Connection.last_seq``).
"""

from __future__ import annotations

from typing import Any

import attrs

from coordinator.store._sql import Connection
from coordinator.store._status_sql import UNFINISHED_TURN

# What a session owns besides its events, keyed by the session's id (parts go through messages).
_SESSION_TABLES = (
    "messages",
    "tool_calls",
    "steps",
    "permission_requests",
    "forms",
    "session_rules",
    "steers",
    "claims",
    "turns",  # after every table whose rows name a turn; before sessions (its foreign key)
)


def delete_session(sql: Connection, session_id: str) -> int:
    """Delete the session and everything it owns, its events included; returns how many events."""
    sql.run(
        "DELETE FROM parts WHERE message_id IN (SELECT id FROM messages WHERE session_id = ?)", (session_id,)
    )
    for table in _SESSION_TABLES:
        sql.run(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
    deleted = sql.run("DELETE FROM events WHERE session_id = ?", (session_id,))
    sql.run("DELETE FROM sessions WHERE id = ?", (session_id,))
    return deleted


def prune_events(sql: Connection, cutoff: str, after: int, limit: int) -> PruneBatch:
    """Delete the events among the next ``limit`` after seq ``after`` that are older than ``cutoff``
    (an RFC 3339 time, compared as text) and belong to no unsettled turn.

    The batch reads at most ``limit`` rows in seq order and stops at the first event not older
    than ``cutoff``: times grow with seq, so that is where the old events end, and the read never
    runs on through the young ones. The highest seq deleted raises the stored event horizon.
    """
    rows = sql.all(
        "SELECT seq, session_id, at FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit)
    )
    old = [(seq, session_id) for seq, session_id, _ in _while_older(rows, cutoff)]
    kept_from = _unsettled_turn_starts(sql)
    doomed = [(seq,) for seq, session_id in old if seq < kept_from.get(session_id, seq + 1)]
    if doomed:
        sql.run_many("DELETE FROM events WHERE seq = ?", doomed)
        _raise_horizon(sql, doomed[-1][0])
    return PruneBatch(
        deleted=len(doomed),
        scanned_to=old[-1][0] if old else after,
        finished=len(old) < len(rows) or len(rows) < limit,
    )


def _unsettled_turn_starts(sql: Connection) -> dict[str | None, int]:
    """For each session with an unsettled turn, the seq its events are kept from: the turn's
    ``session.turn.started`` (a session runs one turn at a time, so it is the session's last
    one), or 0 (everything) if that event cannot be found."""
    sessions = sql.all(f"SELECT DISTINCT session_id FROM turns WHERE status IN {UNFINISHED_TURN}")
    starts: dict[str | None, int] = {}
    for (session_id,) in sessions:
        assert isinstance(session_id, str)
        # Walks the session's index backwards from its newest event: the current turn's events.
        row = sql.all(
            "SELECT seq FROM events WHERE session_id = ? AND type = 'session.turn.started' "
            "ORDER BY seq DESC LIMIT 1",
            (session_id,),
        )
        starts[session_id] = int(row[0][0]) if row else 0
    return starts


def _raise_horizon(sql: Connection, seq: int) -> None:
    sql.run(
        "INSERT INTO store_meta(key, value) VALUES ('event_horizon', ?) ON CONFLICT(key) DO UPDATE "
        "SET value = excluded.value WHERE CAST(store_meta.value AS BIGINT) < CAST(excluded.value AS BIGINT)",
        (str(seq),),
    )


def _while_older(rows: list[tuple[Any, ...]], cutoff: str) -> list[tuple[Any, ...]]:
    """The leading rows whose time (third column) is before ``cutoff``."""
    for index, row in enumerate(rows):
        if row[2] >= cutoff:
            return rows[:index]
    return rows


@attrs.frozen(kw_only=True)
class PruneBatch:
    """What one batch of ``prune_events`` did."""

    deleted: int
    scanned_to: int
    """The seq the next batch reads after (events kept here are looked at again at the next pass)."""
    finished: bool
    """No older event follows: the pass is over."""
