"""The store on PostgreSQL: psycopg's synchronous API in trio worker threads, a bounded pool per node.

psycopg 3's async API runs only on asyncio (its trio support was never merged), and a blocking call
on the trio thread would stop every session of the node for a network round trip. So each
transaction is a synchronous function (``store.api``) run whole in a worker thread, on a connection
of ``psycopg_pool.ConnectionPool``; ``[postgres] pool_size`` bounds both the connections and the
threads (a ``trio.CapacityLimiter``), so a burst of actors queues on the trio side instead of opening
connections without end.

Commits are synchronous (``synchronous_commit = on``): a commit becomes visible to other sessions
only once it is flushed, so whatever anyone reads is durable. Events reach this node's subscribers
from the store, in seq order, by one tail task (``_Tail``): the node's own commits and every other
node's alike, woken by a commit here or a NOTIFY from elsewhere (``_listener.py``), so every node
publishes the same sequence.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ParamSpec, TypeVar

import psycopg
import psycopg_pool
import trio

from coordinator import clock, errors
from coordinator.events import Event
from coordinator.logs import get_logger
from coordinator.store._reads import SqlReader
from coordinator.store._sql import Mispredicted
from coordinator.store._writes import SqlTransaction
from coordinator.store.api import CommitHook, Fence, Reader, Transaction
from coordinator.store.postgres._connection import RETRYABLE, PsycopgConnection, SecondStatement, mapped
from coordinator.store.postgres._listener import serve_listener
from coordinator.store.postgres._migrations import MIGRATIONS
from coordinator.store.postgres._tail import Tail

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

log = get_logger(__name__)

CHANNEL = "coordinator_events"
"""The NOTIFY channel: its payload is ``ORIGIN:SEQ``, the committing store and its commit's last seq."""

_NOTIFY = "SELECT pg_notify(?, ?::text || last::text) FROM event_counter WHERE id = 1"

RETRIES = 5
"""How often a transaction a deadlock (or a serialization failure) aborted is run again."""

CONNECT_SECONDS = 10.0
"""How long a transaction waits for a connection of the pool before ``StoreBusy``."""

# Set on every connection at its start (libpq ``options``: no round trip). A frozen node's open
# transaction holds its locks; the server ends it after ``idle_in_transaction_session_timeout`` (a
# body never waits on anything but the database), so nobody waits on it for ever; a wait for a lock
# gives up after ``lock_timeout`` (longer: it may wait for that end) as ``StoreBusy``.
SESSION_OPTIONS = (
    "-c idle_in_transaction_session_timeout=5s -c lock_timeout=15s -c statement_timeout=60s "
    "-c synchronous_commit=on"
)

