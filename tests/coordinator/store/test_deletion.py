"""Deleting for good in the SQLite store: seqs never come back, and freed space is reused or returned."""

from __future__ import annotations

import json
from pathlib import Path

import apsw

from coordinator import retention
from coordinator.events import Draft
from coordinator.store import open_store
from coordinator.store.sqlite._migrations import MIGRATIONS

OLD = "2000-01-01T00:00:00.000Z"


def _auto_vacuum(path: Path) -> int:
    connection = apsw.Connection(str(path))
    try:
        return int(str(connection.execute("PRAGMA auto_vacuum").fetchall()[0][0]))
    finally:
        connection.close()


async def test_deleting_the_newest_events_never_gives_their_seq_again(tmp_path: Path) -> None:
    """A deleted session's events may have been the last ones: a client holding their seqs must never
    see those numbers again for other events, not even after a restart."""
    path = str(tmp_path / "seq.sqlite")
    with open_store(path, synchronous="normal") as store:
        async with store.transaction() as tx:
            tx.insert_session("s1", "t", "now")
            for n in range(3):
                tx.emit(Draft(type="test.event", session_id="s1", payload={"n": n}))
        async with store.transaction() as tx:
            assert tx.delete_session("s1") == 3
        assert store.read.events_after(0) == [] and store.read.last_seq() == 3
    with open_store(path, synchronous="normal") as store:
        assert store.read.last_seq() == 3
        async with store.transaction() as tx:
            event = tx.emit(Draft(type="test.event", session_id=None, payload={}))
        assert event.event.seq == 4


def _database_at(path: Path, version: int | None = None) -> apsw.Connection:
    """A WAL database migrated to ``version`` (all: None) the way an earlier release left it, with
    no ``auto_vacuum``; the caller writes its rows, then closes it."""
    connection = apsw.Connection(str(path))
    connection.execute("PRAGMA journal_mode=WAL")
    with connection:
        for number, migrate in enumerate(MIGRATIONS[:version]):
            migrate(connection)
            connection.execute(f"PRAGMA user_version={number + 1}")
    return connection


def test_a_new_database_gives_freed_pages_back_incrementally(tmp_path: Path) -> None:
    """``auto_vacuum`` can only be chosen before the first table: a new database must have it."""
    with open_store(str(tmp_path / "new.sqlite")):
        pass
    assert _auto_vacuum(tmp_path / "new.sqlite") == 2  # INCREMENTAL


def test_a_database_made_without_auto_vacuum_is_converted_once_at_open(tmp_path: Path) -> None:
    """A database written before this release is rewritten (VACUUM) the first time it is opened, its
    rows kept; the next opens find it converted."""
    path = tmp_path / "old.sqlite"
    connection = _database_at(path)
    with connection:
        connection.execute(
            "INSERT INTO sessions(id, title, last_outcome, created_at, ord) VALUES ('s1', 'kept', NULL, 'now', 0)"
        )
    connection.close()
    assert _auto_vacuum(path) == 0
    with open_store(str(path)) as store:
        session = store.read.get_session("s1")
        assert session is not None and session.title == "kept"
    assert _auto_vacuum(path) == 2
    with open_store(str(path)) as store:
        assert store.read.get_session("s1") is not None


async def test_an_upgraded_database_goes_on_counting_its_sessions_steps(tmp_path: Path) -> None:
    """Migration 10 counts the steps a session already has: the next step's request index goes on
    from there (a scripted model's script stays in step), it does not start again at 0."""
    path = tmp_path / "v9.sqlite"
    connection = _database_at(path, 9)
    with connection:
        connection.execute("INSERT INTO sessions(id, title, created_at, ord) VALUES ('s1', 't', 'now', 0)")
        connection.execute(
            "INSERT INTO turns(id, session_id, prompt, status, created_at, ord) VALUES ('t1', 's1', 'go', 'settled', 'now', 0)"
        )
        for index in range(3):
            connection.execute(
                "INSERT INTO steps(id, session_id, turn_id, status, created_at, ord) "
                "VALUES (?, 's1', 't1', 'succeeded', 'now', ?)",
                (f"st{index}", index),
            )
    connection.close()
    with open_store(str(path)) as store:
        assert (await store.write(lambda tx: tx.insert_step("st3", "s1", "t1", "now")))() == 3


async def test_a_call_begun_before_the_upgrade_keeps_its_logged_lines(tmp_path: Path) -> None:
    """Migration 13 bounds a call's log read by the seq it began at; a call begun before it has none
    and is read from the session's first event, so a stop after the upgrade keeps every line."""
    path = tmp_path / "v12.sqlite"
    connection = _database_at(path, 12)
    with connection:
        connection.execute("INSERT INTO sessions(id, title, created_at, ord) VALUES ('s1', 't', 'now', 0)")
        connection.execute(
            "INSERT INTO tool_calls(session_id, call_id, turn_id, name, input, status, created_at, ord) "
            "VALUES ('s1', 'c1', 't1', 'execute', '{}', 'running', 'now', 0)"
        )
        for line in ("first", "second"):
            connection.execute(
                "INSERT INTO events(type, session_id, at, payload) VALUES ('session.tool.progress', 's1', 'now', ?)",
                (json.dumps({"call_id": "c1", "log": line}),),
            )
    connection.close()
    with open_store(str(path)) as store:
        assert store.read.logged_lines("s1", "c1") == ["first", "second"]


async def test_a_prune_gives_the_space_it_freed_back_to_the_file_system(tmp_path: Path) -> None:
    """After a large prune the file must shrink, not only keep free pages: an operator who turned
    retention on to save disk must see the disk saved."""
    path = tmp_path / "big.sqlite"
    payload = json.dumps({"text": "x" * 2000})
    with open_store(str(path), synchronous="normal") as store:
        async with store.transaction() as tx:
            tx.sql.run_many(
                "INSERT INTO events(type, session_id, at, payload) VALUES ('test.event', NULL, ?, ?)",
                [(OLD, payload)] * 5000,
            )
        _, before = store.read.page_counts()
        assert await retention.prune(store, keep_days=1) == 5000
        free, after = store.read.page_counts()
        assert store.read.event_horizon() == 5000 and store.read.events_after(0) == []
        assert free <= retention.MIN_SLACK_PAGES
        assert after < before / 2, (before, after)
