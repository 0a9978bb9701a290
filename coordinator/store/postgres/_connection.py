"""The shared queries' transport on a psycopg connection, and psycopg's errors as the store's own.

Runs in a worker thread, on one pooled connection, inside one transaction (or a read-only one for a
read view). The queries are written with ``?`` parameters; psycopg takes ``%s``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from coordinator import errors

# Retried by the store: the body runs again on a fresh transaction (nothing of it was kept).
RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)


def mapped(exc: psycopg.Error) -> errors.StoreError:
    """The store error that ``exc`` is, naming psycopg's class (``OperationalError: ...``)."""
    message = f"{type(exc).__name__}: {str(exc).strip()}"
    if isinstance(exc, pg_errors.LockNotAvailable | pg_errors.QueryCanceled | pg_errors.TooManyConnections):
        return errors.StoreBusy(message)
    if isinstance(exc, pg_errors.DiskFull):
        return errors.StoreFull(message)
    return errors.StoreError(message)


@functools.lru_cache(maxsize=1024)
def to_psycopg(sql: str) -> str:
    """``?`` parameters as psycopg's ``%s`` (a literal ``%`` doubled). The shared SQL holds no ``?``
    inside a string literal."""
    return sql.replace("%", "%%").replace("?", "%s")


class PsycopgConnection:
    """``_sql.Connection`` on one psycopg connection inside one transaction.

    ``serialize`` takes a transaction-scoped advisory lock per scope (a session id, a table): under
    READ COMMITTED it is what SQLite's single writer gives for free, that two transactions numbering
    one session's rows (``MAX(ord) + 1``) never interleave. The event counter row gives each event
    its seq and stays locked until the commit, so seqs become visible in seq order.
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self._serialized: set[str] = set()

    def all(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cursor = self._execute(sql, args)
        return cursor.fetchall() if cursor.description is not None else []

    def run(self, sql: str, args: Sequence[Any] = ()) -> int:
        return self._execute(sql, args).rowcount

    def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        try:
            with self.conn.cursor() as cursor:
                cursor.executemany(to_psycopg(sql), list(rows))
        except RETRYABLE:
            raise
        except psycopg.Error as exc:
            raise mapped(exc) from exc

    def _execute(self, sql: str, args: Sequence[Any]) -> psycopg.Cursor[Any]:
        try:
            return self.conn.execute(to_psycopg(sql), tuple(args))
        except RETRYABLE:
            raise
        except psycopg.Error as exc:
            raise mapped(exc) from exc

    def serialize(self, scope: str) -> None:
        if scope not in self._serialized:
            self._execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", (scope,))
            self._serialized.add(scope)

    def insert_event(self, type: str, session_id: str | None, at: str, payload: str) -> int:
        # One statement: the counter's row lock is taken as late as the event needs it, with no
        # round trip to Python while it is held before the rest of the body.
        row = self._execute(
            "WITH counter AS (UPDATE event_counter SET last = last + 1 WHERE id = 1 RETURNING last) "
            "INSERT INTO events(seq, type, session_id, at, payload) "
            "SELECT last, ?, ?, ?, ? FROM counter RETURNING seq",
            (type, session_id, at, payload),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def last_seq(self) -> int:
        row = self._execute("SELECT last FROM event_counter WHERE id = 1", ()).fetchone()
        return 0 if row is None else int(row[0])

    def last_seq_sql(self) -> str:
        # Read without the counter's lock: at most the last seq given, never above a later one.
        return "(SELECT last FROM event_counter WHERE id = 1)"

    def json_text(self, column: str, key: str) -> str:
        return f"(({column})::jsonb ->> '{key}')"

    def clock(self) -> float:
        row = self._execute("SELECT extract(epoch FROM clock_timestamp())::float8", ()).fetchone()
        assert row is not None
        return float(row[0])

    def page_counts(self) -> tuple[int, int]:
        return 0, 0  # PostgreSQL's autovacuum gives space back itself
