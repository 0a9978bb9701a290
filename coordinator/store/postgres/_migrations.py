"""Numbered schema migrations of the PostgreSQL store; ``MIGRATIONS[i]`` moves version i to i + 1.

The tables are SQLite's (``store/sqlite/_migrations.py``) at its version 6, so the shared queries run
on both; what differs is said where it is. The version is kept in ``store_version``, and migrations
run under an advisory lock, so nodes starting together migrate once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_V1 = """
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    last_outcome TEXT,
    created_at TEXT NOT NULL,
    ord BIGINT NOT NULL,
    parent_session_id TEXT,
    parent_call_id TEXT
);
CREATE INDEX sessions_by_ord ON sessions(ord);
CREATE INDEX sessions_by_parent ON sessions(parent_session_id);
-- rowid: the insertion order SQLite's own rowid gives (unfinished turns are recovered oldest first)
CREATE TABLE turns (
    rowid BIGINT GENERATED ALWAYS AS IDENTITY,
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    ord BIGINT NOT NULL,
    prompt TEXT NOT NULL,
    status TEXT NOT NULL,
    stop_reason TEXT,
    outcome TEXT,
    resumes INTEGER NOT NULL DEFAULT 0,
    suspended_after TEXT,
    created_at TEXT NOT NULL,
    parked INTEGER NOT NULL DEFAULT 0,
    parent_session_id TEXT,
    parent_call_id TEXT
);
CREATE INDEX turns_by_session ON turns(session_id, ord);
CREATE INDEX turns_by_status ON turns(status);
CREATE INDEX turns_by_parent_call ON turns(parent_session_id, parent_call_id);
CREATE TABLE steps (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    ord BIGINT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    created_at TEXT NOT NULL,
    streamed_text TEXT
);
CREATE INDEX steps_by_turn ON steps(turn_id, ord);
CREATE INDEX steps_by_session ON steps(session_id);
CREATE TABLE messages (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    role TEXT NOT NULL,
    ord BIGINT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX messages_by_session ON messages(session_id, ord);
CREATE TABLE parts (
    message_id TEXT NOT NULL,
    ord BIGINT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT,
    call_id TEXT,
    status TEXT NOT NULL DEFAULT 'complete',
    PRIMARY KEY (message_id, ord)
);
CREATE TABLE tool_calls (
    rowid BIGINT GENERATED ALWAYS AS IDENTITY,
    session_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    step_id TEXT,
    parent_call_id TEXT,
    model_call_id TEXT,
    name TEXT NOT NULL,
    input TEXT NOT NULL,
    status TEXT NOT NULL,
    output TEXT,
    error TEXT,
    partial TEXT,
    progress TEXT,
    ord BIGINT NOT NULL,
    created_at TEXT NOT NULL,
    process_group TEXT,
    tool_started INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, call_id)
);
CREATE INDEX tool_calls_by_turn ON tool_calls(turn_id, ord);
CREATE INDEX tool_calls_by_session ON tool_calls(session_id, rowid);
CREATE TABLE claims (
    session_id TEXT PRIMARY KEY,
    owner TEXT,
    epoch BIGINT NOT NULL,
    state TEXT NOT NULL,
    since TEXT
);
CREATE TABLE instances (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    boot_id TEXT NOT NULL,
    started_at TEXT NOT NULL,
    heartbeat DOUBLE PRECISION NOT NULL,
    stopped INTEGER NOT NULL DEFAULT 0,
    node_id TEXT
);
CREATE TABLE permission_requests (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    action TEXT NOT NULL,
    resource TEXT NOT NULL,
    status TEXT NOT NULL,
    decision TEXT,
    message TEXT,
    reason TEXT,
    deadline_at DOUBLE PRECISION,
    created_at TEXT NOT NULL,
    ord BIGINT NOT NULL
);
CREATE INDEX permission_by_session ON permission_requests(session_id, status);
CREATE INDEX permission_by_turn ON permission_requests(turn_id, status);
CREATE TABLE forms (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    questions TEXT NOT NULL,
    status TEXT NOT NULL,
    answers TEXT,
    message TEXT,
    reason TEXT,
    deadline_at DOUBLE PRECISION,
    created_at TEXT NOT NULL,
    ord BIGINT NOT NULL
);
CREATE INDEX forms_by_session ON forms(session_id, status);
CREATE INDEX forms_by_turn ON forms(turn_id, status);
CREATE TABLE session_rules (
    session_id TEXT NOT NULL,
    ord BIGINT NOT NULL,
    action TEXT NOT NULL,
    resource TEXT NOT NULL,
    effect TEXT NOT NULL,
    PRIMARY KEY (session_id, ord)
);
-- seq is given by event_counter, in the transaction that inserts the event, under that row's lock
-- until the commit: seqs are gap-free and become visible in seq order (design/store.md).
CREATE TABLE events (
    seq BIGINT PRIMARY KEY,
    type TEXT NOT NULL,
    session_id TEXT,
    at TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX events_by_session ON events(session_id, seq);
CREATE TABLE event_counter (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    last BIGINT NOT NULL
);
INSERT INTO event_counter(id, last) VALUES (1, 0);
CREATE TABLE store_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


def _v1(execute: Callable[[str], Any]) -> None:
    execute(_V1)


def _v2(execute: Callable[[str], Any]) -> None:
    # As SQLite's version 9: requests and forms are numbered over the whole table, and the next
    # ``ord`` is their ``MAX(ord)``, a read of every row without these.
    execute(
        "CREATE INDEX permission_by_ord ON permission_requests(ord); CREATE INDEX forms_by_ord ON forms(ord);"
    )


def _v3(execute: Callable[[str], Any]) -> None:
    # As SQLite's version 10: a session counts its steps.
    execute(
        "ALTER TABLE sessions ADD COLUMN step_count BIGINT NOT NULL DEFAULT 0; "
        "UPDATE sessions SET step_count = (SELECT COUNT(*) FROM steps AS s WHERE s.session_id = sessions.id);"
    )


def _v4(execute: Callable[[str], Any]) -> None:
    # As SQLite's version 11: a session's unsettled turns, without its settled ones.
    execute("CREATE INDEX turns_unsettled ON turns(session_id, ord) WHERE status != 'settled'")


def _v5(execute: Callable[[str], Any]) -> None:
    # As SQLite's version 12: a call's request or form without reading every one of its session.
    execute(
        "CREATE INDEX permission_by_call ON permission_requests(session_id, call_id, ord); "
        "CREATE INDEX forms_by_call ON forms(session_id, call_id, ord);"
    )


def _v6(execute: Callable[[str], Any]) -> None:
    # As SQLite's version 13: the last seq given when a call began, where its events are read from.
    execute("ALTER TABLE tool_calls ADD COLUMN seq_at_start BIGINT")


def _v7(execute: Callable[[str], Any]) -> None:
    # As SQLite's version 14: the parked turns, the pending requests and forms, without reading all.
    execute(
        "CREATE INDEX turns_parked ON turns(parked, id) WHERE parked != 0; "
        "CREATE INDEX permission_pending ON permission_requests(ord) WHERE status = 'pending'; "
        "CREATE INDEX forms_pending ON forms(ord) WHERE status = 'pending';"
    )


def _v8(execute: Callable[[str], Any]) -> None:
    # As SQLite's version 15: the recorded process groups in a table of their own, those of running
    # calls moved there from ``tool_calls.process_group`` (unused from here on).
    execute(
        """
        CREATE TABLE process_groups (
            pgid INTEGER NOT NULL,
            started BIGINT NOT NULL,
            boot_id TEXT NOT NULL,
            owner TEXT NOT NULL,
            session_id TEXT,
            call_id TEXT,
            label TEXT,
            created_at TEXT NOT NULL,
            PRIMARY KEY (boot_id, pgid, started)
        );
        CREATE INDEX process_groups_by_owner ON process_groups(owner);
        INSERT INTO process_groups(pgid, started, boot_id, owner, session_id, call_id, created_at)
            SELECT (t.process_group::json->>'pgid')::integer, (t.process_group::json->>'started')::bigint,
                   t.process_group::json->>'boot_id', COALESCE(c.owner, ''), t.session_id, t.call_id,
                   t.created_at
            FROM tool_calls t LEFT JOIN claims c ON c.session_id = t.session_id
            WHERE t.status = 'running' AND t.process_group::json->>'boot_id' IS NOT NULL
            ON CONFLICT DO NOTHING;
        """
    )


def _v9(execute: Callable[[str], Any]) -> None:
    # As SQLite's version 16: steers, soft stops, edited approvals.
    execute(
        """
        CREATE TABLE steers (
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL,
            turn_id TEXT,
            text TEXT NOT NULL,
            status TEXT NOT NULL,
            queued_turn_id TEXT,
            created_at TEXT NOT NULL,
            ord BIGINT NOT NULL
        );
        CREATE INDEX steers_by_session ON steers(session_id, ord);
        CREATE INDEX steers_pending ON steers(turn_id, ord) WHERE status = 'pending';
        ALTER TABLE turns ADD COLUMN soft_stop TEXT;
        ALTER TABLE tool_calls ADD COLUMN edited_input TEXT;
        ALTER TABLE permission_requests ADD COLUMN input TEXT;
        """
    )


def _v10(execute: Callable[[str], Any]) -> None:
    # As SQLite's version 17: the principal a session belongs to.
    execute(
        "ALTER TABLE sessions ADD COLUMN owner TEXT; CREATE INDEX sessions_by_owner ON sessions(owner, ord); "
        "ALTER TABLE steers ADD COLUMN sent_by TEXT;"
    )


def _v11(execute: Callable[[str], Any]) -> None:
    # As SQLite's version 18: the server an MCP form came from, and the JSON Schema of its answers.
    execute(
        "ALTER TABLE forms ADD COLUMN source TEXT; ALTER TABLE forms ADD COLUMN schema TEXT; "
        "ALTER TABLE forms ADD COLUMN prompt TEXT; ALTER TABLE forms ADD COLUMN resume TEXT;"
    )


def _v12(execute: Callable[[str], Any]) -> None:
    # PostgreSQL only: a write's fence as one statement whose result nothing waits for (the
    # session's lock, then the claim's check), failing the transaction when the claim moved on.
    execute(
        """
        CREATE OR REPLACE FUNCTION coordinator_fence(session TEXT, holder TEXT, claimed BIGINT)
        RETURNS void LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_advisory_xact_lock(hashtextextended(session, 0));
            PERFORM 1 FROM claims
                WHERE session_id = session AND owner = holder AND epoch = claimed AND state = 'held';
            IF NOT FOUND THEN
                RAISE EXCEPTION 'claim on % at epoch % was taken over', session, claimed
                    USING ERRCODE = 'CF001', DETAIL = session || ' ' || claimed;
            END IF;
        END $$;
        """
    )


def _v13(execute: Callable[[str], Any]) -> None:
    # PostgreSQL only: a prediction of a transaction's body, checked by the server on the way to the
    # commit (``_sql.Connection.expect``); a wrong one fails the transaction, which is run again.
    execute(
        """
        CREATE OR REPLACE FUNCTION coordinator_check(ok BOOLEAN, what TEXT)
        RETURNS void LANGUAGE plpgsql AS $$
        BEGIN
            IF ok IS NOT TRUE THEN
                RAISE EXCEPTION 'prediction missed: %', what USING ERRCODE = 'CF002';
            END IF;
        END $$;
        """
    )


MIGRATIONS: list[Callable[[Callable[[str], Any]], None]] = [
    _v1,
    _v2,
    _v3,
    _v4,
    _v5,
    _v6,
    _v7,
    _v8,
    _v9,
    _v10,
    _v11,
    _v12,
    _v13,
]
