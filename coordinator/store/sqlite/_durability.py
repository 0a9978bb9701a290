"""Group durability for the SQLite store: one fsync of the WAL for every commit made meanwhile.

SQLite's ``synchronous=FULL`` fsyncs the write-ahead log inside every ``COMMIT``, on the committing
thread: ten commits a turn are ten fsyncs in a row on the trio thread, and a hundred sessions committing
at once still pay one fsync each. Here the connection commits with ``synchronous=NORMAL`` (the WAL is
written, not synced) and ``WalFile.sync`` fsyncs the WAL afterwards, for every commit made since the
last sync at once. Nothing is *acknowledged* before that fsync: the store hands a commit's events to
the bus only after it, ``SqliteStore.durable()`` returns only after it, and the coordinator awaits
``durable()`` before answering a caller or starting a tool. So the promise of FULL holds: an
acknowledged commit survives power loss. What a commit that was never acknowledged may lose to a power
loss is exactly what FULL may lose to one arriving a moment earlier.

Why an fsync of the WAL file is enough: WAL frames are only ever appended or, after a completed
checkpoint (which syncs the database file first), overwritten from the start; fsync flushes every
dirty page of the file, whichever connection or process wrote it. The folder is synced once, so the
WAL's own name survives too.

The fsync itself runs in a helper process (``_sync_process.py``) when one can be started, else in a
thread: a thread needs the GIL to start a sync and to report it, and the trio thread, busy with the
actors' Python, holds it. A sync is asked (a byte on a pipe) as soon as the trio loop has nothing left
to run, or a millisecond after the commit if it never runs out of work, even when someone already
waits for it (a caller's answer, a tool's start): the commits the loop makes meanwhile share it (a
tool turn's eight commits ask two syncs, not eight: each sync costs the trio thread a write, a
wakeup and a read, and the helper a cycle; asking at once for a waiter asked three, cost more CPU
and answered no sooner). At most two are asked and unanswered: one running, and one that covers
every commit made until it starts.

The WAL is also checkpointed here (``wal_autocheckpoint`` is off on the main connection), by a
connection of its own: SQLite would otherwise run a checkpoint, with its two fsyncs, inside whichever
commit crosses 1,000 pages, stalling the trio thread for tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import apsw
import attrs
import outcome
import structlog
import trio

from coordinator import clock, errors
from coordinator.events import Event
from coordinator.store.sqlite._sync_process import SyncProcess

CHECKPOINT_PAGES = 1000
"""WAL pages after which a passive checkpoint runs (SQLite's own default for auto-checkpoints)."""

SYNC_GRACE_SECONDS = 10.0
"""How long the last sync may take when the durability task is cancelled (a slow disk)."""

THREAD_JOIN_SECONDS = 1.0

UNANSWERED_SYNCS = 2
"""Syncs asked of the helper process and not answered yet, at most: one running and one that starts
as soon as it ends, covering every commit made until then."""

ASK_WITHIN_SECONDS = 0.001
"""How long a commit may wait for its sync to be asked when the trio loop never runs out of work
(else it is asked as soon as the loop has nothing to run)."""

log = structlog.get_logger()

Blocking = Callable[[Callable[[], None]], Awaitable[None]]


class GroupDurability:
    """Which commits of one connection are durable, who waits for that, and the task that syncs.

    Commits are counted as they happen (``committed``); a sync cycle takes the count, syncs the WAL,
    then declares that many durable, hands their events over in commit order and wakes the waiters.
    Commits made while a sync runs wait for the next cycle, which covers all of them at once.
    """

    def __init__(
        self,
        db: apsw.Connection,
        path: str,
        synchronous: str,
        hand_over: Callable[[Sequence[Event]], None],
        busy_timeout_ms: int,
    ) -> None:
        self._db = db
        self._path = path
        self._synchronous = synchronous
        self._hand_over = hand_over
        self._busy_timeout_ms = busy_timeout_ms
        self._commits = 0
        self._durable_commits = 0
        self._undurable: deque[Sequence[Event]] = deque()  # events of commits not durable yet
        self._serving = False
        self._failed: errors.StoreError | None = None
        self._wake = trio.Event()
        # While the helper process syncs (``serve``): the syncs asked of it, oldest first, and whether
        # a commit is waiting for the next one to be asked.
        self._helper: SyncProcess | None = None
        self._asked: deque[_Sync] = deque()
        self._wanted = False
        self._wanted_since = 0.0
        self._checkpoint_due = trio.Event()
        self._synced = trio.lowlevel.ParkingLot()
        self._cycles_started = 0
        self._cycles_done = 0
        self._wal_pages = 0
        self.sync_observer: Callable[[float], None] | None = None
        """Called with the seconds of each fsync of the WAL (the coordinator's metrics)."""
        # The WAL file and the way to run a blocking call, while ``serve`` runs.
        self._tools: tuple[WalFile | None, Blocking] | None = None

    async def reclaim_space(self, pages: int) -> int:
        """``PRAGMA incremental_vacuum(pages)`` in the sync thread (by the trio thread's own
        connection when the task is not serving); returns the free pages left."""
        await trio.lowlevel.checkpoint()
        if self._path == ":memory:":
            return 0
        wal, blocking = self._tools if self._tools is not None else (None, _inline)
        if wal is None:
            return _incremental_vacuum(self._db, pages)
        left: list[int] = []
        await blocking(lambda: left.append(wal.reclaim(pages)))
        return left[0]

    def committed(self, events: Sequence[Event], *, soon: bool = False) -> None:
        """Count a commit; hand its events over now if SQLite synced it, else at the next cycle.

        ``soon``: someone waits for this commit (``Transaction.sync_soon``): its sync is asked now
        if no other sync is out, rather than when the loop is next idle. A sync already out would
        make it queue anyway; it is then asked at idle with whatever commits follow."""
        self._commits += 1
        if self._failed is not None:  # after a failed sync no commit is declared durable again
            return
        if not self._serving:  # SQLite synced inside COMMIT (synchronous as configured)
            self._durable_commits = self._commits
            if events:
                self._hand_over(events)
            return
        if events:
            self._undurable.append(events)
        self._want_sync()
        if soon and not self._asked:
            self._ask_if_free()

    async def wait(self) -> None:
        """Until every commit counted so far is durable."""
        await trio.lowlevel.checkpoint()
        target = self._commits
        while self._durable_commits < target:
            if self._failed is not None:
                raise self._failed
            await self._synced.park()

    async def sync_now(self) -> None:
        """Until a cycle that began after this call is done (it covers every frame in the WAL now)."""
        await trio.lowlevel.checkpoint()
        if not self._serving:
            return
        wanted = self._cycles_started + 1
        self._want_sync()
        self._ask_if_free()
        while self._cycles_done < wanted and self._serving:
            await self._synced.park()

    def _want_sync(self) -> None:
        """A sync of every commit made so far is wanted: asked of the sync process when the loop is
        idle (``_AskWhenIdle``), or left to the thread's next cycle."""
        if self._helper is None:
            self._wake.set()
        elif not self._wanted:
            self._wanted = True
            self._wanted_since = time.perf_counter()

    def _ask_if_free(self) -> None:
        """Ask the sync process for the wanted sync now, unless two are out (then it is asked when
        the loop is next idle after an answer)."""
        if self._helper is not None and self._wanted and len(self._asked) < UNANSWERED_SYNCS:
            self._ask()

    def before_io_wait(self, timeout: float) -> None:
        """The trio loop is about to wait for I/O (``_AskWhenIdle``): ask the wanted sync if nothing
        is left to run (``timeout > 0``), or if it has been wanted ``ASK_WITHIN_SECONDS``."""
        if self._wanted and (timeout > 0 or time.perf_counter() - self._wanted_since >= ASK_WITHIN_SECONDS):
            self._ask_if_free()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Make commits durable until cancelled, then once more for the last commits.

        The fsync runs in the sync process (else in a worker thread), and a checkpoint every
        ``CHECKPOINT_PAGES`` in the worker thread, so the trio thread goes on running actors
        meanwhile; under a virtual clock (``MockClock``) both run inline instead, since a thread or a
        process would let the clock jump ahead while the disk works.
        """
        wal = None if self._path == ":memory:" else WalFile(self._path, self._busy_timeout_ms)
        virtual = clock.virtual()
        thread = None if virtual else SyncThread()
        blocking: Blocking = _inline if thread is None else thread.run
        helper = None
        self._tools = (wal, blocking)
        self._attach()
        try:
            if wal is not None and thread is not None and self._synchronous == "full":
                helper = self._helper = await _start_helper(self._path)
            task_status.started()
            if helper is not None:
                await self._serve_helper(helper, wal, blocking)
            while True:
                await self._wake.wait()
                await self._cycle(wal, blocking)
        finally:
            try:
                if self._failed is None:  # after a failed fsync, no later one is trusted
                    with trio.move_on_after(SYNC_GRACE_SECONDS, shield=True):
                        if helper is not None:
                            await self._answer_all(helper)
                        else:
                            await self._cycle(wal, blocking)
            finally:
                try:
                    self._tools = None
                    self._helper = None  # commits from now on are synced by ``_detach``
                    self._detach(wal)
                finally:
                    try:
                        if helper is not None:
                            with trio.move_on_after(SYNC_GRACE_SECONDS, shield=True):
                                await helper.close()
                    finally:
                        if thread is not None:
                            thread.stop(THREAD_JOIN_SECONDS)  # idle by now: every job was awaited

    def _attach(self) -> None:
        self._db.execute("PRAGMA synchronous=NORMAL")  # the WAL is synced by the cycles
        self._db.execute("PRAGMA wal_autocheckpoint=0")  # and checkpointed by them
        self._db.set_wal_hook(self._count_wal_pages)
        self._serving = True

    def _detach(self, wal: WalFile | None) -> None:
        self._serving = False
        try:
            self._db.set_wal_hook(None)
            self._db.execute("PRAGMA wal_autocheckpoint=1000")
            self._db.execute(f"PRAGMA synchronous={self._synchronous.upper()}")
            while self._asked:  # asked of the helper, never answered: synced below with the rest
                self._undurable.extendleft(reversed(self._asked.pop().batches))
            if self._durable_commits < self._commits and self._failed is None:  # the last cycle was cut short
                if wal is not None and self._synchronous == "full":
                    _sync(wal)
                self._durable_commits = self._commits
                while self._undurable:
                    self._hand_over(self._undurable.popleft())
        except errors.StoreError as exc:
            self._failed = exc  # nothing more is declared durable; waiters learn why
            raise
        finally:
            self._synced.unpark_all()
            if wal is not None:
                wal.close()

    def _count_wal_pages(self, db: apsw.Connection, name: str, pages: int) -> int:
        self._wal_pages = pages
        return apsw.SQLITE_OK

    async def _cycle(self, wal: WalFile | None, blocking: Blocking) -> None:
        """Sync what is committed now, then declare it durable and hand its events over in order."""
        self._wake = trio.Event()
        self._cycles_started += 1
        target = self._commits
        batches = list(self._undurable)
        self._undurable.clear()
        try:
            if wal is not None and self._synchronous == "full":
                began = time.perf_counter()
                await blocking(functools.partial(_sync, wal))
                if self.sync_observer is not None:
                    self.sync_observer(time.perf_counter() - began)
        except BaseException as exc:
            self._undurable.extendleft(reversed(batches))  # not durable: the next cycle has them
            if isinstance(exc, errors.StoreError):
                self._failed = exc
                self._synced.unpark_all()
            raise
        self._durable_commits = max(self._durable_commits, target)
        self._cycles_done += 1
        for events in batches:
            self._hand_over(events)
        self._synced.unpark_all()
        if wal is not None and self._wal_pages >= CHECKPOINT_PAGES:
            self._wal_pages = 0
            await self._checkpoint(wal, blocking)

    def _ask(self) -> None:
        """Ask the helper for a sync of every commit made so far (``serve`` runs it)."""
        assert self._helper is not None
        self._wanted = False
        self._cycles_started += 1
        self._asked.append(_Sync(self._commits, list(self._undurable), time.perf_counter()))
        self._undurable.clear()
        try:
            self._helper.request()
        except errors.StoreError as exc:
            # Called by a commit: the commit stands, but nothing is declared durable from now on,
            # and the serve task, reading the helper's end, fails the coordinator.
            self._failed = exc
            self._synced.unpark_all()

    async def _serve_helper(self, helper: SyncProcess, wal: WalFile | None, blocking: Blocking) -> None:
        """Take the helper's answers as they come; checkpoint the WAL beside, in the thread; ask
        syncs nobody waits for when the loop is idle."""
        idle = _AskWhenIdle(self)
        trio.lowlevel.add_instrument(idle)
        try:
            async with trio.open_nursery() as nursery:
                if wal is not None:
                    nursery.start_soon(self._checkpoints, wal, blocking)
                while True:
                    await self._take_answers(helper)
        finally:
            with contextlib.suppress(KeyError):  # trio drops an instrument that raised
                trio.lowlevel.remove_instrument(idle)

    async def _answer_all(self, helper: SyncProcess) -> None:
        """Until every commit made so far is answered synced (a shutdown's last syncs)."""
        if self._commits > (self._asked[-1].target if self._asked else self._durable_commits):
            self._ask()
        while self._asked:
            await self._take_answers(helper)

    async def _take_answers(self, helper: SyncProcess) -> None:
        """Declare the answered syncs' commits durable and hand their events over, in commit order."""
        try:
            answered = await helper.answers()
        except errors.StoreError as exc:
            self._failed = exc
            self._synced.unpark_all()
            raise
        now = time.perf_counter()
        for _ in range(answered):
            sync = self._asked.popleft()
            if self.sync_observer is not None:
                self.sync_observer(now - sync.asked_at)
            self._durable_commits = max(self._durable_commits, sync.target)
            self._cycles_done += 1
            for events in sync.batches:
                self._hand_over(events)
        self._synced.unpark_all()
        if self._wal_pages >= CHECKPOINT_PAGES:
            self._wal_pages = 0
            self._checkpoint_due.set()

    async def _checkpoints(self, wal: WalFile, blocking: Blocking) -> None:
        """Checkpoint the WAL when it grew past ``CHECKPOINT_PAGES``, beside the syncs."""
        while True:
            await self._checkpoint_due.wait()
            self._checkpoint_due = trio.Event()
            await self._checkpoint(wal, blocking)

    async def _checkpoint(self, wal: WalFile, blocking: Blocking) -> None:
        await blocking(wal.checkpoint)
        # The trio thread committed meanwhile, so the log is not all copied yet, and SQLite restarts
        # the WAL from its start only once it is: copy the few frames left here, where no commit can
        # interleave (a fraction of the stall of checkpointing all of them here).
        with contextlib.suppress(apsw.BusyError, apsw.LockedError):
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        # The log is all copied now, so the next write starts it again from its start, and SQLite
        # syncs its new header inside that COMMIT: made here, the sync is not the next turn's.
        await blocking(wal.restart)


class _AskWhenIdle(trio.abc.Instrument):
    """Tells the durability each time the trio loop is about to wait for I/O, with how long it may
    wait: more than zero means no task is left to run, the moment to ask a sync nobody waits for.

    An instrument rather than a task waiting for the loop to be idle: it costs one call a loop
    iteration and no wakeup, where a task costs a wakeup and an extra ``epoll`` each time.
    """

    def __init__(self, durability: GroupDurability) -> None:
        self._durability = durability

    def before_io_wait(self, timeout: float) -> None:
        self._durability.before_io_wait(timeout)


@attrs.frozen
class _Sync:
    """A sync asked of the helper: the commits it covers (``target``), their events in commit order."""

    target: int
    batches: list[Sequence[Event]]
    asked_at: float


async def _start_helper(path: str) -> SyncProcess | None:
    try:
        return await SyncProcess.start(path)
    except OSError as exc:
        log.warning("sync_process_unavailable", error=str(exc))  # the thread syncs instead
        return None


def _sync(wal: WalFile) -> None:
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


async def _inline(work: Callable[[], None]) -> None:
    work()  # no checkpoint after: the cycle hands the events over before anything else runs


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
            _sync_folder(os.path.dirname(os.path.abspath(self._path)))
        os.fdatasync(self._fd)

    def checkpoint(self) -> None:
        """Copy the WAL into the database without blocking writers (``PASSIVE``); busy is no error.

        **Raises:** ``StoreError`` when the disk refuses (what was committed stays in the WAL).
        """
        try:
            self._checkpoint_connection().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except (apsw.BusyError, apsw.LockedError):
            return  # another connection checkpoints, or holds the lock: the next cycle tries again
        except apsw.Error as exc:
            raise errors.StoreError(f"checkpointing the write-ahead log failed: {exc}") from exc

    def restart(self) -> None:
        """Write a row of the store's own (``store_meta``'s ``wal_restarts``) from the checkpointer's
        connection: once a checkpoint copied the whole log, this write starts it again and syncs its
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
            return _incremental_vacuum(self._checkpoint_connection(), pages)
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


def _incremental_vacuum(db: apsw.Connection, pages: int) -> int:
    """Free up to ``pages`` pages of ``db``'s free list; returns how many are left on it."""
    for _ in db.execute(f"PRAGMA incremental_vacuum({int(pages)})"):
        pass  # a row a page: the statement works only while it is stepped
    return int(str(db.execute("PRAGMA freelist_count").fetchall()[0][0]))


def _sync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
