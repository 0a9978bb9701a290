"""The records of running process groups, on both backends: written, read by call, by owner and with
their owners, deleted by the group's key; and the upgrade that moves the groups running calls had
recorded on their own row into the table."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import apsw
import psycopg
import pytest

from coordinator.store import Store, Transaction, open_store
from coordinator.store.rows import InstanceRow, ProcessGroupRow
from coordinator.store.sqlite._migrations import MIGRATIONS
from tests.backends import PostgresDatabase, backend, db_for, postgres_database

__all__ = ["backend", "postgres_database"]

CALLS = ProcessGroupRow(pgid=101, started=7, boot_id="b", owner="me", session_id="s1", call_id="c1")
SERVER = ProcessGroupRow(pgid=102, started=8, boot_id="b", owner="me", label="a server")
THEIRS = ProcessGroupRow(pgid=103, started=9, boot_id="b", owner="other", session_id="s2", call_id="c1")
ORPHAN = ProcessGroupRow(pgid=104, started=9, boot_id="b", owner="never-registered")


@pytest.fixture
async def store(backend: str, tmp_path: Path) -> AsyncIterator[Store]:
    with open_store(db_for(tmp_path), synchronous="normal", pool_size=2) as opened:
        yield opened


def _instance(instance_id: str) -> InstanceRow:
    return InstanceRow(id=instance_id, host="h", pid=1, boot_id="b", heartbeat=0.0, stopped=False)


def _recorded(tx: Transaction) -> None:
    for instance in ("me", "other"):
        tx.register_instance(_instance(instance), "now")
    for group in (CALLS, SERVER, THEIRS, ORPHAN):
        tx.record_process_group(group, "now")


async def test_a_group_is_read_by_its_call_and_its_owner_until_its_record_is_deleted(store: Store) -> None:
    """A tool call's group is found by the call (a test, an operator), an instance's groups by the
    instance (its graceful close); deleting names the group, whoever owns it."""
    await store.write(_recorded)
    assert await store.read(lambda r: r.process_group_of("s1", "c1")) == CALLS
    assert await store.read(lambda r: r.process_groups_of("me")) == [CALLS, SERVER]
    assert await store.write(lambda tx: tx.forget_process_groups([CALLS, THEIRS])) == 2
    assert await store.read(lambda r: r.process_group_of("s1", "c1")) is None
    assert await store.read(lambda r: r.process_groups_of("me")) == [SERVER]
    assert await store.write(lambda tx: tx.forget_process_groups([CALLS])) == 0


async def test_the_groups_of_every_other_instance_are_read_with_their_owners(store: Store) -> None:
    """What a start and the watch judge: every group but this instance's, with the owner's liveness
    facts (none for an owner the store does not know: dead)."""
    await store.write(_recorded)
    found = await store.read(lambda r: r.process_groups_with_owners("me"))
    assert [(group, owner and owner.id) for group, owner in found] == [(THEIRS, "other"), (ORPHAN, None)]


def _running_call_with_a_group(run: Callable[[str], object], process_group: str) -> None:
    """Rows an earlier release left (``run``: apsw's or psycopg's ``execute``): a session whose claim
    ``old`` holds, one running call that recorded its group on its own row, one that recorded none."""
    run("INSERT INTO sessions(id, title, created_at, ord) VALUES ('s1', 't', 'now', 0)")
    run("INSERT INTO claims(session_id, owner, epoch, state) VALUES ('s1', 'old', 1, 'held')")
    for call_id, group in (("c1", f"'{process_group}'"), ("c2", "NULL")):
        run(
            "INSERT INTO tool_calls(session_id, call_id, turn_id, name, input, status, created_at, ord, "
            f"process_group) VALUES ('s1', '{call_id}', 't1', 'shell', '{{}}', 'running', 'now', 0, {group})"
        )


MOVED = ProcessGroupRow(pgid=4242, started=77, boot_id="boot", owner="old", session_id="s1", call_id="c1")
OLD_RECORD = json.dumps({"pgid": 4242, "started": 77, "boot_id": "boot"})


async def test_an_upgraded_sqlite_store_keeps_the_groups_its_running_calls_recorded(tmp_path: Path) -> None:
    """Migration 15: a crash before the upgrade left a call's group recorded on the call's row; the
    start after the upgrade must still find it (owned by the session's claim holder) to kill it."""
    path = tmp_path / "v14.sqlite"
    connection = apsw.Connection(str(path))
    with connection:
        for number, migrate in enumerate(MIGRATIONS[:14]):
            migrate(connection)
            connection.execute(f"PRAGMA user_version={number + 1}")
        _running_call_with_a_group(connection.execute, OLD_RECORD)
    connection.close()
    with open_store(str(path)) as store:
        assert await store.read(lambda r: r.process_groups_of("old")) == [MOVED]


async def test_an_upgraded_postgres_store_keeps_the_groups_its_running_calls_recorded(
    postgres_database: PostgresDatabase,
) -> None:
    """PostgreSQL's version 8, as SQLite's 15."""
    postgres_database.empty()
    url = postgres_database.url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE process_groups")
        # What versions 9, 10 and 11 add, so that the store is one of version 7 again.
        conn.execute(
            "ALTER TABLE forms DROP COLUMN source, DROP COLUMN schema, DROP COLUMN prompt, DROP COLUMN resume"
        )
        conn.execute("DROP INDEX sessions_by_owner")
        conn.execute("ALTER TABLE sessions DROP COLUMN owner")
        conn.execute("DROP TABLE steers")
        conn.execute("ALTER TABLE turns DROP COLUMN soft_stop")
        conn.execute("ALTER TABLE tool_calls DROP COLUMN edited_input")
        conn.execute("ALTER TABLE permission_requests DROP COLUMN input")
        conn.execute("UPDATE store_version SET version = 7")
        _running_call_with_a_group(conn.execute, OLD_RECORD)
    try:
        with open_store(url, pool_size=1) as store:
            assert await store.read(lambda r: r.process_groups_of("old")) == [MOVED]
    finally:
        postgres_database.empty()
