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
WAL checkpoint (which syncs the database file first), overwritten from the start; fsync flushes every
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
connection of its own: SQLite would otherwise run a WAL checkpoint, with its two fsyncs, inside whichever
commit crosses 1,000 pages, stalling the trio thread for tens of milliseconds.

When a sync fails (or the sync process dies, or a WAL checkpoint fails), the store is *crashed*:
waiters for durability get ``StoreNotDurable``, no write transaction begins, reads go on. Every second
the task tries to make the log durable again by writing all of its bytes again and syncing them
(``_log_rewrite.py`` says why a second sync alone proves nothing); once the disk takes that, every
commit made so far is durable, its events are handed over, and writes are taken again, with a new sync
process. The turns whose actors stopped on the refusals are retaken by the registry as after a crash.

The WAL file's blocking calls, and the worker thread they run in, are in ``_wal.py``.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import deque
from collections.abc import Callable, Sequence

import apsw
import trio

from coordinator import clock, errors, timeslice
from coordinator.events import Event
from coordinator.logs import get_logger
from coordinator.store.sqlite._errors import mapped
from coordinator.store.sqlite._log_rewrite import LogLost
from coordinator.store.sqlite._sync_asks import AskedSync, AskWhenIdle
from coordinator.store.sqlite._sync_process import SyncProcess
from coordinator.store.sqlite._wal import (
    Blocking,
    SyncThread,
    WalFile,
    incremental_vacuum,
    run_inline,
    sync_wal,
)

WAL_CHECKPOINT_PAGES = 1000
"""WAL pages after which a passive WAL checkpoint runs (SQLite's own default for its automatic ones)."""

SYNC_GRACE_SECONDS = 10.0
"""How long the last sync may take when the durability task is cancelled (a slow disk)."""

THREAD_JOIN_SECONDS = 1.0

RECOVER_SECONDS = 1.0
"""How often a crashed store tries to make its log durable again (a full disk may take a while)."""

UNANSWERED_SYNCS = 2
"""Syncs asked of the helper process and not answered yet, at most: one running and one that starts
as soon as it ends, covering every commit made until then."""

ASK_WITHIN_SECONDS = 0.001
"""How long a commit may wait for its sync to be asked when the trio loop never runs out of work
(else it is asked as soon as the loop has nothing to run)."""

log = get_logger(__name__)


