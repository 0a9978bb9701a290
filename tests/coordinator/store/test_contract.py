"""The store's promises, for every backend: seq, atomic commits with their events, fencing, errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import errors
from coordinator.events import Draft
from coordinator.store import SqliteStore, open_read_view, open_store
from coordinator.store.sqlite import APSW_ERRORS_MAPPED, map_apsw_errors


@pytest.fixture(params=["sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqliteStore]:
    with open_store(str(tmp_path / "store.sqlite"), synchronous="normal") as opened:
        yield opened


def draft(n: int) -> Draft:
    return Draft(type="test.event", session_id="s", payload={"n": n})


async def test_events_commit_with_their_state_and_reach_the_bus_only_after(store: SqliteStore) -> None:
    """A rolled-back transaction leaves neither its state nor its events, and publishes nothing."""
    published: list[int] = []
    store.on_commit(lambda events: published.extend(e.seq for e in events))
    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            tx.insert_session("s1", "t", "now")
            tx.emit(draft(1))
            raise RuntimeError("boom")
    assert store.read.get_session("s1") is None
    assert store.read.events_after(0) == [] and published == []
    async with store.transaction() as tx:
        tx.insert_session("s1", "t", "now")
        tx.emit(draft(2))
    assert store.read.get_session("s1") is not None
    # A rolled-back seq was never published, so the next commit may take it.
    assert published == [e.seq for e in store.read.events_after(0)] == [1]


async def test_seq_survives_a_reopen_and_is_never_reused(tmp_path: Path) -> None:
    """A restarted store continues after its highest seq, even one whose transaction rolled back."""
    path = str(tmp_path / "seq.sqlite")
    with open_store(path, synchronous="normal") as store:
        async with store.transaction() as tx:
            tx.emit(draft(1))
            tx.emit(draft(2))
    with open_store(path, synchronous="normal") as store:
        async with store.transaction() as tx:
            event = tx.emit(draft(3))
        assert event.seq == 3
        assert [e.seq for e in store.read.events_after(0)] == [1, 2, 3]


@settings(max_examples=30, deadline=None)
@given(batches=st.lists(st.lists(st.booleans(), max_size=5), max_size=12))
def test_seq_is_strictly_increasing_and_gap_free_per_commit(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[bool]]
) -> None:
    """Whatever commits and rollbacks happen, committed seqs strictly increase and a commit's are contiguous."""
    import trio

    async def scenario() -> None:
        with open_store(str(tmp_path_factory.mktemp("seq") / "s.sqlite"), synchronous="off") as store:
            committed: list[list[int]] = []
            store.on_commit(lambda events: committed.append([e.seq for e in events]))
            for batch in batches:
                with contextlib.suppress(ValueError):
                    async with store.transaction() as tx:
                        for rollback in batch:
                            tx.emit(draft(0))
                            if rollback:
                                raise ValueError
            flat = [seq for commit in committed for seq in commit]
            assert flat == sorted(set(flat))
            for commit in committed:
                assert commit == list(range(commit[0], commit[0] + len(commit)))
            assert [e.seq for e in store.read.events_after(0, limit=10_000)] == flat

    trio.run(scenario)


async def test_a_stale_claim_owner_is_fenced_out(store: SqliteStore) -> None:
    """After a takeover raises the epoch, the old owner's fenced writes fail and write nothing."""
    async with store.transaction() as tx:
        tx.insert_session("s1", "t", "now")
        first = tx.acquire_claim("s1", "owner-a", "now", takeover_from=None)
        assert tx.acquire_claim("s1", "owner-b", "now", takeover_from=None) == 0
        second = tx.acquire_claim("s1", "owner-b", "now", takeover_from="owner-a")
    assert second == first + 1
    with pytest.raises(errors.Fenced):
        async with store.transaction() as tx:
            tx.fence("s1", "owner-a", first)
            tx.set_last_outcome("s1", "failed")
    session = store.read.get_session("s1")
    assert session is not None and session.last_outcome is None
    async with store.transaction() as tx:
        tx.fence("s1", "owner-b", second)


async def test_a_parked_turn_is_released_once_and_never_parked_again_before_its_takeover(
    store: SqliteStore,
) -> None:
    """Parking and its release are compare-and-sets: a watch that read the turn before a resume was
    asked cannot park it again (the resume would be lost), and a second resume finds nothing."""
    async with store.transaction() as tx:
        tx.insert_session("s1", "t", "now")
        tx.insert_turn("t1", "s1", "go", "now")
        tx.set_turn_status("t1", "suspended")
        assert tx.park_turn("t1") and not tx.park_turn("t1")
    assert store.read.parked_turn_ids() == {"t1"} and store.read.is_parked("t1")
    async with store.transaction() as tx:
        assert tx.release_parked("t1") and not tx.release_parked("t1")
        assert not tx.park_turn("t1")  # the late watch
        assert tx.parked_turn("s1") is None
    assert store.read.parked_turn_ids() == set() and store.read.resume_asked_turn_ids() == {"t1"}
    async with store.transaction() as tx:
        assert tx.mark_resumed("t1", "shutdown")
    assert store.read.resume_asked_turn_ids() == set() and not store.read.is_parked("t1")


def test_every_apsw_error_is_translated_at_the_boundary() -> None:
    """No apsw exception escapes the store: each maps to a StoreError subclass."""
    for source, target in APSW_ERRORS_MAPPED.items():
        with pytest.raises(target) as caught, map_apsw_errors():
            raise source("simulated")
        assert isinstance(caught.value.__cause__, source)
    with pytest.raises(errors.StoreError), map_apsw_errors():
        raise apsw.ConstraintError("any other apsw error")


def _damaged_events(path: Path) -> None:
    """A database whose events table's root page is garbage, as a failing disk leaves it."""
    with open_store(str(path)) as store:
        for _ in range(50):
            store.read.sql.run("INSERT INTO events(type, at, payload) VALUES ('x', 'now', '{}')")
    connection = apsw.Connection(str(path))
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = connection.execute("SELECT rootpage FROM sqlite_master WHERE name = 'events'").fetchall()[0][0]
    page_size = connection.execute("PRAGMA page_size").fetchall()[0][0]
    connection.close()
    with path.open("r+b") as file:
        file.seek((root - 1) * page_size)
        file.write(b"\xa5" * page_size)


def test_a_damaged_page_is_refused_at_open_and_a_read_of_it_is_a_store_error(tmp_path: Path) -> None:
    """A corrupt page the start would not even read is found at open; a read that meets one later
    is a StoreError like every other store failure, never a bare apsw exception."""
    path = tmp_path / "damaged.sqlite"
    _damaged_events(path)
    with pytest.raises(errors.StoreError) as refused, open_store(str(path)):
        pass
    assert str(refused.value).startswith("CorruptError: ")
    with open_read_view(str(path)) as reader, pytest.raises(errors.StoreError) as read:
        reader.last_seq()
    assert isinstance(read.value.__cause__, apsw.CorruptError)


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    """A database written by a newer coordinator is not touched."""
    path = str(tmp_path / "new.sqlite")
    connection = apsw.Connection(path)
    connection.execute("PRAGMA user_version=99")
    connection.close()
    with pytest.raises(errors.SchemaTooNew), open_store(path):
        pass
