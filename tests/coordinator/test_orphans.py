"""Process groups a dead coordinator left: killed by the next start, outside any transaction, then
forgotten; never a group of another boot or of an owner that lives; and at a graceful close, what the
instance's own cleanups left. On both backends, with real processes."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import attrs
import pytest
import trio

import coordinator._open
from coordinator import claims, errors, open_coordinator, orphans
from coordinator.ids import new_id
from coordinator.models.scripted import ScriptedModel
from coordinator.store import Store, open_read_view, open_store
from coordinator.store.rows import InstanceRow, ProcessGroupRow
from coordinator.tools.process_group import GroupOwner, ProcessGroup
from tests.backends import backend, db_for, postgres_database
from tests.conftest import make_config

__all__ = ["backend", "postgres_database"]

T = TypeVar("T")
LEASE = 30.0


@pytest.fixture(autouse=True)
def on_each_backend(backend: str) -> str:
    return backend


@contextlib.asynccontextmanager
async def orphan() -> AsyncIterator[trio.Process]:
    """A ``sleep 60`` leading a process group of its own, as a tool's command does; killed at the end."""
    process = await trio.lowlevel.open_process(["sleep", "60"], start_new_session=True)
    try:
        yield process
    finally:
        process.kill()
        with trio.move_on_after(5, shield=True):
            await process.wait()


def an_instance(*, host: str | None = None, pid: int | None = None, stopped: bool = True) -> InstanceRow:
    """A coordinator instance on this host and boot, stopped (dead) unless told otherwise."""
    me = claims.this_instance()
    return attrs.evolve(
        me, id=new_id("ins"), host=host or me.host, pid=pid or me.pid, stopped=stopped, heartbeat=0.0
    )


def group_of(process: trio.Process, owner: InstanceRow, **changes: Any) -> ProcessGroupRow:
    """The record of ``process``'s group owned by ``owner``, with ``changes`` (another boot id...)."""
    recorded = attrs.evolve(ProcessGroup.of(process.pid), **changes)
    return GroupOwner(instance_id=owner.id, label="test").row(recorded)


async def record(store: Store, owner: InstanceRow, *groups: ProcessGroupRow) -> None:
    def write(tx: Any) -> None:
        tx.register_instance(owner, "now")
        for group in groups:
            tx.record_process_group(group, "now")

    await store.write(write)


async def sweep(store: Store) -> int:
    """One look of a start or the watch by a live instance of this host."""
    liveness = claims.Liveness(me=claims.this_instance(), lease=LEASE)
    found, now = await store.read(lambda r: (r.process_groups_with_owners(liveness.me.id), r.clock()))
    return await orphans.kill_left(store, liveness, found, now)


def alive(process: trio.Process) -> bool:
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    return process.returncode is None


@attrs.define
class Bodies:
    """Marks, per thread, that a transaction's body runs: SQLite runs bodies on the trio thread,
    PostgreSQL in a worker thread, so a kill on another thread is never inside this body."""

    running: threading.local = attrs.Factory(threading.local)

    def watched(self, body: Callable[[Any], T]) -> Callable[[Any], T]:
        def run(view: Any) -> T:
            self.running.inside = True
            try:
                return body(view)
            finally:
                self.running.inside = False

        return run

    @property
    def inside(self) -> bool:
        return bool(getattr(self.running, "inside", False))


class WatchedStore:
    """A store whose every read and write body is marked while it runs."""

    def __init__(self, store: Store, bodies: Bodies) -> None:
        self._store = store
        self._bodies = bodies

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def write(self, body: Callable[[Any], T], **kwargs: Any) -> T:
        return await self._store.write(self._bodies.watched(body), **kwargs)

    async def read(self, query: Callable[[Any], T]) -> T:
        return await self._store.read(self._bodies.watched(query))


@contextlib.contextmanager
def kills_seen(monkeypatch: pytest.MonkeyPatch, bodies: Bodies) -> Iterator[list[tuple[int, int, bool]]]:
    """Every ``killpg`` from here on: the group, the signal, and whether a body was running."""
    seen: list[tuple[int, int, bool]] = []
    real = os.killpg

    def killpg(pgid: int, signum: int) -> None:
        seen.append((pgid, signum, bodies.inside))
        real(pgid, signum)

    monkeypatch.setattr(os, "killpg", killpg)
    yield seen