class CheckpointFailed(errors.StoreError):
    """A WAL checkpoint failed: what it copied into the database file may not be on the disk."""


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
        # What failed, while the store is crashed: a sync failed, nothing more is declared durable
        # and no write begins until ``_recover`` made the log durable again.
        self._failure: str | None = None
        self._rewrite_database = False  # a WAL checkpoint failed: the recovery rewrites the database too
        self._wake = trio.Event()
        # While the helper process syncs (``serve``): the syncs asked of it, oldest first, and whether
        # a commit is waiting for the next one to be asked.
        self._helper: SyncProcess | None = None
        self._asked: deque[AskedSync] = deque()
        self._wanted = False
        self._wanted_since = 0.0
        self._wal_checkpoint_due = trio.Event()
        self._synced = trio.lowlevel.ParkingLot()
        self._cycles_started = 0
        self._cycles_done = 0
        self._wal_pages = 0  # frames in the WAL, reset when a WAL checkpoint is due
        self._wal_frames = 0  # frames in the WAL as SQLite last reported them (a lower bound)
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
        wal, blocking = self._tools if self._tools is not None else (None, run_inline)
        if wal is None:
            return incremental_vacuum(self._db, pages)
        left: list[int] = []
        await blocking(lambda: left.append(wal.reclaim(pages)))
        return left[0]

    def committed(self, events: Sequence[Event], *, soon: bool = False) -> None:
        """Count a commit; hand its events over now if SQLite synced it, else at the next cycle.

        ``soon``: someone waits for this commit (``Transaction.sync_soon``): its sync is asked now
        if no other sync is out, rather than when the loop is next idle. A sync already out would
        make it queue anyway; it is then asked at idle with whatever commits follow."""
        self._commits += 1
        if self._failure is not None:  # a commit that was open when a sync failed: recovery covers it
            if events:
                self._undurable.append(events)
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
            if self._failure is not None:
                raise errors.StoreNotDurable(f"{self._failure}; the write may be kept or lost")
            await self._synced.park()
        await timeslice.give_way()  # a sync wakes every session that committed meanwhile

    async def sync_now(self) -> None:
        """Until a cycle that began after this call is done (it covers every frame in the WAL now)."""
        await trio.lowlevel.checkpoint()
        if not self._serving:
            return
        wanted = self._cycles_started + 1
        self._want_sync()
        self._ask_if_free()
        while self._cycles_done < wanted and self._serving:
            if self._failure is not None:
                raise errors.StoreNotDurable(self._failure)
            await self._synced.park()

    def check_writable(self) -> None:
        """Called before a write transaction begins. **Raises:** ``StoreError`` while the store is
        crashed (a sync failed and the log is not durable again yet): nothing of the write is made."""
        if self._failure is not None:
            raise errors.StoreError(
                f"the database refuses writes until its log is durable again ({self._failure})"
            )

    def _want_sync(self) -> None:
        """A sync of every commit made so far is wanted: asked of the sync process when the loop is
        idle (``AskWhenIdle``), or left to the thread's next cycle. None while the store is crashed:
        the recovery covers every commit."""
        if self._failure is not None:
            return
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
        """The trio loop is about to wait for I/O (``AskWhenIdle``): ask the wanted sync if nothing
        is left to run (``timeout > 0``), or if it has been wanted ``ASK_WITHIN_SECONDS``."""
        if self._wanted and (timeout > 0 or time.perf_counter() - self._wanted_since >= ASK_WITHIN_SECONDS):
            self._ask_if_free()

    async def serve(  # noqa: ASYNC128 (_sync_until_failure calls started())
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Make commits durable until cancelled, then once more for the last commits.

        The fsync runs in the sync process (else in a worker thread), and a WAL checkpoint every
        ``WAL_CHECKPOINT_PAGES`` in the worker thread, so the trio thread goes on running actors
        meanwhile; under a virtual clock (``MockClock``) both run inline instead, since a thread or a
        process would let the clock jump ahead while the disk works.

        When a sync fails, the store is crashed until ``_recover`` made the log durable again; then
        it syncs as before, with a new sync process. **Raises:** ``LogLost`` when the log cannot be
        made durable again in this process (the coordinator stops; the next start recovers).
        """
        wal = None if self._path == ":memory:" else WalFile(self._path, self._busy_timeout_ms)
        thread = None if clock.virtual() else SyncThread()
        blocking: Blocking = run_inline if thread is None else thread.run
        with_helper = wal is not None and thread is not None and self._synchronous == "full"
        self._tools = (wal, blocking)
        self._attach()
        try:
            while True:
                await self._sync_until_failure(wal, blocking, with_helper, task_status)
                task_status = trio.TASK_STATUS_IGNORED
                await self._recover(wal, blocking)
        finally:
            try:
                self._tools = None
                self._detach(wal)  # commits from now on are synced by SQLite inside COMMIT
            finally:
                if thread is not None:
                    thread.stop(THREAD_JOIN_SECONDS)  # idle by now: every job was awaited

    async def _sync_until_failure(
        self, wal: WalFile | None, blocking: Blocking, with_helper: bool, task_status: trio.TaskStatus[None]
    ) -> None:
        """Sync commits until a sync fails (then return: the store is crashed) or until cancelled
        (then sync the last commits, within ``SYNC_GRACE_SECONDS``)."""
        helper = self._helper = await _start_helper(self._path) if with_helper else None
        if self._durable_commits < self._commits:
            self._want_sync()  # commits made while the helper started (after a recovery)
        task_status.started()
        try:
            if helper is not None:
                await self._serve_helper(helper, wal, blocking)
            while True:
                await self._wake.wait()
                await self._cycle(wal, blocking)
        except errors.StoreError as exc:
            self._fail(exc)
        finally:
            try:
                if self._failure is None:  # after a failed fsync, no later one is trusted
                    with trio.move_on_after(SYNC_GRACE_SECONDS, shield=True):
                        if helper is not None:
                            await self._answer_all(helper)
                        else:
                            await self._cycle(wal, blocking)
            finally:
                self._helper = None
                if helper is not None:
                    with trio.move_on_after(SYNC_GRACE_SECONDS, shield=True):
                        await helper.close()

    def _fail(self, exc: errors.StoreError) -> None:
        """A sync, or the WAL's own I/O, failed: the store is crashed. Nothing more is declared
        durable until ``_recover``; the syncs asked and unanswered go back to the commits to cover."""
        if self._failure is None:
            log.error("store_sync_failed", error=str(exc))
        self._failure = str(exc)
        # A WAL checkpoint copies pages into the database file and may count them copied before its
        # sync of that file: after it failed, the copies may be lost, and SQLite will not copy them
        # again, so the database file is written again too.
        self._rewrite_database = self._rewrite_database or isinstance(exc, CheckpointFailed)
        while self._asked:
            self._undurable.extendleft(reversed(self._asked.pop().batches))
        self._wanted = False
        self._synced.unpark_all()

    async def _recover(self, wal: WalFile | None, blocking: Blocking) -> None:
        """Make the log durable again (``WalFile.rewrite``), tried every ``RECOVER_SECONDS`` until the
        disk takes it; then every commit made so far is durable, its events are handed over, and
        writes are taken again.

        **Raises:** ``LogLost`` when the log does not read back whole.
        """
        tried: set[str] = set()
        while True:
            await trio.sleep(RECOVER_SECONDS)
            try:
                if wal is not None:
                    rewrite = functools.partial(wal.rewrite, self._wal_frames, self._rewrite_database)
                    await blocking(rewrite)
            except LogLost:
                raise
            except errors.StoreError as exc:
                if str(exc) not in tried:  # one line per kind of failure, not one a second
                    tried.add(str(exc))
                    log.warning("store_recovery_failed", error=str(exc))
                continue
            break
        while self._asked:  # none may be: ``_fail`` took them back, and nothing asks while crashed
            self._undurable.extendleft(reversed(self._asked.pop().batches))
        failure, self._failure = self._failure, None
        self._rewrite_database = False
        self._durable_commits = self._commits
        self._cycles_done = self._cycles_started
        while self._undurable:
            self._hand_over(self._undurable.popleft())
        self._synced.unpark_all()
        log.warning("store_recovered", failure=failure)

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
            # The last cycle was cut short: the rest is synced here, unless a sync failed.
            if self._durable_commits < self._commits and self._failure is None:
                if wal is not None and self._synchronous == "full":
                    sync_wal(wal)
                self._durable_commits = self._commits
                while self._undurable:
                    self._hand_over(self._undurable.popleft())
        except errors.StoreError as exc:
            self._failure = str(exc)  # nothing more is declared durable; waiters learn why
            raise
        finally:
            self._synced.unpark_all()
            if wal is not None:
                wal.close()

    def _count_wal_pages(self, db: apsw.Connection, name: str, pages: int) -> int:
        self._wal_pages = self._wal_frames = pages
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
                await blocking(functools.partial(sync_wal, wal))
                if self.sync_observer is not None:
                    self.sync_observer(time.perf_counter() - began)
        except BaseException:
            # Not durable: the next cycle, or the recovery, covers them.
            self._undurable.extendleft(reversed(batches))
            raise
        self._durable_commits = max(self._durable_commits, target)
        self._cycles_done += 1
        for events in batches:
            self._hand_over(events)
        self._synced.unpark_all()
        if wal is not None and self._wal_pages >= WAL_CHECKPOINT_PAGES:
            self._wal_pages = 0
            await self._wal_checkpoint(wal, blocking)

    def _ask(self) -> None:
        """Ask the helper for a sync of every commit made so far (``serve`` runs it)."""
        assert self._helper is not None
        self._wanted = False
        self._cycles_started += 1
        self._asked.append(AskedSync(self._commits, list(self._undurable), time.perf_counter()))
        self._undurable.clear()
        try:
            self._helper.request()
        except errors.StoreError as exc:
            # Called by a commit: the commit stands, but the store is crashed from now on; the serve
            # task, reading the helper's end, recovers it.
            self._fail(exc)

    async def _serve_helper(self, helper: SyncProcess, wal: WalFile | None, blocking: Blocking) -> None:
        """Take the helper's answers as they come; checkpoint the WAL beside, in the thread; ask
        syncs nobody waits for when the loop is idle."""
        idle = AskWhenIdle(self.before_io_wait)
        trio.lowlevel.add_instrument(idle)
        failures: list[errors.StoreError] = []
        try:
            async with trio.open_nursery() as nursery:

                def failed(exc: errors.StoreError) -> None:
                    failures.append(exc)
                    nursery.cancel_scope.cancel()

                if wal is not None:
                    nursery.start_soon(self._wal_checkpoints, wal, blocking, failed)
                try:
                    while True:
                        await self._take_answers(helper)
                except errors.StoreError as exc:
                    failed(exc)
        finally:
            with contextlib.suppress(KeyError):  # trio drops an instrument that raised
                trio.lowlevel.remove_instrument(idle)
        if failures:
            raise failures[0]

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
            self._fail(exc)
            raise
        if self._failure is not None:  # crashed meanwhile (a request found the helper gone)
            raise errors.StoreError(self._failure)
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
        if self._wal_pages >= WAL_CHECKPOINT_PAGES:
            self._wal_pages = 0
            self._wal_checkpoint_due.set()

    async def _wal_checkpoints(
        self, wal: WalFile, blocking: Blocking, failed: Callable[[errors.StoreError], None]
    ) -> None:
        """Checkpoint the WAL when it grew past ``WAL_CHECKPOINT_PAGES``, beside the syncs; a
        checkpoint that fails crashes the store as a failed sync does (it syncs the WAL first)."""
        while True:
            await self._wal_checkpoint_due.wait()
            self._wal_checkpoint_due = trio.Event()
            try:
                await self._wal_checkpoint(wal, blocking)
            except errors.StoreError as exc:
                failed(exc)
                return

    async def _wal_checkpoint(self, wal: WalFile, blocking: Blocking) -> None:
        """**Raises:** ``CheckpointFailed`` when the disk refuses."""
        try:
            await self._copy_log(wal, blocking)
        except CheckpointFailed:
            raise
        except errors.StoreError as exc:
            raise CheckpointFailed(str(exc)) from exc

    async def _copy_log(self, wal: WalFile, blocking: Blocking) -> None:
        await blocking(wal.checkpoint)
        # The trio thread committed meanwhile, so the log is not all copied yet, and SQLite restarts
        # the WAL from its start only once it is: copy the few frames left here, where no commit can
        # interleave (a fraction of the stall of a WAL checkpoint of all of them here).
        try:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except (apsw.BusyError, apsw.LockedError):
            pass
        except apsw.Error as exc:
            raise mapped(exc) from exc
        # The log is all copied now, so the next write starts it again from its start, and SQLite
        # syncs its new header inside that COMMIT: made here, the sync is not the next turn's.
        await blocking(wal.restart)
        self._wal_frames = 0  # a new log, whose frames the next commit reports


async def _start_helper(path: str) -> SyncProcess | None:
    try:
        return await SyncProcess.start(path)
    except OSError as exc:
        log.warning("sync_process_unavailable", error=str(exc))  # the thread syncs instead
        return None
