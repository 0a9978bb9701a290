"""The backend for several nodes: PostgreSQL through psycopg 3 and psycopg_pool (``_store.py``), and
the scratch databases and write audit of the chaos campaign's rounds over nodes (``_audit.py``)."""

from __future__ import annotations

from coordinator.store.postgres._audit import (
    AuditRow,
    InstanceEntry,
    create_scratch_database,
    database_url,
    drop_scratch_database,
    install_write_audit,
    open_snapshot,
    read_instances,
    read_write_audit,
)
from coordinator.store.postgres._store import PostgresStore, open_postgres_read_view, open_postgres_store

__all__ = [
    "AuditRow",
    "InstanceEntry",
    "PostgresStore",
    "create_scratch_database",
    "database_url",
    "drop_scratch_database",
    "install_write_audit",
    "open_postgres_read_view",
    "open_postgres_store",
    "open_snapshot",
    "read_instances",
    "read_write_audit",
]
