"""The blocking side of group durability: the WAL file (fsync, WAL checkpoint, restart, reclaim) and the
one worker thread those calls run in, off the trio thread."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Awaitable, Callable

import apsw
import outcome
import trio

from coordinator import errors
from coordinator.store.sqlite._log_rewrite import rewrite_file, rewrite_log, sync_folder

Blocking = Callable[[Callable[[], None]], Awaitable[None]]
"""A way to run a blocking call: in the worker thread (``SyncThread.run``), or inline (``run_inline``)."""


def sync_wal(wal: WalFile) -> None:
    """``wal.sync()``. **Raises:** ``StoreError`` when the disk refuses."""
    try:
        wal.sync()
    except OSError as exc:  # the disk refused: nothing more can be promised durable
        raise errors.StoreError(f"syncing the write-ahead log failed: {exc}") from exc


class SyncThread:
    """One worker thread for the blocking calls of one durability task.

    Not ``trio.to_thread.run_sync``: its thread cache and capacity limiter cost about twice as much
    CPU per call on the trio thread, and this one has a single job (measured in design/benchmarks.md).
    A call is never abandoned: once a sync began, its caller waits for it, so what it covered is known.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None], trio.lowlevel.Task] | None] = (
            queue.SimpleQueue()
        )
        self._token = trio.lowlevel.current_trio_token()
        # A daemon: a disk that never answers must not keep the process from exiting.
        self._thread = threading.Thread(target=self._serve, name="store-sync", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            work, task = job
            result = outcome.capture(work)
            try:
                self._token.run_sync_soon(trio.lowlevel.reschedule, task, result)
            except trio.RunFinishedError:
                return

    async def run(self, work: Callable[[], None]) -> None:
        """Run ``work`` in the thread and return its outcome. **Cancellation:** not cancellable."""
        await trio.lowlevel.checkpoint_if_cancelled()  # cancellable until the job is handed over
        self._jobs.put((work, trio.lowlevel.current_task()))
        # Resumed with the job's outcome: its exception, if any, is raised here.
        await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)

    def stop(self, timeout: float) -> None:
        """Let the thread finish its job and end (waits at most ``timeout`` seconds)."""
        self._jobs.put(None)
        self._thread.join(timeout)


async def run_inline(work: Callable[[], None]) -> None:
    work()  # no scheduling point after: the cycle hands the events over before anything else runs


class WalFile:
    """The write-ahead log of one database file: fsync it, checkpoint it. Blocking calls.

    ``sync`` and ``checkpoint`` may run in a worker thread: they use a file descriptor and a SQLite
    connection of their own, never the trio thread's connection.
    """

    def __init__(self, path: str, busy_timeout_ms: int) -> None:
        self._path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._fd: int | None = None
        self._checkpointer: apsw.Connection | None = None

    def sync(self) -> None:
        """Make every frame written to the WAL so far durable (whoever wrote it)."""
        if self._fd is None:
            try:
                self._fd = os.open(self._path + "-wal", os.O_RDONLY)
            except FileNotFoundError:
                return  # nothing written yet: nothing to make durable
            sync_folder(os.path.dirname(os.path.abspath(self._path)))
        os.fdatasync(self._fd)

    def rewrite(self, frames_written: int, database_too: bool) -> None:
        """After a failed sync: write the whole log again and sync it (``_log_rewrite``), and the
        database file too when ``database_too`` (a WAL checkpoint failed), holding SQLite's write lock
        so that nothing is appended or copied meanwhile. The descriptor and the connection are opened
        afresh: nothing about the ones that saw the failure is trusted.

        **Raises:** ``LogLost`` when the log does not read back whole; ``StoreError`` when the disk
        refuses or another writer holds the lock (try again later).
        """
        self.close()
        db = self._checkpoint_connection()
        try:
            db.execute("BEGIN IMMEDIATE")
        except apsw.Error as exc:
            raise errors.StoreError(f"taking the write lock to rewrite the log failed: {exc}") from exc
        try:
            rewrite_log(self._path + "-wal", frames_written)
            if database_too:
                rewrite_file(self._path)
        finally:
            with contextlib.suppress(apsw.Error):  # the next rewrite opens a new connection anyway
                db.execute("ROLLBACK")

    def checkpoint(self) -> None:
        """Copy the WAL into the database without blocking writers (``PASSIVE``); busy is no error.

        **Raises:** ``StoreError`` when the disk refuses (what was committed stays in the WAL).
        """
        try:
            self._checkpoint_connection().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except (apsw.BusyError, apsw.LockedError):
            return  # another connection checkpoints the WAL, or holds the lock: the next cycle tries again
        except apsw.Error as exc:
            raise errors.StoreError(f"checkpointing the write-ahead log failed: {exc}") from exc

    def restart(self) -> None:
        """Write a row of the store's own (``store_meta``'s ``wal_restarts``) from the checkpointer's
        connection: once a WAL checkpoint copied the whole log, this write starts it again and syncs its
        header, off the trio thread, which would otherwise pay that sync in its next commit (0.5 to 1
        ms measured, on the first commit of a stop). Busy is no error: a commit of the trio thread
        came first and restarted it.

        **Raises:** ``StoreError`` when the disk refuses.
        """
        try:
            self._checkpoint_connection().execute(
                "INSERT INTO store_meta(key, value) VALUES ('wal_restarts', '1') ON CONFLICT(key) "
                "DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
            )
        except (apsw.BusyError, apsw.LockedError):
            return
        except apsw.Error as exc:
            raise errors.StoreError(f"restarting the write-ahead log failed: {exc}") from exc

    def reclaim(self, pages: int) -> int:
        """Give up to ``pages`` free pages of the database back to the file system; the free pages
        left, or -1 when a writer held the lock (no error: the next call tries again).

        **Raises:** ``StoreError`` when the disk refuses.
        """
        try:
            return incremental_vacuum(self._checkpoint_connection(), pages)
        except (apsw.BusyError, apsw.LockedError):
            return -1
        except apsw.Error as exc:
            raise errors.StoreError(f"reclaiming free pages failed: {exc}") from exc

    def _checkpoint_connection(self) -> apsw.Connection:
        if self._checkpointer is None:
            self._checkpointer = apsw.Connection(self._path)
            self._checkpointer.set_busy_timeout(self._busy_timeout_ms)
            # Syncs the WAL before copying and the database after: the copy never outruns the log.
            self._checkpointer.execute("PRAGMA synchronous=NORMAL")
        return self._checkpointer

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None


def incremental_vacuum(db: apsw.Connection, pages: int) -> int:
    """Free up to ``pages`` pages of ``db``'s free list; returns how many are left on it."""
    for _ in db.execute(f"PRAGMA incremental_vacuum({int(pages)})"):
        pass  # a row a page: the statement works only while it is stepped
    return int(str(db.execute("PRAGMA freelist_count").fetchall()[0][0]))
