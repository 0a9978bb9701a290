"""The SQLite store on apsw: one connection owned by the coordinator, WAL, versioned migrations.

Every statement runs on the trio thread. SQLite commits without a sync take microseconds; running them
inline (not in a worker thread) keeps a transaction atomic with respect to trio's scheduling, so no
other task can observe a half-written state, and keeps tests deterministic under ``MockClock``. A
transaction's body is synchronous by construction: ``SqliteTx`` has no async methods, so nothing can be
awaited while the write lock is held. Only the fsync that makes commits durable leaves the trio thread
(``serve_durability``, ``_durability.py``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import apsw
import trio

from coordinator import errors
from coordinator.events import Draft, Event
from coordinator.store._durability import GroupDurability
from coordinator.store._migrations import MIGRATIONS
from coordinator.store._queries import Queries

BUSY_TIMEOUT_MS = 5000


def now_rfc3339() -> str:
    """The wall-clock time as RFC 3339 with milliseconds, in UTC."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@contextlib.contextmanager
def map_apsw_errors() -> Iterator[None]:
    """Translate apsw's exceptions into the store's own, at this one boundary."""
    try:
        yield
    except apsw.BusyError as exc:
        raise errors.StoreBusy(str(exc)) from exc
    except apsw.FullError as exc:
        raise errors.StoreFull(str(exc)) from exc
    except apsw.Error as exc:
        raise errors.StoreError(f"{type(exc).__name__}: {exc}") from exc


APSW_ERRORS_MAPPED: dict[type[BaseException], type[errors.StoreError]] = {
    apsw.BusyError: errors.StoreBusy,
    apsw.FullError: errors.StoreFull,
    apsw.Error: errors.StoreError,
}


class SqliteTx(Queries):
    """An open write transaction. Its queries are synchronous; events appended here are published
    by the store only after the commit succeeds."""

    def __init__(self, db: apsw.Connection) -> None:
        super().__init__(db)
        self.events: list[Event] = []

    def emit(self, draft: Draft) -> Event:
        """Append an event to the log in this transaction; returns it with its seq."""
        at = now_rfc3339()
        payload = json.dumps(draft.payload, separators=(",", ":"))
        self.db.execute(
            "INSERT INTO events(type, session_id, at, payload) VALUES (?, ?, ?, ?)",
            (draft.type, draft.session_id, at, payload),
        )
        event = Event(
            seq=self.db.last_insert_rowid(),
            type=draft.type,
            session_id=draft.session_id,
            at=at,
            payload=draft.payload,
        )
        self.events.append(event)
        return event


