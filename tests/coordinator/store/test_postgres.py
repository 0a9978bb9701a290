"""What only the PostgreSQL store must show: seqs visible in order under concurrent writers, every node
handing over the same sequence, fenced writes that cannot outlive a takeover, a listener that
reconnects without losing anything, and psycopg's errors as the store's own."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import trio
from psycopg import errors as pg_errors

from coordinator import errors
from coordinator.events import Draft, Emitted
from coordinator.store import Store, Transaction, open_read_view, open_store
from coordinator.store.postgres import open_postgres_read_view
from coordinator.store.postgres._connection import mapped
from tests.backends import PostgresDatabase, postgres_database

__all__ = ["postgres_database"]


@pytest.fixture
def url(postgres_database: PostgresDatabase) -> str:
    postgres_database.empty()
    return postgres_database.url


@contextlib.asynccontextmanager
async def node(url: str, pool_size: int = 4) -> AsyncIterator[Store]:
    """One node's store on the database, serving: its tail and its listener run."""
    with open_store(url, pool_size=pool_size) as store:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.serve)
            yield store
            nursery.cancel_scope.cancel(reason="the test is over")


def draft(n: int) -> Draft:
    return Draft(type="test.event", session_id=None, payload={"n": n})


async def _write_many(store: Store, writer: int, commits: int, rng: random.Random) -> None:
    for i in range(commits):
        events = rng.randint(1, 3)
        await store.write(lambda tx, n=writer * 10_000 + i, k=events: [tx.emit(draft(n)) for _ in range(k)])
        if rng.random() < 0.3:
            await trio.sleep(rng.random() / 500)


async def test_no_event_becomes_visible_after_one_with_a_higher_seq(url: str) -> None:
    """A subscriber reading ``seq > last`` must never miss an event: with eight writers committing at
    once, every read sees exactly the seqs right after the last one it saw, never a gap that a lower
    seq committed later would fill (a plain sequence gives hundreds of such inversions a second)."""
    rng = random.Random(15)
    reads = gaps = 0
    done = trio.Event()

    def check(last: int) -> tuple[int, int]:
        with open_read_view(url) as reader:
            seqs = [e.stored_seq for e in reader.events_after(last, limit=100_000)]
        expected = list(range(last + 1, last + 1 + len(seqs)))
        return (seqs[-1] if seqs else last), int(seqs != expected)

    async def read_on() -> None:
        nonlocal reads, gaps
        last = 0
        while not done.is_set() or last < 1:
            last, gap = await trio.to_thread.run_sync(check, last)
            reads, gaps = reads + 1, gaps + gap

    async with node(url, pool_size=8) as store:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_on)
            async with trio.open_nursery() as writers:
                for writer in range(8):
                    writers.start_soon(_write_many, store, writer, 40, random.Random(rng.random()))
            done.set()
        stored = await store.read(lambda r: [e.stored_seq for e in r.events_after(0, limit=100_000)])
    assert gaps == 0 and reads > 10
    assert stored == list(range(1, len(stored) + 1))


async def test_every_node_hands_over_the_same_sequence_in_seq_order(url: str) -> None:
    """Two nodes writing at once: each one's subscribers get every event of both, once, in seq
    order, so every node's event stream is the same sequence."""
    handed: dict[str, list[int]] = {"a": [], "b": []}
    async with node(url) as a, node(url) as b:
        a.on_durable(lambda events: handed["a"].extend(e.stored_seq for e in events))
        b.on_durable(lambda events: handed["b"].extend(e.stored_seq for e in events))
        async with trio.open_nursery() as writers:
            for writer, store in enumerate((a, b, a, b)):
                writers.start_soon(_write_many, store, writer, 25, random.Random(writer))
        last = await a.read(lambda r: r.last_seq())
        with trio.fail_after(10):
            await a.sync_now()
            await b.sync_now()
    assert handed["a"] == handed["b"] == list(range(1, last + 1))


