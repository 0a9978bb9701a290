"""Group durability: with synchronous=full nothing is acknowledged before the WAL is synced.

These run on the real clock, so the syncs run in the store's worker thread as in production; one
test runs on the MockClock, where they run inline.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from coordinator import errors, open_coordinator
from coordinator.config import Config, PluginConfig
from coordinator.events import Event
from coordinator.records import Rule
from coordinator.store.sqlite import _durability
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
    """Counts the WAL syncs and can hold them (in the sync thread) until opened."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.syncs = 0
        self._open = threading.Event()
        self._open.set()
        self._held = threading.Event()
        original = _durability.WalFile.sync

        def sync(wal: _durability.WalFile) -> None:
            if not self._open.is_set():
                self._held.set()
                self._open.wait(timeout=30)
            self.syncs += 1
            original(wal)

        monkeypatch.setattr(_durability.WalFile, "sync", sync)

    def close(self) -> None:
        self._held.clear()
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    async def wait_held(self) -> None:
        """Until a sync is held at the gate, and every task has gone as far as it can without it."""
        await trio.to_thread.run_sync(self._held.wait, 30)
        await trio.testing.wait_all_tasks_blocked()


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


async def test_nothing_is_acknowledged_before_the_wal_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a sync is held: the turn goes on inside the process, but the caller gets no answer, no
    subscriber (live or new) hears of it, and the tool does not start."""
    gate = SyncGate(monkeypatch)
    config, marker = marking_config(tmp_path)
    async with running(config, mark_then_text(marker), synchronous="full") as (coord, recorder):
        session = await coord.create_session()
        await recorder.wait_for("session.created")
        published = coord.published_seq
        gate.close()
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


async def test_the_commits_of_concurrent_sessions_share_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = SyncGate(monkeypatch)
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


async def test_a_failed_sync_stops_the_coordinator_and_acknowledges_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that refuses an fsync may have lost what it was given: nothing is declared durable."""
    config, _ = marking_config(tmp_path)
    created: list[str] = []

    def refuse(wal: _durability.WalFile) -> None:
        raise OSError(5, "Input/output error")

    with pytest.raises(BaseExceptionGroup) as raised:
        async with open_coordinator(config, synchronous="full") as coord:
            monkeypatch.setattr(_durability.WalFile, "sync", refuse)
            created.append((await coord.create_session()).id)
    assert raised.group_contains(errors.StoreError, match="syncing the write-ahead log failed")
    assert created == []


async def test_the_wal_is_checkpointed_off_the_trio_thread_and_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_durability, "CHECKPOINT_PAGES", 40)
    checkpoints: list[str] = []
    original = _durability.WalFile.checkpoint

    def checkpoint(wal: _durability.WalFile) -> None:
        checkpoints.append(threading.current_thread().name)
        original(wal)

    monkeypatch.setattr(_durability.WalFile, "checkpoint", checkpoint)
    config, marker = marking_config(tmp_path)
    script = mark_then_text(marker)  # each session runs it from its start
    async with running(config, script, synchronous="full") as (coord, recorder):
        for turn in range(12):
            session = await coord.create_session()
            await coord.prompt(session.id, "go")
            await recorder.wait_for("session.idle", turn + 1)
        wal_bytes = (tmp_path / "db.sqlite-wal").stat().st_size
    assert checkpoints and set(checkpoints) == {"store-sync"}
    # Without checkpoints the log would hold every page of the 12 turns (about 1,500 of 4 KiB).
    assert wal_bytes < 1_500_000, wal_bytes


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
