"""Group durability: with synchronous=full nothing is acknowledged before the WAL is synced.

These run on the real clock, so the syncs run as in production: in the helper process
(``_sync_process.py``), and, where a test says so, in the worker thread that replaces it when no
process can be started. One test runs on the MockClock, where they run inline.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from coordinator import errors, open_coordinator
from coordinator.config import Config, PluginConfig
from coordinator.events import Draft, Event
from coordinator.records import Rule
from coordinator.store import Transaction
from coordinator.store.sqlite import _durability, _sync_process
from tests.conftest import make_config, running

MARK = """
from pathlib import Path

async def mark(path: str) -> str:
    \"\"\"Leave a file behind: proof that the tool ran.\"\"\"
    Path(path).write_text("ran")
    return "marked"
"""

TURN = [
    "session.turn.started",
    "session.step.started",
    "session.tool.started",
    "session.tool.succeeded",
    "session.step.succeeded",
    "session.step.started",
    "session.step.succeeded",
    "session.execution.succeeded",
    "session.idle",
]


class SyncGate:
    """Counts the WAL syncs asked for and can hold them until opened.

    With the helper process (``syncer="process"``) holding is real: the helper is stopped with
    SIGSTOP. With the thread (``syncer="thread"``, the helper disabled as when it cannot start), the
    thread's sync waits on an event.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, syncer: str) -> None:
        self.syncer = syncer
        self.syncs = 0
        self._durability: _durability.GroupDurability | None = None
        self._open = threading.Event()
        self._open.set()
        self._held = threading.Event()
        if syncer == "process":
            request = _sync_process.SyncProcess.request

            def counted(helper: _sync_process.SyncProcess) -> None:
                self.syncs += 1
                request(helper)

            monkeypatch.setattr(_sync_process.SyncProcess, "request", counted)
            return

        async def no_helper(path: str) -> None:
            return None

        monkeypatch.setattr(_durability, "_start_helper", no_helper)
        original = _durability.WalFile.sync

        def sync(wal: _durability.WalFile) -> None:
            if not self._open.is_set():
                self._held.set()
                self._open.wait(timeout=30)
            self.syncs += 1
            original(wal)

        monkeypatch.setattr(_durability.WalFile, "sync", sync)

    def close(self, coord: Any) -> None:
        if self.syncer == "process":
            self._durability = coord.store._durability
            os.kill(self._helper_pid(), signal.SIGSTOP)
            return
        self._held.clear()
        self._open.clear()

    def open(self) -> None:
        if self.syncer == "process":
            os.kill(self._helper_pid(), signal.SIGCONT)
            return
        self._open.set()

    async def wait_held(self) -> None:
        """Until a sync is held at the gate, and every task has gone as far as it can without it."""
        if self.syncer == "process":
            assert self._durability is not None
            for _ in range(100):  # the prompt's commit asks for a sync that never comes
                await trio.testing.wait_all_tasks_blocked(cushion=0.01)
                if self._durability._asked:
                    break
            assert self._durability._asked
        else:
            await trio.to_thread.run_sync(self._held.wait, 30)
        await trio.testing.wait_all_tasks_blocked()

    def _helper_pid(self) -> int:
        assert self._durability is not None and self._durability._helper is not None
        return self._durability._helper.pid


SYNCERS = pytest.mark.parametrize("syncer", ["process", "thread"])


def marking_config(tmp_path: Path) -> tuple[Config, Path]:
    (tmp_path / "marktools.py").write_text(MARK)
    config = attrs.evolve(
        make_config(tmp_path, rules=(Rule(action="*", resource="*", effect="allow"),)),
        plugin=(PluginConfig(entry="marktools:mark"),),
    )
    return config, tmp_path / "marked"


def mark_then_text(marker: Path) -> list[dict[str, Any]]:
    call = {"id": "c1", "name": "mark", "input": {"path": str(marker)}}
    return [{"tool_calls": [call]}, {"text": "done"}]


