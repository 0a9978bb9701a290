"""LISTEN for other nodes' commits: one connection per node, in a thread of its own, reconnecting.

A NOTIFY carries only ids, ``ORIGIN:SEQ``: the store that committed and the seq of the commit's last
event (the payload limit is 8,000 bytes, and the store is the truth anyway). The listener only says
"look", and not for this node's own commits, which it knows of already. Notifications sent while it was
disconnected are lost, so every (re)connection says "look" too, and the tail reads the store from the
last event it handed over: nothing is missed.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import trio

from coordinator.logs import get_logger

log = get_logger(__name__)

POLL_SECONDS = 5.0
"""How long the thread waits on its socket at once (it is woken at once to stop, by its pipe)."""

RECONNECT_SECONDS = (0.1, 0.5, 1.0, 2.0)
"""Pauses between attempts to connect again (the last repeats)."""

JOIN_SECONDS = 2.0


async def serve_listener(
    url: str,
    channel: str,
    origin: str,
    changed: Callable[[], None],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Call ``changed()`` on the trio thread at each notification on ``channel`` and at each
    (re)connection, until cancelled; then stop the thread and wait for it (bounded).

    **Cancellation:** the thread is woken through a pipe and stops at once; the wait for it is
    shielded and bounded.
    """
    token = trio.lowlevel.current_trio_token()
    stop = _Stop()
    finished = trio.Event()

    def call_soon(callback: Callable[[], None]) -> None:
        try:
            token.run_sync_soon(callback)
        except trio.RunFinishedError:
            stop.set()

    def listen() -> None:
        try:
            _listen(url, channel, origin, lambda: call_soon(changed), stop)
        finally:
            call_soon(finished.set)

    task_status.started()
    try:
        await trio.to_thread.run_sync(listen, abandon_on_cancel=True)
    finally:
        stop.set()
        with trio.move_on_after(JOIN_SECONDS, shield=True):
            await finished.wait()
        stop.close()


class _Stop:
    """A stop flag the listening thread also sees in its ``select``: a pipe it reads."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.fd, self._write_fd = os.pipe()

    def set(self) -> None:
        if not self._event.is_set():
            self._event.set()
            with contextlib.suppress(OSError):
                os.write(self._write_fd, b"x")

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> None:
        self._event.wait(seconds)

    def close(self) -> None:
        for fd in (self.fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def _listen(url: str, channel: str, origin: str, changed: Callable[[], None], stop: _Stop) -> None:
    failures = 0
    while not stop.is_set():
        try:
            with psycopg.connect(url, autocommit=True, application_name="coordinator listener") as conn:
                conn.execute(f"LISTEN {channel}")
                failures = 0
                changed()  # (re)connected: whatever was notified meanwhile is read from the store
                _receive(conn, origin, changed, stop)
        except psycopg.Error as exc:
            pause = RECONNECT_SECONDS[min(failures, len(RECONNECT_SECONDS) - 1)]
            failures += 1
            log.warning("store_listener_reconnecting", error=str(exc).strip(), pause=pause)
            stop.wait(pause)


def _receive(conn: psycopg.Connection[Any], origin: str, changed: Callable[[], None], stop: _Stop) -> None:
    """Until stopped: wait on the connection's socket (and the stop pipe), read what came, and say
    "look" for each notification of another store."""
    pgconn = conn.pgconn
    mine = (origin + ":").encode()
    while not stop.is_set():
        readable, _, _ = select.select([pgconn.socket, stop.fd], [], [], POLL_SECONDS)
        if stop.fd in readable:
            return
        if not readable:
            continue
        pgconn.consume_input()
        while (note := pgconn.notifies()) is not None:
            if not note.extra.startswith(mine):
                changed()