# A server or network that died is noticed by the client within about half a minute.
CONNECTION_KWARGS: dict[str, Any] = {
    "autocommit": True,
    "application_name": "coordinator",
    "options": SESSION_OPTIONS,
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


class PostgresStore:
    """The store on one PostgreSQL database, shared by any number of nodes. Use ``open_postgres_store``."""

    def __init__(self, url: str, pool: psycopg_pool.ConnectionPool[Any], pool_size: int) -> None:
        self.url = url
        self._pool = pool
        self._limiter = trio.CapacityLimiter(pool_size)
        self._on_commit: list[Callable[[Sequence[Event]], None]] = []
        self._tail = Tail(self)
        self._commit_hook: CommitHook | None = None  # a fault injector's, or a crashed coordinator's
        self.commit_observer: Callable[[float], None] | None = None
        self.last_own_seq = 0
        self._on_change: list[Callable[[], None]] = []
        self._origin = os.urandom(6).hex()  # names this store's commits in their NOTIFY
        self.mispredicted = 0
        """Transactions run again because a prediction of their body was wrong (``_sql.py``)."""

    # the interface ---------------------------------------------------------------------------
    async def write(self, body: Callable[[Transaction], T], *, fence: Fence | None = None) -> T:
        await trio.lowlevel.checkpoint()
        began = time.perf_counter()
        events, result = await self._blocking(self._write_in_thread, body, fence)
        if self.commit_observer is not None:
            self.commit_observer(time.perf_counter() - began)
        if events:
            self.last_own_seq = max(self.last_own_seq, events[-1].stored_seq)
            for callback in self._on_commit:
                callback(events)
            self._tail.own_commit(events)
        return result

    async def read(self, query: Callable[[Reader], T]) -> T:
        await trio.lowlevel.checkpoint()
        return await self._blocking(self._read_in_thread, query)

    async def _blocking(self, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run ``function`` in a worker thread of the pool's size; inline under a ``MockClock``.

        **Cancellation:** not once the thread runs: the transaction ends, then ``Cancelled`` is raised.
        """
        call = functools.partial(function, *args, **kwargs)
        if clock.virtual():
            return call()
        return await trio.to_thread.run_sync(call, limiter=self._limiter)

    async def durable(self) -> None:
        """Every commit is flushed before it returns; this waits until this node's own events are
        handed over (published here), which a caller's answer must not precede."""
        await self._tail.wait_handed_over(self.last_own_seq)

    def set_commit_hook(self, hook: CommitHook | None) -> None:
        self._commit_hook = hook

    def on_commit(self, callback: Callable[[Sequence[Event]], None]) -> None:
        self._on_commit.append(callback)

    def on_durable(self, callback: Callable[[Sequence[Event]], None]) -> None:
        self._tail.on_durable.append(callback)

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the trio thread whenever another node may have committed."""
        self._on_change.append(callback)

    def observe(self, *, commit: Callable[[float], None], sync: Callable[[float], None]) -> None:
        self.commit_observer = commit  # a commit's flush is inside it: there is no sync of its own

    async def sync_now(self) -> None:
        await self._tail.wait_handed_over(await self.read(lambda r: r.last_seq()))

    async def reclaim_space(self, pages: int) -> int:
        await trio.lowlevel.checkpoint()
        return 0  # autovacuum gives space back

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen for other nodes' commits and hand every event over in seq order, until cancelled."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self._tail.serve)
            await nursery.start(serve_listener, self.url, CHANNEL, self._origin, self._changed)
            task_status.started()

    def _changed(self) -> None:
        self._tail.wake()
        for callback in self._on_change:
            callback()

    # in the worker thread --------------------------------------------------------------------
    def _write_in_thread(
        self, body: Callable[[Transaction], T], fence: Fence | None
    ) -> tuple[list[Event], T]:
        predicts, aborted = True, 0
        while aborted < RETRIES:
            try:
                return self._attempt(body, fence, predicts)
            except Mispredicted as exc:
                if not predicts:
                    raise  # a check without a prediction: the body's own
                # Rolled back: the body runs again, reading what it had predicted.
                self.mispredicted += 1
                log.debug("store_prediction_missed", error=str(exc))
                predicts = False
            except RETRYABLE as exc:
                aborted += 1
                log.info("store_transaction_retried", attempt=aborted, error=type(exc).__name__)
        raise errors.StoreBusy(f"a transaction was aborted {RETRIES} times by deadlocks")

    def _attempt(
        self, body: Callable[[Transaction], T], fence: Fence | None, predicts: bool
    ) -> tuple[list[Event], T]:
        with self._connection() as conn, _transaction(conn, "BEGIN", predicts=predicts) as sql:
            tx = SqlTransaction(sql)
            if fence is not None:
                # The session's lock first: a takeover (``acquire_claim``) takes it too, so it
                # waits for this transaction, and this one then finds the claim moved on.
                sql.fence(*fence)
            result = body(tx)
            if tx.emitted:
                # The commit's last seq, read by the server: the counter row is this
                # transaction's until it commits.
                sql.send(_NOTIFY, (CHANNEL, f"{self._origin}:"))
            if self._commit_hook is not None:
                self._commit_hook(tx)
        return tx.events, result  # the seqs came with the commit's answer

    def _read_in_thread(self, query: Callable[[Reader], T]) -> T:
        try:
            return self._read_once(query)
        except errors.StoreError as exc:
            if not _connection_lost(exc):
                raise
            # The connection died under the read (a server restart, ``pg_terminate_backend``): a read
            # changes nothing, so it runs again on another connection, once.
            log.info("store_read_retried", error=str(exc))
            return self._read_once(query)

    def _read_once(self, query: Callable[[Reader], T]) -> T:
        # Most reads run one statement, which needs no transaction of its own (one round trip, not
        # two: the statement, then its COMMIT). A read is first run so; the first time its code runs
        # a second statement, that is stopped and the read runs again in a snapshot, as it always
        # will from then on. A read changes nothing, so running it again is safe.
        code = _code_of(query)
        if code is not None and code not in _NEEDS_SNAPSHOT:
            with self._connection() as conn:
                try:
                    return query(SqlReader(PsycopgConnection(conn, statements=1)))
                except SecondStatement:
                    _NEEDS_SNAPSHOT.add(code)
        with self._connection() as conn, _transaction(conn, _BEGIN_READ) as sql:
            return query(SqlReader(sql))

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._pool.connection(timeout=CONNECT_SECONDS) as conn:
                try:
                    yield conn
                finally:
                    _LAST_USED[conn] = time.monotonic()
        except psycopg_pool.PoolTimeout as exc:
            raise errors.StoreBusy(f"no connection of the pool within {CONNECT_SECONDS} s: {exc}") from exc
        except RETRYABLE:
            raise
        except psycopg.Error as exc:
            raise mapped(exc) from exc

    def close(self) -> None:
        self._pool.close()


def _connection_lost(exc: errors.StoreError) -> bool:
    """Whether ``exc`` is a lost connection: libpq's own error (no SQLSTATE), a connection
    exception (class 08), or the server ending the session (57P01-57P05: shut down, restarted)."""
    cause = exc.__cause__
    if not isinstance(cause, psycopg.OperationalError):
        return False
    state = cause.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03", "57P05")


_BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

_NEEDS_SNAPSHOT: set[object] = set()
"""The code of every read that ran more than one statement: it runs in a transaction of its own."""


def _code_of(query: Callable[..., Any]) -> object | None:
    """What names a read's code: a function's code object, through ``functools.partial`` too; None
    for another callable (it always runs in a snapshot)."""
    while isinstance(query, functools.partial):
        query = query.func
    return getattr(query, "__code__", None)


@contextlib.contextmanager
def _transaction(
    conn: psycopg.Connection[Any], begin: str, *, predicts: bool = False
) -> Iterator[PsycopgConnection]:
    """A transaction in pipeline mode (``_connection.py``): its BEGIN goes with its first statement,
    and its COMMIT with every statement whose result was not read, in the round trip that leaves the
    pipeline. (psycopg's own ``transaction()`` waits for the server after its BEGIN and before its
    COMMIT: three round trips more.)"""
    try:
        with conn.pipeline() as pipeline:
            sql = PsycopgConnection(conn, pipeline, predicts=predicts)
            sql.send(begin)
            yield sql
            sql.send("COMMIT")
    except BaseException:
        if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            # The first error is the one to report; a rollback that fails too leaves a broken
            # connection, which the pool discards.
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
        raise


def _migrate(url: str) -> None:
    """Create or upgrade the schema, once however many nodes start together (an advisory lock)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtextextended('coordinator schema', 0))")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS store_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM store_version").fetchone()
            version = 0 if row is None else int(row[0])
            if version > len(MIGRATIONS):
                raise errors.SchemaTooNew(
                    f"database schema version {version} is newer than this coordinator's {len(MIGRATIONS)}"
                )
            for number in range(version, len(MIGRATIONS)):
                with conn.transaction():
                    MIGRATIONS[number](conn.execute)
                    conn.execute("DELETE FROM store_version")
                    conn.execute("INSERT INTO store_version(version) VALUES (%s)", (number + 1,))
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtextextended('coordinator schema', 0))")


