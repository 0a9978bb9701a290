"""The SQLite reads on a turn's and a stop's path find their rows by an index and need no sort.

A scan grows with everything the file ever held (a stop once read its turn's pending waits by
scanning every request ever made), and a sort in a temporary B-tree cost SQLite four times the read
itself on a turn's path (design/benchmarks.md). Each read's statements are captured as the store runs
them and checked with ``EXPLAIN QUERY PLAN``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import pytest
import trio

from coordinator import decisions, errors
from coordinator.records import Form, PermissionRequest, Rule
from coordinator.registry import _recovery_view
from coordinator.store import Reader, Transaction, open_store
from coordinator.store.rows import ToolCallRow
from coordinator.store.sqlite._store import SqliteStore

READS: dict[str, Callable[[Reader], Any]] = {
    "session_exists": lambda read: read.session_exists("s1"),
    "next_turn": lambda read: read.next_turn("s1"),
    "interruptible_turn": lambda read: read.interruptible_turn("s1"),
    "get_turn": lambda read: read.get_turn("t1"),
    "running_steps": lambda read: read.running_steps("t1"),
    "tool_calls_of_turn": lambda read: read.tool_calls_of_turn("t1"),
    "running_calls_of_turn": lambda read: read.running_calls_of_turn("t1"),
    "history_after": lambda read: read.history_after("s1", 3),
    "pending_permissions of a turn": lambda read: read.pending_permissions(turn_id="t1"),
    "pending_forms of a turn": lambda read: read.pending_forms(turn_id="t1"),
    "session_rules": lambda read: read.session_rules("s1"),
}


# history_after sorts each message's few parts (``ORDER BY m.ord, p.ord``, the messages coming in
# index order): measured without that sort, the read cost the same on a turn's path.
SORTS_KEPT = {"history_after"}


@contextmanager
def _statements(store: SqliteStore) -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
    """Every statement the store's reads run meanwhile, with its arguments."""
    seen: list[tuple[str, tuple[Any, ...]]] = []
    connection = store._connection
    run_all = connection.all

    def capturing(sql: str, args: Any = ()) -> list[tuple[Any, ...]]:
        seen.append((sql, tuple(args)))
        return run_all(sql, args)

    connection.all = capturing  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        connection.all = run_all  # type: ignore[method-assign]


@pytest.mark.parametrize("read", sorted(READS))
def test_a_read_on_the_path_of_a_turn_or_a_stop_uses_an_index_and_no_sort(tmp_path: Path, read: str) -> None:
    with open_store(str(tmp_path / "plans.sqlite")) as store:
        with _statements(store) as seen:
            READS[read](store.read)
        assert seen, read
        for sql, args in seen:
            plan = [row[-1] for row in store._db.execute("EXPLAIN QUERY PLAN " + sql, args)]
            assert not [step for step in plan if step.startswith("SCAN")], (sql, plan)
            if read not in SORTS_KEPT:
                assert not [step for step in plan if "TEMP B-TREE" in step], (sql, plan)


def test_the_connection_keeps_a_statements_plan_whatever_is_bound_to_it(tmp_path: Path) -> None:
    # Without the query planner's stability guarantee, SQLite prepares a statement again at each new
    # binding once it compared a bound value in planning it: every ``SELECT ord ... ORDER BY ord
    # DESC LIMIT 1`` and history read of a turn did (design/benchmarks.md, issue 19).
    with open_store(str(tmp_path / "plans.sqlite")) as store:
        assert store._db.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, -1) == 1


# Each numbered insert of the store (``_insert_numbered``): its next ``ord`` is read by the insert.
NUMBERED_INSERTS: dict[str, Callable[[Transaction], Any]] = {
    "session": lambda tx: tx.insert_session("s2", "t", "2026-01-01T00:00:00Z"),
    "turn": lambda tx: tx.insert_turn("t2", "s1", "go", "2026-01-01T00:00:00Z"),
    "step": lambda tx: tx.insert_step("st2", "s1", "t1", "2026-01-01T00:00:00Z"),
    "message": lambda tx: tx.insert_message("m2", "s1", "t1", "user", "2026-01-01T00:00:00Z"),
    "text part": lambda tx: tx.add_text_part("m1", "hi"),
    "tool call": lambda tx: tx.insert_tool_call(
        ToolCallRow(
            session_id="s1",
            call_id="c2",
            turn_id="t1",
            step_id=None,
            parent_call_id=None,
            model_call_id=None,
            name="noop",
            input={},
            status="running",
            output=None,
            error=None,
            partial=None,
            progress=None,
        ),
        "2026-01-01T00:00:00Z",
    ),
    "permission request": lambda tx: tx.insert_permission(
        PermissionRequest(
            id="p2",
            session_id="s1",
            call_id="c1",
            action="noop",
            resource="*",
            status="pending",
            created_at="2026-01-01T00:00:00Z",
        ),
        "t1",
        None,
    ),
    "form": lambda tx: tx.insert_form(
        Form(
            id="f2",
            session_id="s1",
            call_id="c1",
            questions=[],
            status="pending",
            created_at="2026-01-01T00:00:00Z",
        ),
        "t1",
        None,
    ),
    "session rule": lambda tx: tx.add_session_rule("s1", Rule(action="noop", resource="*", effect="allow")),
}


