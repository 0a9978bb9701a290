"""The shared queries' transport on a psycopg connection, and psycopg's errors as the store's own.

Runs in a worker thread, on one pooled connection, inside one transaction (or a read-only one for a
read view). The queries are written with ``?`` parameters; psycopg takes ``%s``.

A store's transaction runs in psycopg's pipeline mode: a statement whose result nobody reads
(``send``, an event's insert, the fence) is not waited for; it travels to the server with the next
statement whose result is read, or with the COMMIT. So a transaction costs one round trip to the
server, plus one for each result its body waits for before the commit: a result it hands back is
learned with the commit (``later``), and a read the body can predict is checked by the server
instead (``expect``, ``expect_changed``; ``_sql.Connection`` says how). An error of a statement sent
ahead is raised where the connection next waits: it still rolls the whole transaction back.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from coordinator import errors
from coordinator.store._sql import Mispredicted

# Retried by the store: the body runs again on a fresh transaction (nothing of it was kept).
RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)


FENCED = "CF001"
"""The SQLSTATE ``coordinator_fence`` raises (``_migrations.py``): the claim has moved on."""

MISPREDICTED = "CF002"
"""The SQLSTATE ``coordinator_check`` raises: a prediction of the body was wrong."""


def mapped(exc: psycopg.Error) -> errors.StoreError | errors.Fenced:
    """The store error that ``exc`` is, naming psycopg's class (``OperationalError: ...``); the
    fence's own error is ``Fenced``, a wrong prediction's ``Mispredicted``."""
    if exc.sqlstate == FENCED and exc.diag.message_detail:
        session_id, epoch = exc.diag.message_detail.rsplit(" ", 1)
        return errors.Fenced(session_id=session_id, epoch=int(epoch))
    message = f"{type(exc).__name__}: {str(exc).strip()}"
    if exc.sqlstate == MISPREDICTED:
        return Mispredicted(message)
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


class SecondStatement(BaseException):
    """A read run as one statement outside a transaction asked for a second one: it must run again
    in a snapshot. A ``BaseException``, so that no handler of the read's own can take it for an
    error."""


class PsycopgConnection:
    """``_sql.Connection`` on one psycopg connection inside one transaction.

    ``serialize`` takes a transaction-scoped advisory lock per scope (a session id, a table): under
    READ COMMITTED it is what SQLite's single writer gives for free, that two transactions numbering
    one session's rows (``MAX(ord) + 1``) never interleave. The event counter row gives each event
    its seq and stays locked until the commit, so seqs become visible in seq order.
    """

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        pipeline: psycopg.Pipeline | None = None,
        *,
        statements: int = 0,
        predicts: bool = False,
    ) -> None:
        self.conn = conn
        self._pipeline = pipeline
        self.predicts = predicts
        self._allowed = statements  # 0: any number; else more raise ``SecondStatement``
        self._serialized: set[str] = set()
        # Every statement whose result is not read goes through one cursor (a cursor each costs
        # about as much again as the statement's own work in psycopg).
        self._sender: psycopg.Cursor[Any] | None = None

    def all(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cursor = self._execute(sql, args, wait=True)
        return cursor.fetchall() if cursor.description is not None else []

    def run(self, sql: str, args: Sequence[Any] = ()) -> int:
        return self._execute(sql, args, wait=True).rowcount

    def send(self, sql: str, args: Sequence[Any] = ()) -> None:
        if self._sender is None:
            self._sender = self.conn.cursor()
        try:
            self._sender.execute(to_psycopg(sql), tuple(args))
        except RETRYABLE:
            raise
        except psycopg.Error as exc:
            raise mapped(exc) from exc

    def later(self, sql: str, args: Sequence[Any] = ()) -> Callable[[], list[tuple[Any, ...]]]:
        return _LaterRows(self._execute(sql, args))

    def expect(self, condition: str, args: Sequence[Any], what: str) -> None:
        self.send(f"SELECT coordinator_check({condition}, ?)", (*args, what))

    def expect_changed(self, sql: str, args: Sequence[Any], what: str) -> None:
        self.send(
            f"WITH changed AS ({sql} RETURNING 1) SELECT coordinator_check(count(*) = 1, ?) FROM changed",
            (*args, what),
        )

    def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        try:
            with self.conn.cursor() as cursor:
                cursor.executemany(to_psycopg(sql), list(rows))
        except RETRYABLE:
            raise
        except psycopg.Error as exc:
            raise mapped(exc) from exc

    def _execute(self, sql: str, args: Sequence[Any], *, wait: bool = False) -> psycopg.Cursor[Any]:
        """Execute; with ``wait``, return once its result (and that of every statement sent before
        it) is in."""
        if self._allowed:
            if self._allowed < 0:
                raise SecondStatement()
            self._allowed = -1
        try:
            cursor = self.conn.execute(to_psycopg(sql), tuple(args))
            if wait and self._pipeline is not None:
                self._pipeline.sync()
            return cursor
        except RETRYABLE:
            raise
        except psycopg.Error as exc:
            raise mapped(exc) from exc

    def serialize(self, scope: str) -> None:
        if scope not in self._serialized:
            self.send("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", (scope,))
            self._serialized.add(scope)

    def fence(self, session_id: str, owner: str, epoch: int) -> None:
        """Take the session's lock, and fail the transaction with ``Fenced`` unless ``owner`` still
        holds its claim at ``epoch``: one statement, which nothing waits for (its error rolls the
        transaction back wherever it is raised)."""
        self.send("SELECT coordinator_fence(?, ?, ?)", (session_id, owner, epoch))
        self._serialized.add(session_id)

    def insert_event(self, type: str, session_id: str | None, at: str, payload: str) -> Callable[[], int]:
        # One statement: the counter's row lock is taken as late as the event needs it, with no
        # round trip to Python while it is held before the rest of the body.
        cursor = self._execute(
            "WITH counter AS (UPDATE event_counter SET last = last + 1 WHERE id = 1 RETURNING last) "
            "INSERT INTO events(seq, type, session_id, at, payload) "
            "SELECT last, ?, ?, ?, ? FROM counter RETURNING seq",
            (type, session_id, at, payload),
        )
        seq = _LaterRows(cursor)  # its row is in once the commit answered
        return lambda: int(seq()[0][0])

    def last_seq(self) -> int:
        row = self._execute("SELECT last FROM event_counter WHERE id = 1", (), wait=True).fetchone()
        return 0 if row is None else int(row[0])

    def last_seq_sql(self) -> str:
        # Read without the counter's lock: at most the last seq given, never above a later one.
        return "(SELECT last FROM event_counter WHERE id = 1)"

    def json_text(self, column: str, key: str) -> str:
        return f"(({column})::jsonb ->> '{key}')"

    def clock(self) -> float:
        row = self._execute("SELECT extract(epoch FROM clock_timestamp())::float8", (), wait=True).fetchone()
        assert row is not None
        return float(row[0])

    def page_counts(self) -> tuple[int, int]:
        return 0, 0  # PostgreSQL's autovacuum gives space back itself


class _LaterRows:
    """The rows of a statement sent ahead, read from its cursor once asked (which, before the
    commit's answer, waits for the server)."""

    __slots__ = ("_cursor", "_rows")

    def __init__(self, cursor: psycopg.Cursor[Any]) -> None:
        self._cursor: psycopg.Cursor[Any] | None = cursor
        self._rows: list[tuple[Any, ...]] = []

    def __call__(self) -> list[tuple[Any, ...]]:
        if self._cursor is not None:
            try:
                self._rows = self._cursor.fetchall()
            except psycopg.Error as exc:
                raise mapped(exc) from exc
            self._cursor = None
        return self._rows
