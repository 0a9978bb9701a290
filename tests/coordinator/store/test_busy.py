"""Another process's write lock: the store waits for it in short sleeps, up to the busy timeout."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import apsw
import pytest

from coordinator import errors
from coordinator.store.sqlite import _file
from coordinator.store.sqlite._file import BusyWait
from coordinator.store.sqlite._store import open_sqlite_store


def _hold_write_lock(path: Path) -> apsw.Connection:
    """A second connection (as another process's) holding SQLite's write lock."""
    other = apsw.Connection(str(path))
    other.execute("BEGIN IMMEDIATE")
    return other


async def test_a_write_waits_for_another_writers_lock_and_then_lands(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with open_sqlite_store(str(path), synchronous="normal") as store:
        other = _hold_write_lock(path)
        released: list[float] = []

        def release() -> None:
            other.execute("COMMIT")
            released.append(time.perf_counter())

        timer = threading.Timer(0.036, release)
        timer.start()
        await store.write(lambda tx: tx.insert_session("ses_waited", "waited", "2026-12-05T00:00:00Z"))
        landed = time.perf_counter()
        timer.join()
        other.close()
        assert store.read.get_session("ses_waited") is not None
    # Within a few sleeps of the release: SQLite's own backoff (sleeps of 1, 2, 5, 10, 15, 20 ms)
    # would try again only at 53 ms, 17 ms after it.
    assert released and landed - released[0] < 0.008, landed - released[0]


async def test_a_lock_held_past_the_busy_timeout_fails_the_write_with_store_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_file, "BUSY_TIMEOUT_MS", 100)
    path = tmp_path / "db.sqlite"
    with open_sqlite_store(str(path), synchronous="normal") as store:
        other = _hold_write_lock(path)
        try:
            with pytest.raises(errors.StoreBusy):
                await store.write(
                    lambda tx: tx.insert_session("ses_refused", "refused", "2026-12-05T00:00:00Z")
                )
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert store.read.get_session("ses_refused") is None


def test_the_sleeps_grow_from_microseconds_to_a_millisecond_and_stop_at_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []
    clock = [0.0]
    monkeypatch.setattr(_file.time, "sleep", slept.append)
    monkeypatch.setattr(_file.time, "perf_counter", lambda: clock[0])
    wait = BusyWait(timeout_ms=10)
    assert wait(0) and wait(1) and wait(2)
    assert slept == [20e-6, 40e-6, 80e-6]
    assert wait(9) and slept[-1] == 1e-3
    clock[0] = 0.011
    assert not wait(10)


def _open_at_once(path: Path, start: threading.Barrier, failures: list[BaseException]) -> None:
    start.wait()
    try:
        with open_sqlite_store(str(path), synchronous="normal") as store:
            assert store.read.get_session("ses_none") is None
    except BaseException as exc:  # reported by the test, with its round
        failures.append(exc)


def test_two_connections_opening_one_new_file_at_once_both_open_it_migrated(tmp_path: Path) -> None:
    """Both switch an empty file to WAL mode and read its schema version; the second waits for the
    first's switch and migration (SQLite answers a racing switch busy without calling the busy
    handler: one round in 20 to 50 failed so before ``_enter_wal``, hence 100 rounds).

    Connections of one process share nothing in WAL mode beyond what two processes share, so two
    threads race here as two coordinators would (apsw lets go of the GIL inside SQLite).
    """
    for round_number in range(100):
        path = tmp_path / f"new-{round_number}.sqlite"
        start = threading.Barrier(2)
        failures: list[BaseException] = []
        threads = [threading.Thread(target=_open_at_once, args=(path, start, failures)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert failures == [], (round_number, failures)
        version = apsw.Connection(str(path)).execute("PRAGMA user_version").fetchall()[0][0]
        assert version == len(_file.MIGRATIONS)
