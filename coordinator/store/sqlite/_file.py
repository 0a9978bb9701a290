"""Opening the SQLite file: the connection's settings, WAL mode, a patient busy handler, an integrity
check, the one-time conversion to incremental vacuum, and the schema's migrations."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import apsw

from coordinator import errors
from coordinator.logs import get_logger
from coordinator.store.sqlite._migrations import MIGRATIONS

BUSY_TIMEOUT_MS = 5000
"""How long a statement waits for another connection's write lock before it fails busy."""

AUTO_VACUUM_NONE = 0

log = get_logger(__name__)


def rollback(db: apsw.Connection) -> None:
    """Roll back the open transaction, if any (an error doing so changes nothing more)."""
    with contextlib.suppress(apsw.Error):
        db.execute("ROLLBACK")


class BusyWait:
    """SQLite's busy handler for the write lock another process holds: short, growing sleeps.

    SQLite's own (``busy_timeout``) sleeps 1, 2, 5, 10... ms between tries, while the other process's
    transactions hold the lock for a fraction of a millisecond: two coordinators on one file waited
    more than they wrote. Here the sleeps start at 20 µs and double up to 1 ms; the whole wait is
    still bounded by ``BUSY_TIMEOUT_MS``, after which SQLite reports busy (``StoreBusy``).
    """

    FIRST_SLEEP = 20e-6
    LONGEST_SLEEP = 1e-3

    def __init__(self, timeout_ms: int) -> None:
        self._timeout = timeout_ms / 1000
        self._since = 0.0

    def __call__(self, prior_calls: int) -> bool:
        now = time.perf_counter()
        if prior_calls == 0:
            self._since = now
        elif now - self._since >= self._timeout:
            return False
        time.sleep(min(self.FIRST_SLEEP * 2 ** min(prior_calls, 10), self.LONGEST_SLEEP))
        return True


def connect(path: str, synchronous: str) -> apsw.Connection:
    """A connection to ``path`` (created if missing) set up for the store: WAL, ``synchronous``."""
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = apsw.Connection(path)
    db.set_busy_handler(BusyWait(BUSY_TIMEOUT_MS))
    # First: SQLite takes it only on an empty file, before anything (WAL mode included) is written.
    db.execute("PRAGMA auto_vacuum=INCREMENTAL")
    _enter_wal(db)
    db.execute(f"PRAGMA synchronous={synchronous.upper()}")
    db.execute("PRAGMA foreign_keys=ON")
    # The query planner's stability guarantee: a statement's plan never depends on the values bound
    # to it. Without it, SQLite (built with STAT4, as apsw is) marks a statement whose ``ORDER BY``
    # it compared with a bound ``WHERE`` term, and prepares it again at every new binding: every
    # ``SELECT ord ... ORDER BY ord DESC LIMIT 1`` and history read, 13 of a turn's 68 statements,
    # about a tenth of a turn's instructions (design/benchmarks.md). Our plans are index lookups that
    # no bound value changes.
    db.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, 1)
    return db


def _enter_wal(db: apsw.Connection) -> None:
    """Switch the file to WAL mode (nothing to do if it is already).

    On a new file another connection may be switching it at the same moment, and SQLite answers
    that switch busy without calling the busy handler: it is tried again here, on the busy handler's
    own schedule and bound (two processes opening one new file, ``tests/coordinator/store/test_busy.py``).
    """
    wait = BusyWait(BUSY_TIMEOUT_MS)
    tries = 0
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except apsw.BusyError:
            if not wait(tries):
                raise
            tries += 1


def check_integrity(db: apsw.Connection) -> None:
    """Refuse a damaged database at open, before anything reads it.

    ``quick_check`` reads every page (0.27 s for a 480 MB file, warm: design/store.md), so a corrupt
    page anywhere, in a table the start would not touch too, is one clear error now rather than a
    failure in the middle of some later turn.

    **Raises:** ``StoreError`` with SQLite's first complaint.
    """
    problems = [str(row[0]) for row in db.execute("PRAGMA quick_check(5)").fetchall()]
    if problems != ["ok"]:
        raise errors.StoreError(f"CorruptError: the database is damaged ({'; '.join(problems)})")


def ensure_incremental_vacuum(db: apsw.Connection, path: str) -> None:
    """Convert a database created without auto-vacuum, once, so that the pages freed by deletions
    go back to the file system (``reclaim_space``) instead of only to SQLite's free list.

    ``VACUUM`` rewrites the whole file (outside any transaction, which is why it runs here, at open):
    seconds for a large one, paid once.
    """
    if int(str(db.execute("PRAGMA auto_vacuum").fetchall()[0][0])) != AUTO_VACUUM_NONE:
        return
    started = time.monotonic()
    db.execute("PRAGMA auto_vacuum=INCREMENTAL")
    try:
        db.execute("VACUUM")
    except (apsw.BusyError, apsw.LockedError) as exc:
        # Another process has the file open (a node not yet upgraded): the next open converts it.
        log.warning("store_conversion_postponed", path=path, error=str(exc))
        return
    log.info("store_converted_to_incremental_vacuum", path=path, seconds=round(time.monotonic() - started, 3))


def migrate(db: apsw.Connection) -> None:
    """Bring the schema to this coordinator's version, in one transaction.

    The transaction takes the write lock before it reads the version (``BEGIN IMMEDIATE``): two
    processes opening one new file at once would otherwise both read version 0 and the second's
    upgrade from reader to writer would fail at once (SQLite cannot wait for a snapshot that is
    already stale), where now it waits for the first to finish and finds nothing left to do.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        version = int(str(db.execute("PRAGMA user_version").fetchall()[0][0]))
        if version > len(MIGRATIONS):
            raise errors.SchemaTooNew(
                f"database schema version {version} is newer than this coordinator's {len(MIGRATIONS)}"
            )
        for number in range(version, len(MIGRATIONS)):
            MIGRATIONS[number](db)
            db.execute(f"PRAGMA user_version={number + 1}")
    except BaseException:
        rollback(db)
        raise
    db.execute("COMMIT")