async def test_a_takeover_waits_for_the_old_owners_fenced_writes_and_none_commits_after_it(url: str) -> None:
    """An old owner still writing while another node takes its claim over (it froze, its lease ran
    out, it woke): every one of its writes either committed before the takeover or is refused as
    ``Fenced``; none lands after it."""
    async with node(url, pool_size=8) as store:

        def claim(tx: Transaction) -> int:
            tx.insert_session("s1", "t", "now")
            return tx.acquire_claim("s1", "old", "now", takeover_from=None)

        epoch = await store.write(claim)
        fenced = 0
        taken = trio.Event()

        async def old_owner(worker: int) -> None:
            nonlocal fenced
            for i in range(200):
                try:
                    await store.write(
                        lambda tx, n=worker * 1000 + i: tx.emit(draft(n)), fence=("s1", "old", epoch)
                    )
                except errors.Fenced:
                    fenced += 1
                    if taken.is_set():
                        return

        def takeover(tx: Transaction) -> Emitted:
            assert tx.acquire_claim("s1", "new", "now", takeover_from="old") == epoch + 1
            return tx.emit(Draft(type="test.takeover", session_id="s1", payload={}))

        async with trio.open_nursery() as nursery:
            for worker in range(4):
                nursery.start_soon(old_owner, worker)
            await trio.sleep(0.05)
            taken_event = await store.write(takeover)
            taken.set()
        events = await store.read(lambda r: r.events_after(0, limit=100_000))
    old = [e.stored_seq for e in events if e.type == "test.event"]
    assert old and fenced >= 4
    assert max(old) < taken_event.event.stored_seq


def _listeners(url: str) -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'"
        ).fetchall()
    return [int(row[0]) for row in rows]


async def _until(predicate: Any, seconds: float = 10.0) -> None:
    with trio.fail_after(seconds):
        while not predicate():  # noqa: ASYNC110 (another thread, and another process, change it)
            await trio.sleep(0.02)


async def test_a_listener_whose_connection_dies_reconnects_and_loses_nothing(url: str) -> None:
    """A node's listening connection cut (a server restart, a network blip): it connects again, looks
    at the store at once (what was notified meanwhile is not lost), and hears the next commits."""
    async with node(url) as a, node(url) as b:
        woken: list[int] = []
        a.on_change(lambda: woken.append(1))
        handed: list[int] = []
        a.on_durable(lambda events: handed.extend(e.stored_seq for e in events))
        await _until(lambda: len(_listeners(url)) == 2)
        await b.write(lambda tx: tx.emit(draft(1)))
        await _until(lambda: handed == [1] and woken)
        with psycopg.connect(url, autocommit=True) as conn:
            for pid in _listeners(url):
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        await b.write(lambda tx: tx.emit(draft(2)))  # notified to no one: both listeners are gone
        await _until(lambda: len(_listeners(url)) == 2)
        await _until(lambda: handed == [1, 2])
        before = len(woken)
        await b.write(lambda tx: tx.emit(draft(3)))
        await _until(lambda: handed == [1, 2, 3] and len(woken) > before, seconds=0.9)


async def test_pooled_connections_ended_while_idle_are_replaced_without_a_failed_request(url: str) -> None:
    """A server restart or ``pg_terminate_backend`` ends the pool's idle connections: the server's
    goodbye is already on each socket, so the pool replaces them before lending one, however recently
    they were used, and no request fails for it."""
    with open_store(url, pool_size=2, instance_id="ins_ended") as store:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.serve)
            for n in range(4):  # its connection used a moment ago
                await store.write(lambda tx, n=n: tx.emit(draft(n)))
            with psycopg.connect(url, autocommit=True) as conn:
                ended = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'coordinator ins_ended' AND query NOT LIKE 'LISTEN%'"
                ).fetchall()
            assert ended
            await trio.sleep(0.1)  # the goodbyes reach the sockets
            for n in range(4, 8):
                await store.write(lambda tx, n=n: tx.emit(draft(n)))
            assert await store.read(lambda r: r.last_seq()) >= 8
            nursery.cancel_scope.cancel()


def _end_connections(url: str, application_name: str) -> int:
    """``pg_terminate_backend`` on every connection so named, and wait until each is gone."""
    with psycopg.connect(url, autocommit=True) as conn:
        pids = [
            row[0]
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND query NOT LIKE 'LISTEN%%'",
                (application_name,),
            )
        ]
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    return len(pids)


