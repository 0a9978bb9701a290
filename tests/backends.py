"""The two store backends under test: SQLite files, and databases on a real PostgreSQL server.

``COORDINATOR_TEST_PG`` names the server (a database on it the tests may connect to, ``.ci/run``
sets ``postgresql://postgres@127.0.0.1:5432/test``); when it is set, a server that does not answer
fails the PostgreSQL runs. Without it the same default is tried, and when no server answers there
the PostgreSQL runs are skipped with one line saying so.

Each test module gets a fresh database of its own (``coord_test_<worker>_<n>``, created from
nothing, dropped at the end); each test starts on it emptied (every row deleted, the event counter at
0), so a test never sees another's rows.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import trio

from coordinator.store import open_store

PG_ENV = "COORDINATOR_TEST_PG"
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
BACKENDS = ("sqlite", "postgres")

_numbers = itertools.count()
_answers: dict[str, str | None] = {}


def server_url() -> str:
    return os.environ.get(PG_ENV) or DEFAULT_PG


def unavailable() -> str | None:
    """Why PostgreSQL runs cannot happen here, or None; only ever once a session."""
    url = server_url()
    if url not in _answers:
        try:
            with psycopg.connect(url, connect_timeout=3):
                _answers[url] = None
        except psycopg.Error as exc:
            _answers[url] = f"no PostgreSQL answers at {url} ({type(exc).__name__})"
    return _answers[url]


def require_postgres() -> None:
    """Skip (on a laptop) or fail (with ``COORDINATOR_TEST_PG`` set, as in CI) without a server."""
    why = unavailable()
    if why is None:
        return
    if os.environ.get(PG_ENV):
        pytest.fail(f"{PG_ENV} is set but {why}", pytrace=False)
    pytest.skip(f"PostgreSQL runs skipped: {why} (set {PG_ENV} to require them)")


def _with_database(url: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)


def _url_form(conninfo: str) -> str:
    """A ``postgresql://`` URL of a conninfo (the coordinator takes ``[server] db`` as a URL)."""
    info = psycopg.conninfo.conninfo_to_dict(conninfo)
    user = info.get("user", "postgres")
    host = info.get("host", "127.0.0.1")
    port = info.get("port", "5432")
    return f"postgresql://{user}@{host}:{port}/{info['dbname']}"


class PostgresDatabase:
    """A database made for one test module, emptied before each of its tests."""

    def __init__(self, worker: str) -> None:
        self.name = f"coord_test_{worker}_{os.getpid()}_{next(_numbers)}"
        self._admin = server_url()
        with psycopg.connect(self._admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}"')
            conn.execute(f'CREATE DATABASE "{self.name}"')
        self.url = _url_form(_with_database(self._admin, self.name))
        with open_store(self.url, pool_size=1):
            pass  # the schema, once

    def empty(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            tables = [
                row[0]
                for row in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                    "AND tablename NOT IN ('store_version', 'event_counter')"
                )
            ]
            with conn.transaction():  # DELETE: for tables this small, 40 times faster than TRUNCATE
                for table in sorted(tables, key=lambda name: name == "sessions"):  # turns name sessions
                    conn.execute(f"DELETE FROM {table}")
                conn.execute("UPDATE event_counter SET last = 0")

    def drop(self) -> None:
        with psycopg.connect(self._admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def worker_id(request: pytest.FixtureRequest) -> str:
    """The xdist worker running this test (``gw0``...), or ``main``."""
    return str(getattr(request.config, "workerinput", {}).get("workerid", "main"))


@pytest.fixture(scope="module")
def postgres_database(request: pytest.FixtureRequest) -> Iterator[PostgresDatabase]:
    require_postgres()
    database = PostgresDatabase(worker_id(request))
    try:
        yield database
    finally:
        database.drop()


def sqlite_url(tmp_path: Path) -> str:
    return str(tmp_path / "db.sqlite")


_chosen: dict[Path, str] = {}


def db_for(tmp_path: Path) -> str:
    """The database of the test whose ``tmp_path`` this is: the backend fixture's choice (a
    PostgreSQL database of the module), else a SQLite file in the folder."""
    return _chosen.get(tmp_path, sqlite_url(tmp_path))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Runs the test once on each backend; ``db_for(tmp_path)`` names its database."""
    if request.param == "postgres":
        database: PostgresDatabase = request.getfixturevalue("postgres_database")
        database.empty()
        _chosen[tmp_path] = database.url
    try:
        yield str(request.param)
    finally:
        _chosen.pop(tmp_path, None)


__all__ = ["BACKENDS", "PostgresDatabase", "backend", "db_for", "postgres_database", "require_postgres"]


async def until_a_transaction_waits_for_a_lock(url: str) -> None:
    """Until a transaction on the database of ``url`` waits for an advisory lock (a session's lock,
    ``Transaction.hold_session``), as the server itself reports it."""
    with psycopg.connect(url, autocommit=True) as watcher:
        while not watcher.execute(  # noqa: ASYNC110 (a wait inside the server)
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
        ).fetchall():
            await trio.sleep(0.01)
