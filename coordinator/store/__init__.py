"""The durable store: sessions, turns, history, claims, waits and the event log.

Backends implement ``Store``: a write transaction (``async with store.transaction() as tx``) whose
body is synchronous and whose events reach the commit callbacks only after the commit, and ``read``,
the same queries outside a transaction. ``sqlite.py`` is the embedded backend; a PostgreSQL backend
would implement the same shape with leases and LISTEN/NOTIFY.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Protocol

from coordinator.events import Event
from coordinator.store._queries import Queries
from coordinator.store.sqlite import Fence, SqliteStore, SqliteTx, open_sqlite_store


class Store(Protocol):
    """What the coordinator needs of a backend."""

    read: Queries

    def transaction(self, *, fence: Fence | None = None) -> AbstractAsyncContextManager[SqliteTx]: ...

    def on_commit(self, callback: Callable[[Sequence[Event]], None]) -> None: ...


@contextmanager
def open_store(url: str, *, synchronous: str = "full") -> Iterator[SqliteStore]:
    """Open the store named by ``url``: ``sqlite:///path``, a plain path, or ``:memory:``."""
    path = url.removeprefix("sqlite://") if url.startswith("sqlite://") else url
    if "://" in path:
        raise ValueError(f"unsupported store url {url!r}: only sqlite is built in")
    with open_sqlite_store(path, synchronous=synchronous) as store:
        yield store


__all__ = ["Queries", "SqliteStore", "SqliteTx", "Store", "open_store"]