async def test_a_read_whose_connection_dies_under_it_runs_again_on_another(url: str) -> None:
    """A read changes nothing: when its connection dies while it runs, it runs again, once, and the
    caller sees its answer, not the lost connection."""
    with open_store(url, pool_size=2, instance_id="ins_reading") as store:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.serve)
            await store.write(lambda tx: tx.emit(draft(1)))
            runs: list[int] = []

            def read(reader: Any) -> int:
                runs.append(len(runs))
                if len(runs) == 1:  # its connection ends before its statement reaches the server
                    assert _end_connections(url, "coordinator ins_reading") >= 1
                return int(reader.last_seq())

            assert await store.read(read) == 1
            assert len(runs) == 2
            nursery.cancel_scope.cancel()


async def test_a_newer_schema_is_refused(url: str) -> None:
    """A database a newer coordinator wrote is not touched."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT version FROM store_version").fetchone()
        assert row is not None
        conn.execute("UPDATE store_version SET version = 99")
    try:
        with pytest.raises(errors.SchemaTooNew), open_store(url):
            pass
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE store_version SET version = %s", (row[0],))


def test_psycopg_errors_become_the_stores_own() -> None:
    """No psycopg exception escapes the store: a lock wait given up or a query cancelled is
    ``StoreBusy``, a full disk ``StoreFull``, anything else ``StoreError``, each naming psycopg's class."""
    assert isinstance(mapped(pg_errors.LockNotAvailable("lock")), errors.StoreBusy)
    assert isinstance(mapped(pg_errors.QueryCanceled("statement timeout")), errors.StoreBusy)
    assert isinstance(mapped(pg_errors.TooManyConnections("too many")), errors.StoreBusy)
    assert isinstance(mapped(pg_errors.DiskFull("no space")), errors.StoreFull)
    other = mapped(psycopg.OperationalError("server closed the connection"))
    assert type(other) is errors.StoreError
    assert str(other) == "OperationalError: server closed the connection"


def test_a_nodes_connections_name_its_instance(url: str) -> None:
    """An operator looking at ``pg_stat_activity`` (a lock held by a frozen node, say), and the chaos
    campaign's write audit, must tell whose each connection is: ``coordinator INSTANCE``."""
    with open_store(url, pool_size=1, instance_id="ins_named"), psycopg.connect(url) as conn:
        names = [row[0] for row in conn.execute("SELECT application_name FROM pg_stat_activity")]
    assert "coordinator ins_named" in names


async def test_a_snapshot_read_view_sees_one_moment_and_a_plain_one_each_commit(url: str) -> None:
    """A checker reading several rows while nodes write (the rounds over nodes) must see them as of
    one moment: a commit made after its first read stays out of a snapshot view, not out of a plain one."""
    async with node(url) as store:
        await store.write(lambda tx: tx.emit(draft(1)))
        with open_postgres_read_view(url, snapshot=True) as snapshot, open_postgres_read_view(url) as plain:
            assert snapshot.last_seq() == plain.last_seq() == 1
            await store.write(lambda tx: tx.emit(draft(2)))
            assert (snapshot.last_seq(), plain.last_seq()) == (1, 2)


async def test_a_wrong_prediction_runs_the_body_again_reading_and_keeps_nothing_of_the_first_run(
    url: str,
) -> None:
    """A body's predictions (a call id is new, a compare-and-set changes its row) are checked by the
    server before the commit: a wrong one rolls the whole transaction back, events included, and the
    body runs again reading each answer, whose result is the one returned."""
    runs: list[tuple[bool, bool]] = []

    def setup(tx: Transaction) -> None:
        tx.insert_session("s1", "t", "now")
        tx.insert_turn("t1", "s1", "go", "now")
        tx.insert_step("st1", "s1", "t1", "now")

    def body(tx: Transaction) -> tuple[bool, bool]:
        tx.emit(draft(len(runs)))
        first, second = tx.succeed_step("st1"), tx.succeed_step("st1")  # the second changes nothing
        runs.append((first, second))
        return first, second

    async with node(url) as store:
        await store.write(setup)
        missed_before = store.mispredicted  # type: ignore[attr-defined]
        assert await store.write(body) == (True, False)
        assert runs == [(True, True), (True, False)]  # predicted, then read
        assert store.mispredicted == missed_before + 1  # type: ignore[attr-defined]
        payloads = await store.read(lambda r: [e.payload for e in r.events_after(0)])
        assert payloads == [{"n": 1}]  # the first run's event was rolled back with it