@SYNCERS
async def test_nothing_is_acknowledged_before_the_wal_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, syncer: str
) -> None:
    """While a sync is held: the turn goes on inside the process, but the caller gets no answer, no
    subscriber (live or new) hears of it, and the tool does not start."""
    gate = SyncGate(monkeypatch, syncer)
    config, marker = marking_config(tmp_path)
    async with running(config, mark_then_text(marker), synchronous="full") as (coord, recorder):
        session = await coord.create_session()
        await recorder.wait_for("session.created")
        published = coord.published_seq
        gate.close(coord)
        answers: list[str] = []
        late: list[Event] = []

        async def prompt() -> None:
            answers.append(await coord.prompt(session.id, "go"))

        late_idle = trio.Event()

        async def subscribe_late() -> None:
            async for event in coord.subscribe(after=0):
                late.append(event)
                if event.type == "session.idle":
                    late_idle.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(prompt)
            await gate.wait_held()
            nursery.start_soon(subscribe_late)
            await trio.testing.wait_all_tasks_blocked()

            call = coord.store.read.get_tool_call(session.id, "c1")
            assert call is not None and call.status == "running"  # committed, as far as it can go
            assert coord.store.read.last_seq() > published
            assert coord.published_seq == published
            assert not marker.exists()
            assert answers == []
            assert recorder.types() == ["session.created"]
            assert [e.type for e in late] == ["session.created"]

            gate.open()
            await recorder.wait_for("session.idle")
            await late_idle.wait()
            nursery.cancel_scope.cancel()
        assert marker.read_text() == "ran"
        assert len(answers) == 1
        assert recorder.types() == ["session.created", *TURN]
        assert [e.seq for e in late] == [e.seq for e in recorder.events]


@SYNCERS
async def test_the_commits_of_concurrent_sessions_share_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, syncer: str
) -> None:
    gate = SyncGate(monkeypatch, syncer)
    config, marker = marking_config(tmp_path)
    commits = 0

    def count(events: Any) -> None:
        nonlocal commits
        commits += 1

    async with running(config, mark_then_text(marker), synchronous="full") as (coord, recorder):
        coord.store.on_commit(count)
        sessions = [await coord.create_session() for _ in range(20)]
        syncs_before, commits_before = gate.syncs, commits
        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(coord.prompt, session.id, "go")
        await recorder.wait_for("session.idle", 20)
        syncs, committed = gate.syncs - syncs_before, commits - commits_before
    assert [e.payload["outcome"] for e in recorder.of("session.idle")] == ["succeeded"] * 20
    assert committed >= 20 * len(TURN) // 2  # at least one commit for every two events
    assert syncs * 3 <= committed, f"{syncs} syncs for {committed} commits"


