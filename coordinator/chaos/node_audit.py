"""The rounds over nodes' database: a scratch database per round, the write audit, the instances, and
a snapshot to check against. The bench's PostgreSQL figures use the scratch databases too.

A coordinator never installs the audit. The campaign does, in a database it made for one round:
triggers that record, in the writing transaction itself, which instance wrote each event and each
claim change (the connection's ``application_name``, ``coordinator INSTANCE``), and the claim of the
event's session as that transaction saw it. So "no node commits under a claim it no longer holds" is
checked over what was committed, exactly, not over timings seen from outside.
"""

from __future__ import annotations

import contextlib
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import attrs
import psycopg

from coordinator import errors
from coordinator.store import Reader
from coordinator.store.postgres import open_postgres_read_view, open_postgres_store

_AUDIT = """
CREATE TABLE chaos_writes (
    id bigserial PRIMARY KEY,
    xid bigint NOT NULL DEFAULT txid_current(),
    at double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp()),
    writer text NOT NULL DEFAULT current_setting('application_name'),
    kind text NOT NULL,
    session_id text,
    seq bigint,
    event_type text,
    owner text,
    epoch bigint,
    state text,
    old_owner text,
    old_epoch bigint,
    old_state text
);
CREATE FUNCTION chaos_event_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_writes(kind, session_id, seq, event_type, owner, epoch, state)
    SELECT 'event', NEW.session_id, NEW.seq, NEW.type, c.owner, c.epoch, c.state
    FROM (SELECT 1) AS one LEFT JOIN claims c ON c.session_id = NEW.session_id;
    RETURN NEW;
END $$;
CREATE TRIGGER chaos_event_written AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION chaos_event_written();
CREATE FUNCTION chaos_claim_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO chaos_writes(kind, session_id, owner, epoch, state)
        VALUES ('claim', NEW.session_id, NEW.owner, NEW.epoch, NEW.state);
    ELSE
        INSERT INTO chaos_writes(kind, session_id, owner, epoch, state, old_owner, old_epoch, old_state)
        VALUES ('claim', NEW.session_id, NEW.owner, NEW.epoch, NEW.state, OLD.owner, OLD.epoch, OLD.state);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER chaos_claim_written AFTER INSERT OR UPDATE ON claims
    FOR EACH ROW EXECUTE FUNCTION chaos_claim_written();
"""

WRITER_PREFIX = "coordinator "
"""How a node's connections name themselves (``application_name``); the instance id follows."""


@attrs.frozen(kw_only=True)
class AuditRow:
    """One audited write: an event (with its session's claim as the writing transaction saw it) or
    a claim change (with the claim before it, ``old_*``, for an update)."""

    id: int  # the order of the writes, within a transaction and, for one claim row, across them
    xid: int  # the writing transaction
    at: float  # the database's clock, in seconds since the epoch, when the row was written
    writer: str  # the instance id of the writing node ("" for a connection that names none)
    kind: str  # "event" or "claim"
    session_id: str | None
    seq: int | None
    event_type: str | None
    owner: str | None
    epoch: int | None
    state: str | None
    old_owner: str | None = None
    old_epoch: int | None = None
    old_state: str | None = None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> AuditRow:
        name = str(row[3])
        writer = name[len(WRITER_PREFIX) :] if name.startswith(WRITER_PREFIX) else ""
        return cls(
            id=row[0],
            xid=row[1],
            at=row[2],
            writer=writer,
            kind=row[4],
            session_id=row[5],
            seq=row[6],
            event_type=row[7],
            owner=row[8],
            epoch=row[9],
            state=row[10],
            old_owner=row[11],
            old_epoch=row[12],
            old_state=row[13],
        )


@attrs.frozen(kw_only=True)
class InstanceEntry:
    """An instance as the audit's reader lists it: which process it was."""

    id: str
    pid: int
    node_id: str | None
    started_at: str


def database_url(url: str, name: str) -> str:
    """``url`` naming database ``name`` instead of its own (user, host, port and options kept)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def create_scratch_database(server_url: str, name: str) -> str:
    """Create database ``name`` (dropped first if it exists) on the server of ``server_url``, with the
    coordinator's schema; returns its URL. **Raises:** ``StoreError`` when the server refuses."""
    try:
        with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        raise errors.StoreError(f"cannot create the scratch database {name}: {exc}") from exc
    url = database_url(server_url, name)
    with open_postgres_store(url, pool_size=1):  # opening a store creates the schema
        pass
    return url


def drop_scratch_database(server_url: str, name: str) -> None:
    """Drop database ``name`` (its connections ended first); nothing when it is gone already."""
    with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def install_write_audit(url: str) -> None:
    """Add the audit's table and triggers to the (migrated) database at ``url``."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute(_AUDIT)


def read_write_audit(url: str) -> list[AuditRow]:
    """Every audited write so far, in the order the rows were written."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id, xid, at, writer, kind, session_id, seq, event_type, owner, epoch, state, "
            "old_owner, old_epoch, old_state FROM chaos_writes ORDER BY id"
        ).fetchall()
    return [AuditRow.from_row(row) for row in rows]


def read_instances(url: str) -> list[InstanceEntry]:
    """Every instance that registered in the database, oldest first."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT id, pid, node_id, started_at FROM instances ORDER BY started_at, id")
        return [InstanceEntry(id=r[0], pid=r[1], node_id=r[2], started_at=str(r[3])) for r in rows]


def open_snapshot(url: str) -> contextlib.AbstractContextManager[Reader]:
    """A read view of the database at ``url`` in which every read sees the same committed state (a
    checker's view of a moment while nodes write)."""
    return open_postgres_read_view(url, snapshot=True)