@pytest.mark.parametrize("insert", sorted(NUMBERED_INSERTS))
def test_a_numbered_insert_finds_the_last_ord_by_an_index(tmp_path: Path, insert: str) -> None:
    # Requests and forms are numbered over their whole table: without an index on ord, each new one
    # read every request (or form) ever made.
    with open_store(str(tmp_path / "plans.sqlite")) as store:
        seen: list[tuple[str, tuple[Any, ...]]] = []
        connection = store._connection
        send = connection.send

        def capturing(sql: str, args: Any = ()) -> None:
            seen.append((sql, tuple(args)))
            send(sql, args)

        connection.send = capturing  # type: ignore[method-assign]
        with contextlib.suppress(errors.StoreError):  # no such session: the statement is planned first
            trio.run(store.write, NUMBERED_INSERTS[insert])
        inserts = [(sql, args) for sql, args in seen if sql.startswith("INSERT")]
        assert len(inserts) == 1, seen
        sql, args = inserts[0]
        numbering = re.search(r"FROM (\w+)(?: WHERE (\w+) = \?)?\)\)$", sql)
        assert numbering is not None, sql
        table, numbered_by = numbering.groups()
        plan = [row[-1] for row in store._db.execute("EXPLAIN QUERY PLAN " + sql, args)]
        lookups = [step for step in plan if step.startswith(f"SEARCH {table} ")]
        assert len(lookups) == 1 and not [step for step in plan if step.startswith("SCAN")], (sql, plan)
        # The MAX is one lookup only in an index that starts with the numbering column, then ord.
        index = re.search(r"INDEX (\w+)", lookups[0])
        assert index is not None, lookups
        columns = [row[2] for row in store._db.execute(f"PRAGMA index_info({index.group(1)})")]
        assert columns[:2] == ([numbered_by, "ord"] if numbered_by else ["ord"]), (sql, plan, columns)


# The reads of a turn's and a stop's path that are scoped to a session, and the step's insert: none
# may grow with the session's settled turns (a session can live for months).
SESSION_SCOPED: dict[str, Callable[[Transaction, str], Any]] = {
    "next_turn": lambda tx, sid: tx.next_turn(sid),
    "running_turn": lambda tx, sid: tx.running_turn(sid),
    "interruptible_turn": lambda tx, sid: tx.interruptible_turn(sid),
    "unsettled_turn_statuses": lambda tx, sid: tx.unsettled_turn_statuses(sid),
    "session_rules": lambda tx, sid: tx.session_rules(sid),
    "history_after": lambda tx, sid: tx.history_after(sid, 10**9),
    "insert_step": lambda tx, sid: tx.insert_step(f"step-{sid}", sid, f"{sid}-running", "now"),
    "insert_message": lambda tx, sid: tx.insert_message(f"m-{sid}", sid, f"{sid}-running", "user", "now"),
    "permission_of_call, the latest": lambda tx, sid: tx.permission_of_call(sid, "c-0", pending=False),
    "permission_of_call, pending": lambda tx, sid: tx.permission_of_call(sid, "c-0", pending=True),
    "form_of_call, the latest": lambda tx, sid: tx.form_of_call(sid, "c-0", pending=False),
    "form_of_call, pending": lambda tx, sid: tx.form_of_call(sid, "c-0", pending=True),
    "logged_lines": lambda tx, sid: tx.logged_lines(sid, "c-running"),
    "parked_turn": lambda tx, sid: tx.parked_turn(sid),
}


