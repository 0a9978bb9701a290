"""The durable store: sessions, turns, history, claims, waits and the event log.

The coordinator is typed against the interface of ``api.py`` (``Reader``, ``Transaction``, ``Store``)
and opens a backend with ``open_store(url)``: a path (or ``sqlite:///path``, ``:memory:``) is the
embedded SQLite backend; ``postgresql://user@host:port/dbname`` the PostgreSQL one, for several nodes.
Nothing outside this package imports a backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from coordinator.store._deletion import PruneBatch
from coordinator.store.api import CommitHook, Fence, Reader, Store, Transaction
from coordinator.store.sqlite import SqliteStore, open_sqlite_read_view, open_sqlite_store

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(url: str) -> bool:
    return url.startswith(POSTGRES_SCHEMES)


@contextmanager
def open_store(
    url: str, *, synchronous: str = "full", pool_size: int = 8, instance_id: str | None = None
) -> Iterator[Store]:
    """Open the store named by ``url``: ``postgresql://...``, or SQLite's ``sqlite:///path``, a plain
    path or ``:memory:``.

    Args:
        url: the database.
        synchronous: SQLite's durability, ``full`` or ``normal`` (PostgreSQL commits synchronously).
        pool_size: PostgreSQL connections this process uses at most.
        instance_id: the coordinator instance that opens it; PostgreSQL connections carry it in their
            ``application_name`` (``coordinator INSTANCE``), so that ``pg_stat_activity`` (and the
            chaos campaign's write audit) tells whose each connection is.

    **Raises:** ``StoreError`` when the database cannot be opened; ``ValueError`` for an unknown scheme.
    """
    if is_postgres(url):
        # Loaded only here: psycopg and its pool cost a process 23 MiB and 240 modules (measured),
        # which an embedded SQLite coordinator must not pay. Not a hidden circle: nothing it imports
        # imports this module back.
        from coordinator.store.postgres import open_postgres_store

        with open_postgres_store(url, pool_size=pool_size, instance_id=instance_id) as postgres:
            yield postgres
        return
    with open_sqlite_store(_sqlite_path(url), synchronous=synchronous) as store:
        yield store


@contextmanager
def open_read_view(url: str) -> Iterator[Reader]:
    """A read view of the store named by ``url`` on a connection of its own, outside any store the
    process has open: each read sees what is committed, and none awaits (a checker's reads)."""
    if is_postgres(url):
        from coordinator.store.postgres import open_postgres_read_view  # loaded only here (above)

        with open_postgres_read_view(url) as postgres:
            yield postgres
        return
    with open_sqlite_read_view(_sqlite_path(url)) as reader:
        yield reader


def _sqlite_path(url: str) -> str:
    path = url.removeprefix("sqlite://") if url.startswith("sqlite://") else url
    if "://" in path:
        raise ValueError(f"unsupported store url {url!r}: a path, sqlite:///path or postgresql://...")
    return path


__all__ = [
    "CommitHook",
    "Fence",
    "PruneBatch",
    "Reader",
    "SqliteStore",
    "Store",
    "Transaction",
    "is_postgres",
    "open_read_view",
    "open_store",
]
