"""Every scenario runs on both backends: SQLite, and a real PostgreSQL."""

from __future__ import annotations

import pytest

from tests.backends import backend, postgres_database

__all__ = ["backend", "postgres_database"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A scenario marked ``sqlite_only`` has no PostgreSQL run: its premise is one PostgreSQL does
    not allow (the marker says which); one marked ``postgres_only`` has no SQLite run, the other
    way round."""
    for item in list(items):
        if item.get_closest_marker("sqlite_only") and "[postgres" in item.nodeid:
            items.remove(item)
        elif item.get_closest_marker("postgres_only") and "[sqlite" in item.nodeid:
            items.remove(item)


@pytest.fixture(autouse=True)
def on_each_backend(backend: str) -> str:
    """The scenario's database is ``db_for(tmp_path)``: a SQLite file, or a PostgreSQL database."""
    return backend
