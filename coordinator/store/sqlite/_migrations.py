"""Numbered schema migrations of the SQLite store; ``MIGRATIONS[i]`` moves version i to i + 1."""

from __future__ import annotations

from collections.abc import Callable

import apsw


def _v1(db: apsw.Connection) -> None:
    db.execute(
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            title TEXT NOT NULL,
            last_outcome TEXT,
            created_at TEXT NOT NULL,
            ord INTEGER NOT NULL
        );
        -- status: queued | running | stopping | suspended | settled (see coordinator/actors/session.py)
        CREATE TABLE turns (
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id),
            ord INTEGER NOT NULL,
            prompt TEXT NOT NULL,
            status TEXT NOT NULL,
            stop_reason TEXT,
            outcome TEXT,
            resumes INTEGER NOT NULL DEFAULT 0,
            suspended_after TEXT,
            created_at TEXT NOT NULL
        );
        CREATE INDEX turns_by_session ON turns(session_id, ord);
        CREATE INDEX turns_by_status ON turns(status);
        -- status: running | succeeded | failed
        CREATE TABLE steps (
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            ord INTEGER NOT NULL,
            status TEXT NOT NULL,
            reason TEXT,
            created_at TEXT NOT NULL
        );
        CREATE INDEX steps_by_turn ON steps(turn_id, ord);
        CREATE INDEX steps_by_session ON steps(session_id);
        CREATE TABLE messages (
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            role TEXT NOT NULL,
            ord INTEGER NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX messages_by_session ON messages(session_id, ord);
        -- kind: text | tool; a tool part names its call in tool_calls
        CREATE TABLE parts (
            message_id TEXT NOT NULL,
            ord INTEGER NOT NULL,
            kind TEXT NOT NULL,
            text TEXT,
            call_id TEXT,
            PRIMARY KEY (message_id, ord)
        );
        -- status: running | succeeded | failed
        CREATE TABLE tool_calls (
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
            ord INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (session_id, call_id)
        );
        CREATE INDEX tool_calls_by_turn ON tool_calls(turn_id, ord);
        -- state: held | suspended | released; epoch grows with every acquisition (fencing token)
        CREATE TABLE claims (
            session_id TEXT PRIMARY KEY,
            owner TEXT,
            epoch INTEGER NOT NULL,
            state TEXT NOT NULL,
            since TEXT
        );
        CREATE TABLE instances (
            id TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            boot_id TEXT NOT NULL,
            started_at TEXT NOT NULL,
            heartbeat REAL NOT NULL,
            stopped INTEGER NOT NULL DEFAULT 0
        );
        -- status: pending | replied | revoked
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
            deadline_at REAL,
            created_at TEXT NOT NULL,
            ord INTEGER NOT NULL
        );
        CREATE INDEX permission_by_session ON permission_requests(session_id, status);
        -- status: pending | submitted | cancelled | revoked
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
            deadline_at REAL,
            created_at TEXT NOT NULL,
            ord INTEGER NOT NULL
        );
        CREATE INDEX forms_by_session ON forms(session_id, status);
        CREATE TABLE session_rules (
            session_id TEXT NOT NULL,
            ord INTEGER NOT NULL,
            action TEXT NOT NULL,
            resource TEXT NOT NULL,
            effect TEXT NOT NULL,
            PRIMARY KEY (session_id, ord)
        );
        -- AUTOINCREMENT: a seq is never reused, even after the highest row is gone.
        CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            type TEXT NOT NULL,
            session_id TEXT,
            at TEXT NOT NULL,
            payload TEXT NOT NULL
        );
        CREATE INDEX events_by_session ON events(session_id, seq);
        """
    )


def _v2(db: apsw.Connection) -> None:
    # The process group a running tool started ({pgid, started}), killed by a later start if the
    # coordinator that started it died.
    db.execute("ALTER TABLE tool_calls ADD COLUMN process_group TEXT")


def _v3(db: apsw.Connection) -> None:
    # `GET /api/session` pages newest first by `ord`, and every new session reads MAX(ord): both
    # were scans of the whole table.
    db.execute("CREATE INDEX sessions_by_ord ON sessions(ord)")


def _v4(db: apsw.Connection) -> None:
    # A text part's status: "complete", or the word of the stop that cut the
    # model's streamed text short ("interrupted", "timeout", "shutdown"). Older parts were complete.
    db.execute("ALTER TABLE parts ADD COLUMN status TEXT NOT NULL DEFAULT 'complete'")
    # The text a running step had streamed at its last save (at most one a second while it streams):
    # what a start after a crash keeps of it (design/events.md).
    db.execute("ALTER TABLE steps ADD COLUMN streamed_text TEXT")


def _v5(db: apsw.Connection) -> None:
    # Operating for months. `parked`: a suspended turn that a coordinator
    # started with `[server] resume = "manual"` left for `POST /api/session/{sid}/resume`; it stays
    # parked across restarts until resumed or interrupted. `store_meta`: small facts of the store
    # itself, among them `event_horizon`, the highest seq retention has deleted up to (a replay
    # from below it starts with `stream.truncated`). `tool_calls.tool_started`: the tool of a call
    # that waited on a person was started (committed right before it runs): a restart restores a
    # call whose reply landed while no wait was live only if its tool never started
    # (design/model/README.md, finding 3).
    db.execute(
        """
        ALTER TABLE turns ADD COLUMN parked INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE tool_calls ADD COLUMN tool_started INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE store_meta (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        """
    )


def _v6(db: apsw.Connection) -> None:
    # Sub-agent sessions. A session made by a `task` call names that call
    # (its session and call id); a turn a `task` call runs names it too: such a turn is run by its
    # call's actor, never by the registry (neither started as queued nor recovered on its own), and
    # the parent's resume finds it through its call.
    db.execute(
        """
        ALTER TABLE sessions ADD COLUMN parent_session_id TEXT;
        ALTER TABLE sessions ADD COLUMN parent_call_id TEXT;
        ALTER TABLE turns ADD COLUMN parent_session_id TEXT;
        ALTER TABLE turns ADD COLUMN parent_call_id TEXT;
        CREATE INDEX sessions_by_parent ON sessions(parent_session_id);
        CREATE INDEX turns_by_parent_call ON turns(parent_session_id, parent_call_id);
        """
    )


def _v7(db: apsw.Connection) -> None:
    # Several nodes: an instance names the node it runs (``[server] node_id``)
    # for ``GET /api/node``; NULL for an instance whose own id names it.
    db.execute("ALTER TABLE instances ADD COLUMN node_id TEXT")


def _v8(db: apsw.Connection) -> None:
    # A stop reads its turn's pending waits: without these, each such read scanned every request
    # and form ever made (PostgreSQL's schema has had them, by turn and status). With ``ord`` last,
    # the read's ``ORDER BY ord`` is the index's own order, not a sort.
    db.execute(
        """
        CREATE INDEX permission_by_turn ON permission_requests(turn_id, status, ord);
        CREATE INDEX forms_by_turn ON forms(turn_id, status, ord);
        """
    )


def _v9(db: apsw.Connection) -> None:
    # Requests and forms are numbered over the whole table: the next ``ord`` is their ``MAX(ord)``,
    # which without these read every request (or form) ever made at each new one.
    db.execute(
        """
        CREATE INDEX permission_by_ord ON permission_requests(ord);
        CREATE INDEX forms_by_ord ON forms(ord);
        """
    )


def _v10(db: apsw.Connection) -> None:
    # A session counts its steps (a step's request index is the count before it): counting them at
    # each step grew with the session.
    db.execute(
        """
        ALTER TABLE sessions ADD COLUMN step_count INTEGER NOT NULL DEFAULT 0;
        UPDATE sessions SET step_count = (SELECT COUNT(*) FROM steps AS s WHERE s.session_id = sessions.id);
        """
    )


def _v11(db: apsw.Connection) -> None:
    # A session's unsettled turns (at most a few), found without reading its settled ones: the
    # reads of a turn's path (the next turn, the one an interrupt stops) grew with the session.
    db.execute("CREATE INDEX turns_unsettled ON turns(session_id, ord) WHERE status != 'settled'")


def _v12(db: apsw.Connection) -> None:
    # A call's request or form, the pending one or the latest (a shutdown's and a restore's look at
    # each unsettled call), found without reading every request of its session.
    db.execute(
        """
        CREATE INDEX permission_by_call ON permission_requests(session_id, call_id, ord);
        CREATE INDEX forms_by_call ON forms(session_id, call_id, ord);
        """
    )


def _v13(db: apsw.Connection) -> None:
    # The last seq given when a call began: the events of the call (the lines a stopped call keeps)
    # are read from there, not from the session's first event. NULL for calls begun before.
    db.execute("ALTER TABLE tool_calls ADD COLUMN seq_at_start INTEGER")


def _v14(db: apsw.Connection) -> None:
    # The parked turns and the pending requests and forms (at most a few of each), found without
    # reading every one ever made: the watch reads the parked turns every second, a client lists
    # the pending requests, and a read of the whole table grew with the store's age.
    db.execute(
        """
        CREATE INDEX turns_parked ON turns(parked, id) WHERE parked != 0;
        CREATE INDEX permission_pending ON permission_requests(ord) WHERE status = 'pending';
        CREATE INDEX forms_pending ON forms(ord) WHERE status = 'pending';
        """
    )


def _v15(db: apsw.Connection) -> None:
    # The process groups coordinators started and have not reaped yet, in a table of their own: a
    # group may belong to a tool call or to the coordinator itself (a server it runs), and a start
    # finds those of dead instances without reading every call. The groups that running calls had
    # recorded in ``tool_calls.process_group`` (unused from here on) move here, owned by their
    # session's claim holder, so a start after the upgrade still kills what a crash before it left
    # (one recorded without a boot id cannot be told from a reused pid: left alone, as before).
    db.execute(
        """
        CREATE TABLE process_groups (
            pgid INTEGER NOT NULL,
            started INTEGER NOT NULL,
            boot_id TEXT NOT NULL,
            owner TEXT NOT NULL,
            session_id TEXT,
            call_id TEXT,
            label TEXT,
            created_at TEXT NOT NULL,
            PRIMARY KEY (boot_id, pgid, started)
        );
        CREATE INDEX process_groups_by_owner ON process_groups(owner);
        INSERT OR IGNORE INTO process_groups(pgid, started, boot_id, owner, session_id, call_id, created_at)
            SELECT json_extract(t.process_group, '$.pgid'), json_extract(t.process_group, '$.started'),
                   json_extract(t.process_group, '$.boot_id'), COALESCE(c.owner, ''), t.session_id,
                   t.call_id, t.created_at
            FROM tool_calls t LEFT JOIN claims c ON c.session_id = t.session_id
            WHERE t.status = 'running' AND json_extract(t.process_group, '$.boot_id') IS NOT NULL;
        """
    )


def _v16(db: apsw.Connection) -> None:
    # Inputs into a running turn. ``steers``: a text sent into a turn, delivered at its next step
    # boundary (status pending | delivered | queued; ``queued_turn_id`` names the turn a steer
    # became when its turn ended first; ``turn_id`` is NULL for one sent when no turn ran). ``turns.soft_stop``: a stop decided to take effect at the
    # turn's next step boundary (its reason). ``tool_calls.edited_input`` and
    # ``permission_requests.input``: the input a person approved the call with, when they changed it.
    db.execute(
        """
        CREATE TABLE steers (
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL,
            turn_id TEXT,
            text TEXT NOT NULL,
            status TEXT NOT NULL,
            queued_turn_id TEXT,
            created_at TEXT NOT NULL,
            ord INTEGER NOT NULL
        );
        CREATE INDEX steers_by_session ON steers(session_id, ord);
        CREATE INDEX steers_pending ON steers(turn_id, ord) WHERE status = 'pending';
        ALTER TABLE turns ADD COLUMN soft_stop TEXT;
        ALTER TABLE tool_calls ADD COLUMN edited_input TEXT;
        ALTER TABLE permission_requests ADD COLUMN input TEXT;
        """
    )


def _v17(db: apsw.Connection) -> None:
    # Principals: the one a session belongs to (``[[principal]]``; NULL when the server has none, or
    # for a session an embedder made without one). A user's page of sessions reads by it.
    db.execute(
        """
        ALTER TABLE sessions ADD COLUMN owner TEXT;
        CREATE INDEX sessions_by_owner ON sessions(owner, ord);
        ALTER TABLE steers ADD COLUMN sent_by TEXT;
        """
    )


def _v18(db: apsw.Connection) -> None:
    # A form an MCP server asked: which server (``{"mcp": NAME}``), the JSON Schema of its answers, and
    # what the server said in asking; and what a retry of a 2026-07-28 question needs after a restart.
    db.execute(
        "ALTER TABLE forms ADD COLUMN source TEXT; ALTER TABLE forms ADD COLUMN schema TEXT; "
        "ALTER TABLE forms ADD COLUMN prompt TEXT; ALTER TABLE forms ADD COLUMN resume TEXT;"
    )


MIGRATIONS: list[Callable[[apsw.Connection], None]] = [
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
    _v14,
    _v15,
    _v16,
    _v17,
    _v18,
]