async def test_the_commits_a_turn_makes_before_the_loop_is_idle_share_one_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync is asked when the loop has nothing left to run, not at every commit: one tool turn's
    six commits share a few syncs, and still nothing is acknowledged before its sync (the prompt's
    answer, the tool's start: ``test_nothing_is_acknowledged_before_the_wal_is_synced``)."""
    gate = SyncGate(monkeypatch, "process")
    config, marker = marking_config(tmp_path)
    async with running(config, mark_then_text(marker), synchronous="full") as (coord, recorder):
        session = await coord.create_session()
        await recorder.wait_for("session.created")
        commits_before, syncs_before = coord.store._durability._commits, gate.syncs
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        commits = coord.store._durability._commits - commits_before
        syncs = gate.syncs - syncs_before
    assert recorder.types() == ["session.created", *TURN]
    assert marker.read_text() == "ran"
    # The prompt, the claim with the turn's start, the first step's start, its reply with the call's
    # start, the next step's start (carrying the call's and the first step's success), the turn's
    # settlement (carrying the answer).
    assert commits == 6
    # One sync a commit would be six. Here two to four are asked (two on average in the
    # benchmark's turns): how many idle moments fall between the commits depends on the timing.
    assert syncs <= 5, f"{syncs} syncs for {commits} commits"


async def test_a_commit_someone_waits_for_asks_its_sync_as_it_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Transaction.sync_soon`` (a stop's intent, a turn's settlement with ``session.idle``): its sync
    is asked by the commit itself, while the task goes on, where another commit's waits for the loop
    to be idle; and while a sync is out, it is asked at idle like the others (it would queue)."""
    gate = SyncGate(monkeypatch, "process")
    config, _ = marking_config(tmp_path)

    def commit(session_id: str, *, soon: bool) -> Any:
        def body(tx: Transaction) -> None:
            tx.insert_session(session_id, "", "2026-12-05T00:00:00Z")
            if soon:
                tx.sync_soon()

        return body

    async with running(config, synchronous="full") as (coord, _):
        await coord.store.durable()
        before = gate.syncs
        await coord.store.write(commit("ses_later", soon=False))
        asked_at_commit = gate.syncs - before  # no checkpoint since the commit: the loop never idled
        await coord.store.durable()
        before = gate.syncs
        gate.close(coord)  # the helper answers nothing until opened: the first sync stays out
        await coord.store.write(commit("ses_soon", soon=True))
        asked_soon = gate.syncs - before
        await coord.store.write(commit("ses_behind", soon=True))  # one is out: this one waits
        asked_behind = gate.syncs - before
        gate.open()
        await coord.store.durable()
    assert (asked_at_commit, asked_soon, asked_behind) == (0, 1, 1)


async def test_a_commit_nobody_waits_for_is_synced_within_a_millisecond_though_the_loop_never_idles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task that never blocks keeps the loop from being idle: the sync of a commit made meanwhile
    is asked ``ASK_WITHIN_SECONDS`` after it anyway, and its event reaches the subscriber."""
    gate = SyncGate(monkeypatch, "process")
    config, _ = marking_config(tmp_path)
    async with running(config, synchronous="full") as (coord, recorder):
        # The start's own commits first: a sync of theirs still to ask would be a second one below.
        await coord.store.durable()
        syncs_before = gate.syncs
        spins = 0

        def unwaited(tx: Transaction) -> None:  # a bare transaction: no caller waits for it
            tx.insert_session("ses_unwaited", "", "2026-12-05T00:00:00Z")
            tx.emit(Draft(type="test.unwaited", session_id="ses_unwaited", payload={}))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(coord.store.write, unwaited)
                while not recorder.of("test.unwaited"):
                    spins += 1
                    await trio.lowlevel.checkpoint()  # runnable again at once: the loop never idles
        assert gate.syncs == syncs_before + 1 and spins > 0


async def until_writable(coord: Any) -> str:
    """Create sessions until one is answered (the store recovered); its id."""
    with trio.fail_after(15):
        while True:
            try:
                return (await coord.create_session("after")).id
            except errors.StoreError:
                await trio.sleep(0.1)


async def test_a_failed_sync_acknowledges_nothing_refuses_writes_and_recovers_once_the_disk_takes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that refuses an fsync may have lost what it was given: the write waiting for it is not
    acknowledged, no write is taken while the log is not durable again, reads are answered; once the
    disk takes the log again, the store writes again, in the same process."""
    SyncGate(monkeypatch, "thread")  # the thread's sync is the one made to fail here
    config, _ = marking_config(tmp_path)
    original = _durability.WalFile.sync
    rewrites: list[tuple[int, bool]] = []
    rewrite = _durability.WalFile.rewrite

    def refuse(wal: _durability.WalFile) -> None:
        raise OSError(5, "Input/output error")

    def counted_rewrite(wal: _durability.WalFile, frames: int, database_too: bool) -> None:
        rewrites.append((frames, database_too))
        rewrite(wal, frames, database_too)

    monkeypatch.setattr(_durability.WalFile, "rewrite", counted_rewrite)
    async with open_coordinator(config, synchronous="full") as coord:
        before = (await coord.create_session("before")).id
        monkeypatch.setattr(_durability.WalFile, "sync", refuse)
        with pytest.raises(errors.StoreNotDurable, match="syncing the write-ahead log failed"):
            await coord.create_session("unknown")
        with pytest.raises(errors.StoreError, match="refuses writes until its log is durable again"):
            await coord.create_session("refused")
        assert "before" in {s.title for s in await coord.list_sessions()}  # reads are answered
        monkeypatch.setattr(_durability.WalFile, "sync", original)
        after = await until_writable(coord)
        titles = {s.id: s.title for s in await coord.list_sessions()}
    assert titles[before] == "before" and titles[after] == "after"
    # The write whose sync failed was made: the recovery made it durable with the rest.
    assert sorted(titles.values()) == ["after", "before", "unknown"]
    assert rewrites and rewrites[0][0] > 0 and not rewrites[0][1]


async def test_after_a_failed_checkpoint_the_database_file_is_written_again_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A WAL checkpoint copies pages into the database file and may count them copied before it syncs
    that file: when it fails, the store crashes as on a failed sync, and the recovery writes the
    database file again beside the log, since SQLite would never copy those pages again."""
    config, _ = marking_config(tmp_path)
    monkeypatch.setattr(_durability, "WAL_CHECKPOINT_PAGES", 1)  # a checkpoint after every sync
    rewrites: list[tuple[int, bool]] = []
    rewrite, checkpoint = _durability.WalFile.rewrite, _durability.WalFile.checkpoint

    def refuse(wal: _durability.WalFile) -> None:
        raise errors.StoreError("checkpointing the write-ahead log failed: disk I/O error")

    def counted_rewrite(wal: _durability.WalFile, frames: int, database_too: bool) -> None:
        rewrites.append((frames, database_too))
        rewrite(wal, frames, database_too)

    monkeypatch.setattr(_durability.WalFile, "rewrite", counted_rewrite)
    async with open_coordinator(config, synchronous="full") as coord:
        monkeypatch.setattr(_durability.WalFile, "checkpoint", refuse)
        await coord.create_session("synced, then its checkpoint fails")
        with trio.fail_after(10):
            while coord.store._durability._failure is None:  # noqa: ASYNC110 (the store task sets it)
                await trio.sleep(0.01)
        with pytest.raises(errors.StoreError, match="refuses writes"):
            await coord.create_session("refused")
        monkeypatch.setattr(_durability.WalFile, "checkpoint", checkpoint)
        await until_writable(coord)
        titles = sorted(s.title for s in await coord.list_sessions())
    assert titles == ["after", "synced, then its checkpoint fails"]
    assert rewrites[0][1] is True


async def test_a_log_that_reads_back_broken_after_a_failed_sync_stops_the_coordinator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem that dropped the pages it failed to write: the log SQLite would recover from has a
    hole, and writing after it would be lost with it at the next start. Nothing more is taken."""
    SyncGate(monkeypatch, "thread")
    config, _ = marking_config(tmp_path)

    def refuse_and_drop(wal: _durability.WalFile) -> None:
        with open(config.server.db + "-wal", "r+b") as log:  # the last frames read back as zeros
            size = log.seek(0, os.SEEK_END)
            log.seek(max(32, size - 4096))
            log.write(bytes(size - log.tell()))
        raise OSError(5, "Input/output error")

    with pytest.raises(BaseExceptionGroup) as raised:
        async with open_coordinator(config, synchronous="full") as coord:
            await coord.create_session("before")
            monkeypatch.setattr(_durability.WalFile, "sync", refuse_and_drop)
            with pytest.raises(errors.StoreNotDurable):
                await coord.create_session("unknown")
            await trio.sleep(30)
    assert raised.group_contains(errors.StoreError, match="reads back with .* valid frames")


@SYNCERS
async def test_the_wal_is_checkpointed_off_the_trio_thread_and_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, syncer: str
) -> None:
    SyncGate(monkeypatch, syncer)
    monkeypatch.setattr(_durability, "WAL_CHECKPOINT_PAGES", 40)
    checkpoints: list[str] = []
    original = _durability.WalFile.checkpoint

    def checkpoint(wal: _durability.WalFile) -> None:
        checkpoints.append(threading.current_thread().name)
        original(wal)

    monkeypatch.setattr(_durability.WalFile, "checkpoint", checkpoint)
    cycles = CheckpointCycles(monkeypatch)
    config, marker = marking_config(tmp_path)
    script = mark_then_text(marker)  # each session runs it from its start
    logs: set[bytes] = set()
    async with running(config, script, synchronous="full") as (coord, recorder):
        for turn in range(24):
            session = await coord.create_session()
            await coord.prompt(session.id, "go")
            await recorder.wait_for("session.idle", turn + 1)
            await cycles.settled(coord.store._durability)
            logs.add(_log_salts(tmp_path))
        wal_size = (tmp_path / "db.sqlite-wal").stat().st_size
    assert checkpoints and set(checkpoints) == {"store-sync"}
    # A turn writes more than 40 pages, so a checkpoint follows each; once one copied the whole log,
    # the next write starts it again from its start, under new salts. Without checkpoints (or their
    # restarts) there is one log, which holds every page of the 24 turns (about 6.8 MB). The header's
    # restart count would not do here: each connection writes its own count there.
    assert len(logs) == 24, len(logs)
    assert wal_size < 1_000_000, wal_size


class CheckpointCycles:
    """Counts the durability's checkpoint cycles, and lets a test wait for the one due to finish.

    On the real clock how many commits a checkpoint covers depends on the machine's load; a test
    that waits for each to finish sees the same log whatever the load.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started = self.finished = 0
        original = _durability.GroupDurability._wal_checkpoint

        async def counted(durability: _durability.GroupDurability, *args: Any) -> None:
            self.started += 1
            try:
                await original(durability, *args)
            finally:
                self.finished += 1

        monkeypatch.setattr(_durability.GroupDurability, "_wal_checkpoint", counted)

    async def settled(self, durability: Any) -> None:
        """Until no checkpoint is due, none runs, and the log is short of the next."""
        with trio.fail_after(10):
            while (  # noqa: ASYNC110 (the durability's own state: it has no event to wait on)
                self.started != self.finished
                or durability._wal_checkpoint_due.is_set()
                or durability._wal_pages >= _durability.WAL_CHECKPOINT_PAGES
            ):
                await trio.sleep(0.002)


def _log_salts(folder: Path) -> bytes:
    """The WAL header's salts of ``folder``'s database: new each time SQLite starts the log again."""
    return (folder / "db.sqlite-wal").read_bytes()[16:24]


async def test_once_a_checkpoint_copied_the_whole_log_its_restart_is_written_off_the_trio_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite starts the WAL again from its start at the first write after a checkpoint copied all of
    it, and syncs the new header inside that COMMIT. The checkpointer's own write restarts it in the
    worker thread right after the checkpoint, so the next commit of the trio thread (a stop's intent)
    finds the log begun already: the WAL header's salts have changed before it."""
    SyncGate(monkeypatch, "process")
    monkeypatch.setattr(_durability, "WAL_CHECKPOINT_PAGES", 40)
    restarts: list[tuple[str, bytes, bytes]] = []
    original = _durability.WalFile.restart

    def restart(wal: _durability.WalFile) -> None:
        before = _log_salts(tmp_path)
        original(wal)
        restarts.append((threading.current_thread().name, before, _log_salts(tmp_path)))

    monkeypatch.setattr(_durability.WalFile, "restart", restart)
    config, marker = marking_config(tmp_path)
    async with running(config, mark_then_text(marker), synchronous="full") as (coord, recorder):
        for turn in range(16):
            session = await coord.create_session()
            await coord.prompt(session.id, "go")
            await recorder.wait_for("session.idle", turn + 1)
    assert restarts and {thread for thread, _, _ in restarts} == {"store-sync"}
    assert any(after != before for _, before, after in restarts), restarts


async def test_under_a_virtual_clock_the_syncs_run_inline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: Any
) -> None:
    threads: list[str] = []
    original = _durability.WalFile.sync

    def sync(wal: _durability.WalFile) -> None:
        threads.append(threading.current_thread().name)
        original(wal)

    monkeypatch.setattr(_durability.WalFile, "sync", sync)
    config, marker = marking_config(tmp_path)
    async with running(config, mark_then_text(marker), synchronous="full") as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
    assert recorder.types() == ["session.created", *TURN]
    assert threads and set(threads) == {threading.main_thread().name}


async def test_a_dead_sync_process_acknowledges_nothing_and_a_new_one_takes_over(tmp_path: Path) -> None:
    """The helper killed (-9, as by the OOM killer): what it was asked is not known synced, so the
    write waiting for it is not acknowledged; the log is made durable again and a new helper syncs."""
    config, _ = marking_config(tmp_path)
    async with open_coordinator(config, synchronous="full") as coord:
        helper = coord.store._durability._helper
        assert helper is not None
        os.kill(helper.pid, signal.SIGKILL)
        with pytest.raises(errors.StoreNotDurable, match="the sync process"):
            await coord.create_session("unknown")
        await until_writable(coord)
        again = coord.store._durability._helper
        assert again is not None and again.pid != helper.pid
        assert sorted(s.title for s in await coord.list_sessions()) == ["after", "unknown"]


async def test_the_sync_process_answers_a_refused_fsync_with_the_error(tmp_path: Path) -> None:
    """fdatasync(2) of /dev/null fails with EINVAL: the helper reports the disk's own error and exits."""
    (tmp_path / "db.sqlite-wal").symlink_to("/dev/null")
    helper = await _sync_process.SyncProcess.start(str(tmp_path / "db.sqlite"))
    try:
        helper.request()
        with pytest.raises(
            errors.StoreError, match=r"syncing the write-ahead log failed: .*Invalid argument"
        ):
            await helper.answers()
    finally:
        with trio.move_on_after(5, shield=True):
            await helper.close()


async def test_the_sync_process_syncs_each_request_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """Requests read together are answered together, one byte each; closing reaps the helper."""
    (tmp_path / "db.sqlite-wal").write_bytes(b"frames")
    helper = await _sync_process.SyncProcess.start(str(tmp_path / "db.sqlite"))
    try:
        for _ in range(3):
            helper.request()
        answered = 0
        while answered < 3:
            answered += await helper.answers()
        assert answered == 3
    finally:
        with trio.move_on_after(5, shield=True):
            await helper.close()
    with pytest.raises(ProcessLookupError):
        os.kill(helper.pid, 0)  # reaped: the pid is gone, not a zombie
