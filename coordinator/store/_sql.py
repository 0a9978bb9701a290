"""The transport under the shared queries: what a backend's connection must do, and nothing more.

The queries of ``_reads.py`` and ``_writes.py`` are one body of SQL for every backend, written with
``?`` parameters in the dialect SQLite and PostgreSQL share. A backend gives them a ``Connection``:
statements run on one connection inside one transaction (or, for a read view, one statement at a
time), and the few things the dialects spell differently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from coordinator import errors


class Mispredicted(errors.StoreError):
    """A prediction a transaction's body made (``Connection.expect``) was wrong: the transaction is
    rolled back, and the backend runs the body again without predicting. Never leaves the store."""


class Connection(Protocol):
    """One database connection, as the shared queries use it. Every method may raise ``StoreError``
    (the backend maps its driver's exceptions at this boundary).

    **Predictions.** Across a network each result a transaction's body reads before its commit
    costs a round trip. Where the body can say what a read will find (nothing: no steer is pending,
    a call id is new; a compare-and-set changes its row), a connection that ``predicts`` lets it
    take that as the answer and send the check along (``expect``, ``expect_changed``), to be
    judged by the server on the way to the commit: a wrong prediction fails the transaction with
    ``Mispredicted``, and the backend runs the body again, reading. A connection that reads for
    free (SQLite's) never predicts.
    """

    predicts: bool
    """Whether the body should take its predictions and have them checked, rather than read."""

    def all(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of a query."""
        ...

    def run(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Execute a statement; the number of rows it changed."""
        ...

    def send(self, sql: str, args: Sequence[Any] = ()) -> None:
        """Execute a statement whose result nobody reads. A backend across a network may send it
        with the next statement whose result is read, or with the commit: its error, if any, is
        raised there."""
        ...

    def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Execute a statement once for each parameter row."""
        ...

    def later(self, sql: str, args: Sequence[Any] = ()) -> Callable[[], list[tuple[Any, ...]]]:
        """The rows of a query the body does not branch on: returns how to learn them. A backend
        across a network learns them with the commit's answer (asking earlier waits for the
        server); they are what the query read at its place in the transaction either way."""
        ...

    def expect(self, condition: str, args: Sequence[Any], what: str) -> None:
        """The SQL boolean ``condition`` must hold here, or the transaction fails with
        ``Mispredicted`` (``what`` names the prediction in its message)."""
        ...

    def expect_changed(self, sql: str, args: Sequence[Any], what: str) -> None:
        """Execute the ``UPDATE`` ``sql``, which must change exactly one row, or the transaction
        fails with ``Mispredicted``."""
        ...

    def serialize(self, scope: str) -> None:
        """From here to the end of the transaction, no other transaction that serializes on
        ``scope`` (a session id, a table) runs: a read-modify-write (the next ``ord`` of a session's
        rows) cannot interleave with another one. A no-op where the backend serializes every write
        transaction anyway (SQLite's write lock)."""
        ...

    def insert_event(self, type: str, session_id: str | None, at: str, payload: str) -> Callable[[], int]:
        """Append an event to the log; returns how to learn its seq (a backend across a network
        learns it with the commit's answer: asking earlier waits for the server). A seq is never
        given again and becomes visible in seq order (no event of a lower seq appears after one of a
        higher seq)."""
        ...

    def last_seq(self) -> int:
        """The highest seq ever given, even if its event was deleted since."""
        ...

    def last_seq_sql(self) -> str:
        """The SQL expression for ``last_seq`` inside a statement (a lower bound of every seq given
        after the statement)."""
        ...

    def json_text(self, column: str, key: str) -> str:
        """The SQL expression for the text of top-level ``key`` of the JSON text in ``column``."""
        ...

    def clock(self) -> float:
        """The store's own time, in seconds since the epoch: what heartbeats are written and judged
        by, so that nodes on several hosts agree on a lease whatever their own clocks say."""
        ...

    def page_counts(self) -> tuple[int, int]:
        """The database's free pages and all its pages (0, 0 where the backend keeps no such count)."""
        ...


def one(connection: Connection, sql: str, args: Sequence[Any] = ()) -> tuple[Any, ...] | None:
    """The first row of a query, or None."""
    rows = connection.all(sql, args)
    return rows[0] if rows else None
