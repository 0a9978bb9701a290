"""The backend for several nodes: PostgreSQL through psycopg 3 and psycopg_pool (``_store.py``)."""

from __future__ import annotations

from coordinator.store.postgres._store import PostgresStore, open_postgres_read_view, open_postgres_store

__all__ = ["PostgresStore", "open_postgres_read_view", "open_postgres_store"]
