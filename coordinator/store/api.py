"""The store's interface: a read view, a write transaction and the store itself, as Protocols.

The coordinator and the actors are typed against these and nothing else, in the way httpx's client is
written against its transports: ``sqlite`` and ``postgres`` are backends behind them, chosen by
``open_store(url)``. A transaction is a synchronous function of a ``Transaction`` that the store runs
(``await store.write(body)``): on SQLite on the trio thread, on PostgreSQL in a worker thread, and in
both cases whole or not at all. Its body must touch nothing but its ``tx`` and the values it was
given, and may be run again (a PostgreSQL deadlock is retried): it decides, the caller acts on what it
returns once it is committed.

``Reader`` lives in ``_read_api.py`` and ``Transaction`` in ``_write_api.py``; import all three from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import trio

from coordinator.events import Event
from coordinator.store._read_api import Reader
from coordinator.store._write_api import Transaction

__all__ = ["CommitHook", "Fence", "Reader", "Store", "Transaction"]

T = TypeVar("T")

Fence = tuple[str, str, int]
"""A claim a transaction must find held, checked in the same transaction: session id, owner, epoch."""

CommitHook = Callable[[Reader], None]
"""Called inside a write transaction right before its commit, with the transaction's view; it may
raise ``StoreError`` (the transaction is then rolled back, and ``write`` raises it). A fault
injector's (``coordinator.checkpoints.Injector.before_commit``), or a crashed coordinator's, which
refuses every write."""


class Store(Protocol):
    """A backend: transactions, reads, durability, and who hears of a commit."""

    last_own_seq: int
    """The seq of the last event this store committed (durable or not yet)."""

    async def write(self, body: Callable[[Transaction], T], *, fence: Fence | None = None) -> T:
        """Run ``body`` in a write transaction and commit it; returns what ``body`` returned.

        With ``fence=(session_id, owner, epoch)`` the transaction first checks that the claim is held
        so, and holds it so until the commit (a takeover waits for it). Returning does not mean
        durable: await ``durable()`` before telling anyone outside the process.

        **Cancellation:** may be cancelled before the transaction begins; once begun, it runs to its end.

        **Raises:** ``Fenced``; ``StoreBusy``, ``StoreFull``, ``StoreError``; whatever ``body`` raises
        (nothing of the transaction is kept then).
        """
        ...

    async def read(self, query: Callable[[Reader], T]) -> T:
        """Run ``query`` on the read view; returns what it returned. **Cancellation:** may be
        cancelled before it begins. **Raises:** ``StoreError``."""
        ...

    async def durable(self) -> None:
        """Wait until every commit made so far is durable and its events handed to ``on_durable``.

        Await it before acknowledging anything outside the process: answering a caller, starting a
        tool. **Cancellation:** safe; the commits become durable anyway. **Raises:** ``StoreError``.
        """
        ...

    def set_commit_hook(self, hook: CommitHook | None) -> None:
        """Call ``hook`` inside every later write transaction, right before its commit (None: no hook).

        Only a coordinator given a fault injector, or one that crashed, sets one; without it a commit
        pays one ``is None`` test.
        """
        ...

    def on_commit(self, callback: Callable[[Sequence[Event]], None]) -> None:
        """Call ``callback(events)`` right after each commit that appended events, durable or not yet."""
        ...

    def on_durable(self, callback: Callable[[Sequence[Event]], None]) -> None:
        """Call ``callback(events)`` once a commit that appended events is durable, in commit order."""
        ...

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the trio thread when another process may have committed (a
        notification from another node); never where the backend has no such news (SQLite)."""
        ...

    def observe(self, *, commit: Callable[[float], None], sync: Callable[[float], None]) -> None:
        """Hand the seconds of every successful commit, and of every sync, to these callbacks."""
        ...

    async def sync_now(self) -> None:
        """Make everything committed so far durable, other processes' commits included."""
        ...

    async def reclaim_space(self, pages: int) -> int:
        """Give free space back to the file system, a step at a time; returns what is left to give
        (-1: try later; 0 where the backend does this itself)."""
        ...

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The store's background work until cancelled: making commits durable in groups, and on
        PostgreSQL listening for other nodes' commits."""
        ...