@contextlib.contextmanager
def open_postgres_store(
    url: str, *, pool_size: int = 8, instance_id: str | None = None
) -> Iterator[PostgresStore]:
    """Open (creating or upgrading its schema) the PostgreSQL database at ``url``.

    Args:
        url: ``postgresql://user@host:port/dbname`` (PostgreSQL 15 or later).
        pool_size: connections (and worker threads) this node uses at most, besides its listener.
        instance_id: the instance that opens it, named in each connection's ``application_name``.

    **Raises:** ``StoreError`` when the server cannot be reached or refuses the schema.
    """
    try:
        _migrate(url)
        pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={**CONNECTION_KWARGS, "application_name": application_name(instance_id)},
            check=_check_if_idle,
            open=False,
            name="coordinator",
        )
        pool.open(wait=True, timeout=CONNECT_SECONDS)
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        raise errors.StoreError(f"cannot open the PostgreSQL store {_safe(url)}: {exc}") from exc
    store = PostgresStore(url, pool, pool_size)
    try:
        yield store
    finally:
        store.close()


CHECK_AFTER_IDLE_SECONDS = 2.0
"""A pooled connection is checked (a round trip to the server) before it is lent only when it has
been idle this long: one used a moment ago is alive, and a turn's transactions follow each other within
milliseconds, so checking each cost a turn 14 round trips. An idle one (say, across a restart of the
server) is still checked, and replaced when it is dead."""