def _with_settled_turns(store: SqliteStore, session_id: str, settled: int) -> None:
    """A session with ``settled`` settled turns, each with a step and a message, then a running one."""
    with store._db:
        store._db.execute(
            "INSERT INTO sessions(id, title, created_at, ord) VALUES (?, 't', 'now', 0)", (session_id,)
        )
        for ord in range(settled + 1):
            turn_id = f"{session_id}-{ord}" if ord < settled else f"{session_id}-running"
            status = "settled" if ord < settled else "running"
            store._db.execute(
                "INSERT INTO turns(id, session_id, prompt, status, created_at, ord) VALUES (?, ?, 'go', ?, 'now', ?)",
                (turn_id, session_id, status, ord),
            )
            store._db.execute(
                "INSERT INTO steps(id, session_id, turn_id, status, created_at, ord) VALUES (?, ?, ?, 'succeeded', 'now', 0)",
                (f"st-{turn_id}", session_id, turn_id),
            )
            store._db.execute(
                "INSERT INTO messages(id, session_id, turn_id, role, created_at, ord) VALUES (?, ?, ?, 'user', 'now', ?)",
                (f"m-{turn_id}", session_id, turn_id, ord),
            )
            # Each turn's call waited on a person once (the calls' ids repeat in no session).
            for table, columns, values in (
                ("permission_requests", "action, resource, decision", "'x', 'x', 'once', 'replied'"),
                ("forms", "questions, answers", "'[]', '{}', 'submitted'"),
            ):
                store._db.execute(
                    f"INSERT INTO {table}(id, session_id, turn_id, call_id, {columns}, status, created_at, ord) "
                    f"VALUES (?, ?, ?, ?, {values}, 'now', ?)",
                    (f"{table}-{turn_id}", session_id, turn_id, f"c-{ord}", ord),
                )
            # Each turn's call began, then logged lines (a settled turn's are never read again).
            call_id = f"c-{ord}" if ord < settled else "c-running"
            store._db.execute(
                "INSERT INTO tool_calls(session_id, call_id, turn_id, name, input, status, created_at, ord, "
                "seq_at_start) VALUES (?, ?, ?, 'execute', '{}', 'running', 'now', 0, "
                "(SELECT seq FROM sqlite_sequence WHERE name = 'events'))",
                (session_id, call_id, turn_id),
            )
            for line in range(3):
                store._db.execute(
                    "INSERT INTO events(type, session_id, at, payload) VALUES ('session.tool.progress', ?, 'now', ?)",
                    (session_id, json.dumps({"call_id": call_id, "log": f"line {line}"})),
                )
        store._db.execute("UPDATE sessions SET step_count = ? WHERE id = ?", (settled + 1, session_id))


def _run_scoped(operation: str, session_id: str, tx: Transaction) -> Any:
    return SESSION_SCOPED[operation](tx, session_id)


@pytest.mark.parametrize("operation", sorted(SESSION_SCOPED))
def test_a_session_scoped_read_does_not_grow_with_the_sessions_settled_turns(
    tmp_path: Path, operation: str
) -> None:
    # SQLite's count of virtual machine steps grows with every row or index entry a statement
    # visits; a seek is one step however deep the index. A step's request index once counted the
    # session's steps, and the next turn was found among all its turns (design/benchmarks.md).
    with open_store(str(tmp_path / "plans.sqlite")) as store:
        _with_settled_turns(store, "short", 1)
        _with_settled_turns(store, "long", 300)
        steps: list[int] = []
        store._db.trace_v2(
            apsw.SQLITE_TRACE_PROFILE,
            lambda info: steps.append(info["stmt_status"]["SQLITE_STMTSTATUS_VM_STEP"]),
        )
        visited = {}
        for session_id in ("short", "long"):
            steps.clear()
            trio.run(store.write, functools.partial(_run_scoped, operation, session_id))
            visited[session_id] = sum(steps)
        store._db.trace_v2(0, None)
        assert visited["long"] <= visited["short"] + 5, visited


