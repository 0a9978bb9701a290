"""LISTEN for other nodes' commits: one connection per node, in a thread of its own, reconnecting.

A NOTIFY carries only the seq of a commit's last event (the payload limit is 8,000 bytes, and the
store is the truth anyway): the listener only says "look". Notifications sent while it was
disconnected are lost, so every (re)connection says "look" too, and the tail reads the store from the
last event it handed over: nothing is missed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import structlog
import trio

log = structlog.get_logger()

POLL_SECONDS = 0.5
"""How long the thread waits for a notification before it looks whether it must stop."""

RECONNECT_SECONDS = (0.1, 0.5, 1.0, 2.0)
"""Pauses between attempts to connect again (the last repeats)."""

JOIN_SECONDS = 2.0


async def serve_listener(
    url: str,
    channel: str,
    changed: Callable[[], None],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Call ``changed()`` on the trio thread at each notification on ``channel`` and at each
    (re)connection, until cancelled; then stop the thread and wait for it (bounded).

    **Cancellation:** the thread stops within ``POLL_SECONDS``; the wait for it is shielded.
    """
    token = trio.lowlevel.current_trio_token()
    stop = threading.Event()
    finished = trio.Event()

    def call_soon(callback: Callable[[], None]) -> None:
        try:
            token.run_sync_soon(callback)
        except trio.RunFinishedError:
            stop.set()

    def listen() -> None:
        try:
            _listen(url, channel, lambda: call_soon(changed), stop)
        finally:
            call_soon(finished.set)

    task_status.started()
    try:
        await trio.to_thread.run_sync(listen, abandon_on_cancel=True)
    finally:
        stop.set()
        with trio.move_on_after(JOIN_SECONDS, shield=True):
            await finished.wait()


def _listen(url: str, channel: str, changed: Callable[[], None], stop: threading.Event) -> None:
    failures = 0
    while not stop.is_set():
        try:
            with psycopg.connect(url, autocommit=True, application_name="coordinator listener") as conn:
                conn.execute(f"LISTEN {channel}")
                failures = 0
                changed()  # (re)connected: whatever was notified meanwhile is read from the store
                while not stop.is_set():
                    for _ in conn.notifies(timeout=POLL_SECONDS, stop_after=1):
                        changed()
        except psycopg.Error as exc:
            pause = RECONNECT_SECONDS[min(failures, len(RECONNECT_SECONDS) - 1)]
            failures += 1
            log.warning("store_listener_reconnecting", error=str(exc).strip(), pause=pause)
            stop.wait(pause)