class SqliteStore:
    """The store on one SQLite file. Use ``open_sqlite_store``.

    Alone, every commit is as durable as ``synchronous`` says when ``COMMIT`` returns (SQLite syncs
    inline). While ``serve_durability`` runs (the coordinator runs it), commits are made durable in
    groups by that task, off the trio thread, and ``durable()`` waits for it: see ``_durability.py``.
    """

    def __init__(self, db: apsw.Connection, path: str, synchronous: str) -> None:
        self._db = db
        self.path = path
        self.synchronous = synchronous
        self._in_transaction = False
        self._on_commit: list[Callable[[Sequence[Event]], None]] = []
        self._on_durable: list[Callable[[Sequence[Event]], None]] = []
        self.read = Queries(db)
        # Chaos hook: called before every commit; may raise a StoreError to simulate a failing disk.
        self.before_commit: Callable[[], None] | None = None
        self._durability = GroupDurability(db, path, synchronous, self._hand_over, BUSY_TIMEOUT_MS)
        self.last_own_seq = 0
        """The seq of the last event this store committed (durable or not yet)."""

    def on_commit(self, callback: Callable[[Sequence[Event]], None]) -> None:
        """Call ``callback(events)`` right after each commit that appended events, durable or not yet
        (observers inside this process, like the chaos campaign's watch)."""
        self._on_commit.append(callback)

    def on_durable(self, callback: Callable[[Sequence[Event]], None]) -> None:
        """Call ``callback(events)`` once a commit that appended events is durable, in commit order
        (the bus: nothing reaches a subscriber before it is durable)."""
        self._on_durable.append(callback)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqliteTx]:
        """Open a write transaction; commits when the block ends, rolls back if it raises.

        The block must not await (the transaction object has no async methods). After a successful
        commit the events appended are handed to the ``on_commit`` callbacks before anything else runs,
        and to the ``on_durable`` ones once durable. Returning does not mean durable: await
        ``durable()`` before telling anyone outside the process.

        **Cancellation:** a checkpoint before the transaction begins; once begun, it is atomic.

        **Raises:** ``StoreBusy``, ``StoreFull``, ``StoreError``; ``Fenced`` from a fencing check.
        """
        await trio.lowlevel.checkpoint()
        if self._in_transaction:
            raise RuntimeError("a store transaction is already open: a transaction body awaited")
        self._in_transaction = True
        try:
            with map_apsw_errors():
                self._db.execute("BEGIN IMMEDIATE")
            tx = SqliteTx(self._db)
            try:
                yield tx
                if self.before_commit is not None:
                    self.before_commit()
                with map_apsw_errors():
                    self._db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(apsw.Error):
                    self._db.execute("ROLLBACK")
                raise
        finally:
            self._in_transaction = False
        if tx.events:
            self.last_own_seq = tx.events[-1].seq
            for callback in self._on_commit:
                callback(tx.events)
        self._durability.committed(tx.events)

    def _hand_over(self, events: Sequence[Event]) -> None:
        for callback in self._on_durable:
            callback(events)

    async def durable(self) -> None:
        """Wait until every commit made so far is durable and its events handed to ``on_durable``.

        Await it before acknowledging anything outside the process: answering a caller, starting a
        tool. Returns at once when nothing is pending. **Cancellation:** safe; the commits stay and
        become durable anyway. **Raises:** ``StoreError`` if syncing failed.
        """
        await self._durability.wait()

    async def sync_now(self) -> None:
        """Sync the WAL once more, whatever is pending: makes other processes' commits durable too."""
        await self._durability.sync_now()

    async def serve_durability(  # noqa: ASYNC128 (GroupDurability.serve calls started())
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Make commits durable in groups until cancelled, then once more for the last ones."""
        await self._durability.serve(task_status=task_status)

    def close(self) -> None:
        self._db.close()


def _connect(path: str, synchronous: str) -> apsw.Connection:
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = apsw.Connection(path)
    db.set_busy_timeout(BUSY_TIMEOUT_MS)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous.upper()}")
    db.execute("PRAGMA foreign_keys=ON")
    return db


def _migrate(db: apsw.Connection) -> None:
    with db:
        version = int(str(db.execute("PRAGMA user_version").fetchall()[0][0]))
        if version > len(MIGRATIONS):
            raise errors.SchemaTooNew(
                f"database schema version {version} is newer than this coordinator's {len(MIGRATIONS)}"
            )
        for number in range(version, len(MIGRATIONS)):
            MIGRATIONS[number](db)
            db.execute(f"PRAGMA user_version={number + 1}")


@contextlib.contextmanager
def open_sqlite_store(path: str, *, synchronous: str = "full") -> Iterator[SqliteStore]:
    """Open (creating if needed) and migrate the database at ``path``.

    Args:
        path: a file path, or ``:memory:``.
        synchronous: SQLite's ``synchronous`` mode: ``full`` (every commit survives power loss) or
            ``normal`` (in WAL mode, a commit survives a crash of the process but maybe not of the OS).
    """
    if synchronous not in ("full", "normal", "off"):
        raise ValueError(f"synchronous must be full, normal or off, not {synchronous!r}")
    with map_apsw_errors():
        db = _connect(path, synchronous)
        _migrate(db)
    store = SqliteStore(db, path, synchronous)
    try:
        yield store
    finally:
        store.close()