_LAST_USED: weakref.WeakKeyDictionary[psycopg.Connection[Any], float] = weakref.WeakKeyDictionary()


def _check_if_idle(conn: psycopg.Connection[Any]) -> None:
    """The pool's check of a connection before it lends it (``psycopg_pool``'s ``check``): raises,
    and the pool replaces the connection, when it is dead.

    One used a moment ago is not asked; what the server sent it meanwhile is read, without waiting:
    a server that ended it (a restart, ``pg_terminate_backend``) said so on its socket and closed it,
    and libpq then knows it is dead. So such a connection costs no failed request, and one in use
    when the server ended it is the only kind that does (its transaction may or may not have
    committed: that request is answered 503, never retried).
    """
    last = _LAST_USED.get(conn)
    if last is None or time.monotonic() - last > CHECK_AFTER_IDLE_SECONDS:
        psycopg_pool.ConnectionPool.check_connection(conn)
        return
    readable = select.poll()
    readable.register(conn.pgconn.socket, select.POLLIN)
    for _ in range(_GOODBYE_READS):
        if not readable.poll(0):
            break
        conn.pgconn.consume_input()  # raises OperationalError once it reads the end of the stream
    if conn.pgconn.status == psycopg.pq.ConnStatus.BAD:
        raise psycopg.OperationalError("the server ended the connection")


_GOODBYE_READS = 3
"""Reads of what an idle connection received, at most: the server's last message, then the end."""


def application_name(instance_id: str | None) -> str:
    """``coordinator INSTANCE``: what ``pg_stat_activity`` shows for a node's connections."""
    return "coordinator" if instance_id is None else f"coordinator {instance_id}"


def _safe(url: str) -> str:
    """``url`` without a password, for messages and logs."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    info.pop("password", None)
    return " ".join(f"{key}={value}" for key, value in info.items())


@contextlib.contextmanager
def open_postgres_read_view(url: str, *, snapshot: bool = False) -> Iterator[Reader]:
    """A connection of its own to the database at ``url`` as a read view (the checkers' reads,
    outside every node); closed on exit. Each statement reads its own snapshot; with ``snapshot``,
    every read sees the same committed state (one REPEATABLE READ transaction)."""
    try:
        conn = psycopg.connect(url, **CONNECTION_KWARGS)
    except psycopg.Error as exc:
        raise errors.StoreError(f"cannot open the PostgreSQL store {_safe(url)}: {exc}") from exc
    try:
        with conn.transaction() if snapshot else contextlib.nullcontext():
            if snapshot:
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield SqlReader(PsycopgConnection(conn))
    finally:
        conn.close()
