"""The shared queries' transport on an apsw connection, and apsw's errors as the store's own."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import apsw

from coordinator import errors
from coordinator.store._sql import Mispredicted
from coordinator.store.sqlite._errors import mapped


@contextlib.contextmanager
def map_apsw_errors() -> Iterator[None]:
    """Translate apsw's exceptions into the store's own, at this one boundary."""
    try:
        yield
    except apsw.Error as exc:
        raise mapped(exc) from exc


APSW_ERRORS_MAPPED: dict[type[BaseException], type[errors.StoreError]] = {
    apsw.BusyError: errors.StoreBusy,
    apsw.FullError: errors.StoreFull,
    apsw.Error: errors.StoreError,
}


class ApswConnection:
    """``_sql.Connection`` on one apsw connection, used on the trio thread.

    SQLite's write lock (``BEGIN IMMEDIATE``) serializes whole write transactions, so ``serialize``
    has nothing left to do; ``seq`` is the ``AUTOINCREMENT`` rowid of ``events``.
    """

    predicts = False  # a read costs no round trip here

    def __init__(self, db: apsw.Connection) -> None:
        self.db = db

    def all(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self.db.execute(sql, args).fetchall()
        except apsw.Error as exc:  # a page damaged after the open's check, a busy reader...
            raise mapped(exc) from exc

    def run(self, sql: str, args: Sequence[Any] = ()) -> int:
        try:
            self.db.execute(sql, args)
        except apsw.Error as exc:
            raise mapped(exc) from exc
        return self.db.changes()

    def send(self, sql: str, args: Sequence[Any] = ()) -> None:
        try:
            self.db.execute(sql, args)
        except apsw.Error as exc:
            raise mapped(exc) from exc

    def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with map_apsw_errors():
            self.db.executemany(sql, rows)

    def later(self, sql: str, args: Sequence[Any] = ()) -> Callable[[], list[tuple[Any, ...]]]:
        return functools.partial(list, self.all(sql, args))

    def expect(self, condition: str, args: Sequence[Any], what: str) -> None:
        if not self.all(f"SELECT {condition}", args)[0][0]:
            raise Mispredicted(f"prediction missed: {what}")

    def expect_changed(self, sql: str, args: Sequence[Any], what: str) -> None:
        if self.run(sql, args) != 1:
            raise Mispredicted(f"prediction missed: {what}")

    def serialize(self, scope: str) -> None:
        return None

    def insert_event(self, type: str, session_id: str | None, at: str, payload: str) -> Callable[[], int]:
        self.send(
            "INSERT INTO events(type, session_id, at, payload) VALUES (?, ?, ?, ?)",
            (type, session_id, at, payload),
        )
        return functools.partial(int, self.db.last_insert_rowid())

    def last_seq(self) -> int:
        # ``sqlite_sequence`` keeps the highest rowid ever given to the AUTOINCREMENT column, even
        # once its row is deleted (a deleted session's events, or those retention pruned).
        rows = self.all(
            "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), "
            "COALESCE((SELECT MAX(seq) FROM events), 0))"
        )
        return int(rows[0][0])

    def last_seq_sql(self) -> str:
        return "(SELECT COALESCE(MAX(seq), 0) FROM sqlite_sequence WHERE name = 'events')"

    def json_text(self, column: str, key: str) -> str:
        return f"json_extract({column}, '$.{key}')"

    def clock(self) -> float:
        return time.time()  # one machine: its clock is the store's

    def page_counts(self) -> tuple[int, int]:
        free = self.all("PRAGMA freelist_count")
        total = self.all("PRAGMA page_count")
        return int(free[0][0]), int(total[0][0])
