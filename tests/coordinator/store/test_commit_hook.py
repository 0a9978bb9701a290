"""The store's commit hook (a fault injector's, or a crashed coordinator's), on every backend: it sees
each write transaction right before its commit, and what it raises rolls that transaction back."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator import errors
from coordinator.store import Reader
from tests.backends import backend, db_for, postgres_database
from tests.coordinator.store.test_contract import draft, serving

__all__ = ["backend", "postgres_database"]


async def test_a_commit_hook_sees_each_write_and_what_it_raises_rolls_the_write_back(
    backend: str, tmp_path: Path
) -> None:
    """The chaos campaign's store failures and a crash's refused writes are this hook: a write it
    fails must leave nothing and raise its error, and the store must go on once it is removed."""
    async with serving(db_for(tmp_path)) as store:
        seen: list[bool] = []

        def full_disk(read: Reader) -> None:
            seen.append(read.get_session("s1") is not None)  # the transaction's own write, uncommitted
            raise errors.StoreFull("injected: the disk is full")

        store.set_commit_hook(full_disk)
        with pytest.raises(errors.StoreFull):
            await store.write(lambda tx: [tx.insert_session("s1", "t", "now"), tx.emit(draft(1))])
        store.set_commit_hook(None)
        await store.write(lambda tx: tx.emit(draft(2)))
        assert seen == [True]
        stored = await store.read(lambda r: (r.get_session("s1"), [e.payload for e in r.events_after(0)]))
        assert stored == (None, [{"n": 2}])