async def test_a_start_kills_a_dead_instances_group_outside_every_transaction_then_deletes_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body may be run again (PostgreSQL retries) and must act on nothing outside its ``tx``: the
    recovery reads, kills after that read's body, and deletes the record in a write of its own."""
    bodies = Bodies()
    real_open_store = coordinator._open.open_store

    @contextlib.contextmanager
    def watched_store(url: str, **kwargs: Any) -> Iterator[Any]:
        with real_open_store(url, **kwargs) as store:
            yield WatchedStore(store, bodies)

    monkeypatch.setattr(coordinator._open, "open_store", watched_store)
    config = make_config(tmp_path)
    dead = an_instance()
    async with orphan() as process:
        with open_store(db_for(tmp_path), synchronous="normal", pool_size=1) as store:
            await record(store, dead, group_of(process, dead))
        with kills_seen(monkeypatch, bodies) as kills:
            async with open_coordinator(
                config, model=ScriptedModel.from_json([{"text": "done"}]), synchronous="normal"
            ):
                with trio.fail_after(5):
                    assert await process.wait() == -signal.SIGKILL
        assert [kill for kill in kills if kill[0] == process.pid] == [(process.pid, signal.SIGKILL, False)]
    with open_read_view(db_for(tmp_path)) as reader:
        assert reader.process_groups_of(dead.id) == []


async def test_a_group_recorded_in_another_boot_is_never_killed(tmp_path: Path) -> None:
    """Its id may name any process now: one of this host's earlier boots is gone, its record deleted;
    one of another host is left, record and all, for a coordinator started there."""
    here = an_instance()
    there = an_instance(host="another-host")
    async with orphan() as process:
        with open_store(db_for(tmp_path), synchronous="normal", pool_size=1) as store:
            await record(store, here, group_of(process, here, boot_id="an-earlier-boot"))
            await record(store, there, group_of(process, there, boot_id="another-boot"))
            assert await sweep(store) == 1
            assert alive(process)
            left = await store.read(lambda r: r.process_groups_with_owners("me"))
            assert [owner and owner.id for _, owner in left] == [there.id]


async def test_a_group_whose_owner_lives_is_left_alone(tmp_path: Path) -> None:
    """Another coordinator on this host whose heartbeat is fresh runs its group: neither killed nor
    forgotten, however often the watch looks."""
    living = an_instance(pid=os.getppid(), stopped=False)  # a live process, not this one
    async with orphan() as process:
        with open_store(db_for(tmp_path), synchronous="normal", pool_size=1) as store:
            await record(store, living, group_of(process, living))
            assert await sweep(store) == 0
            assert alive(process)
            assert len(await store.read(lambda r: r.process_groups_of(living.id))) == 1


class RefusingWrites(WatchedStore):
    """A store whose writes fail, as a full disk's do."""

    async def write(self, body: Callable[[Any], T], **kwargs: Any) -> T:
        raise errors.StoreError("refused")


async def test_a_record_whose_deletion_fails_is_deleted_by_the_next_look(tmp_path: Path) -> None:
    """The kill comes first: a record kept names a dead group, which the next look kills no one for
    (its id is not signalled as another group's) and deletes."""
    dead = an_instance()
    async with orphan() as process:
        with open_store(db_for(tmp_path), synchronous="normal", pool_size=1) as store:
            await record(store, dead, group_of(process, dead))
            with pytest.raises(errors.StoreError):
                await sweep(RefusingWrites(store, Bodies()))  # type: ignore[arg-type]
            with trio.fail_after(5):
                assert await process.wait() == -signal.SIGKILL
            assert len(await store.read(lambda r: r.process_groups_of(dead.id))) == 1
            assert await sweep(store) == 1
            assert await store.read(lambda r: r.process_groups_of(dead.id)) == []


async def test_a_graceful_close_kills_the_groups_its_own_cleanups_left(tmp_path: Path) -> None:
    """A cleanup that ran out of time leaves its group recorded under its instance: the close kills
    it once the actors ended, and deletes the record."""
    config = make_config(tmp_path)
    async with orphan() as process:
        async with open_coordinator(
            config, model=ScriptedModel.from_json([{"text": "done"}]), synchronous="normal"
        ) as coord:
            me = await coord.store.read(lambda r: r.get_instance(coord.instance_id))
            assert me is not None
            left = group_of(process, me)
            await coord.store.write(lambda tx: tx.record_process_group(left, "now"))
        with trio.fail_after(5):
            assert await process.wait() == -signal.SIGKILL
    with open_read_view(db_for(tmp_path)) as reader:
        assert reader.process_groups_of(coord.instance_id) == []