def test_the_watchs_look_every_second_does_not_grow_with_the_turns_and_sessions_ever_run(
    tmp_path: Path,
) -> None:
    # The registry's watch reads the unfinished, parked and queued turns every second, on the trio
    # thread: reading every turn ever run took 22 ms at 200,000 turns, every claim ever made 4.4 ms
    # at 100,000 sessions whenever a turn was queued (design/store.md, migration 14).
    visited = {}
    for old in (1, 300):
        with open_store(str(tmp_path / f"watch-{old}.sqlite")) as store:
            for n in range(3):
                _with_settled_turns(store, f"s{n}", old)
            db = store._db
            db.execute("UPDATE turns SET parked = 1 WHERE id = 's0-running'")
            db.execute("UPDATE turns SET parked = 2 WHERE id = 's1-running'")
            db.execute(
                "INSERT INTO turns(id, session_id, prompt, status, created_at, ord) "
                "VALUES ('s2-queued', 's2', 'go', 'queued', 'now', 1000)"
            )
            for n in range(old):  # sessions that ran once, their claims released
                db.execute(
                    "INSERT INTO sessions(id, title, created_at, ord) VALUES (?, 't', 'now', 0)", (f"o{n}",)
                )
                db.execute(
                    "INSERT INTO claims(session_id, owner, epoch, state) VALUES (?, NULL, 1, 'released')",
                    (f"o{n}",),
                )
            db.execute("INSERT INTO claims(session_id, owner, epoch, state) VALUES ('s0', 'gone', 1, 'held')")
            steps: list[int] = []
            db.trace_v2(
                apsw.SQLITE_TRACE_PROFILE,
                lambda info, steps=steps: steps.append(info["stmt_status"]["SQLITE_STMTSTATUS_VM_STEP"]),
            )
            view = _recovery_view(store.read, me="this-instance")
            db.trace_v2(0, None)
            assert (view.parked, view.asked, view.queued) == ({"s0-running"}, {"s1-running"}, ["s2"])
            visited[old] = sum(steps)
    assert visited[300] <= visited[1] + 5, visited


@pytest.mark.parametrize("listing", ["pending_permissions", "pending_forms"])
def test_the_pending_waits_are_listed_without_reading_the_settled_ones(tmp_path: Path, listing: str) -> None:
    # GET /api/permission lists every pending request of the server: it read every request ever
    # made, 12 ms at 100,000 (migration 14).
    visited = {}
    for old in (1, 300):
        with open_store(str(tmp_path / f"{listing}-{old}.sqlite")) as store:
            _with_settled_turns(store, "s", old)
            table = "permission_requests" if listing == "pending_permissions" else "forms"
            store._db.execute(f"UPDATE {table} SET status = 'pending' WHERE turn_id = 's-running'")
            steps: list[int] = []
            store._db.trace_v2(
                apsw.SQLITE_TRACE_PROFILE,
                lambda info, steps=steps: steps.append(info["stmt_status"]["SQLITE_STMTSTATUS_VM_STEP"]),
            )
            pending = getattr(store.read, listing)()
            store._db.trace_v2(0, None)
            assert [wait.id for wait in pending] == [f"{table}-s-running"]
            visited[old] = sum(steps)
    assert visited[300] <= visited[1] + 5, visited


def test_the_watchs_look_is_a_few_statements_however_many_turns_and_waits_run_here(tmp_path: Path) -> None:
    # Every second the watch looks at the unfinished turns (with each one's claim and owner) and at
    # the decisions committed for the turns and waits this process runs. A read of each took 43 ms
    # a look with 1,000 sessions waiting on a person, on the trio thread (design/benchmarks.md).
    statements = {}
    for live in (3, 200):  # 400 waits: one IN list of each kind (500 ids at most)
        with open_store(str(tmp_path / f"live-{live}.sqlite")) as store:
            db = store._db
            db.execute(
                "INSERT INTO instances(id, host, pid, boot_id, started_at, heartbeat) VALUES ('me', 'h', 1, 'b', 'now', 0)"
            )
            for n in range(live):
                _with_settled_turns(store, f"s{n}", 0)
                db.execute(
                    "INSERT INTO claims(session_id, owner, epoch, state) VALUES (?, 'me', 1, 'held')",
                    (f"s{n}",),
                )
            db.execute("UPDATE permission_requests SET status = 'pending'")
            db.execute("UPDATE forms SET status = 'pending'")
            turn_ids = [f"s{n}-running" for n in range(live)]
            wait_ids = [
                f"{table}-s{n}-running" for n in range(live) for table in ("permission_requests", "forms")
            ]
            ran: list[str] = []
            db.trace_v2(apsw.SQLITE_TRACE_PROFILE, lambda info, ran=ran: ran.append(info["sql"]))
            view = _recovery_view(store.read, me="me")
            turns, answers = decisions._committed_decisions(store.read, turn_ids, wait_ids)
            db.trace_v2(0, None)
            assert (view.unfinished, turns, answers) == ([], [], {})
            statements[live] = len(ran)
    assert statements[200] == statements[3], statements
