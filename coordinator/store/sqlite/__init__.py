"""The embedded backend: SQLite through apsw, one file, group durability (``_store.py``)."""

from __future__ import annotations

from coordinator.store.sqlite._connection import APSW_ERRORS_MAPPED, map_apsw_errors
from coordinator.store.sqlite._store import SqliteStore, open_sqlite_read_view, open_sqlite_store

__all__ = [
    "APSW_ERRORS_MAPPED",
    "SqliteStore",
    "map_apsw_errors",
    "open_sqlite_read_view",
    "open_sqlite_store",
]
