"""What every part of the store's SQL reads shares: the connection, and the ``IN (...)`` lists."""

from __future__ import annotations

from typing import Any

from coordinator.store._sql import Connection, one

IN_CHUNK = 500
"""Values of one ``IN (...)`` list at most: well under any backend's limit of parameters."""


def in_list(column: str, values: list[str]) -> str:
    """`` AND column IN (?, ...)`` for ``values`` (never empty: a session and its descendants)."""
    return f" AND {column} IN ({', '.join('?' for _ in values)})"


class SqlReads:
    """A connection to read through; each part of ``SqlReader`` is one of these."""

    def __init__(self, sql: Connection) -> None:
        self.sql = sql

    def _one(self, query: str, args: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
        return one(self.sql, query, args)

    def _all(self, query: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self.sql.all(query, args)
