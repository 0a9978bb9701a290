"""Plugin tools of the campaign's runs: work that takes time (on trio's clock) without a subprocess."""

from __future__ import annotations

import json
import os
import time

import structlog
import trio

STARTS_ENV = "COORDINATOR_CHAOS_STARTS"
"""The file each start of a ``counted`` call appends a line to (the rounds over nodes set it)."""


async def slow(seconds: float) -> str:
    """Wait ``seconds``, then say so. Allowed without asking."""
    await trio.sleep(seconds)
    return f"slept {seconds:g}s"


async def guarded(seconds: float) -> str:
    """Wait ``seconds``, then say so. The campaign's rules ask a person before it runs."""
    await trio.sleep(seconds)
    return f"guarded {seconds:g}s"


async def counted(seconds: float, tag: str) -> str:
    """Note this start, then wait ``seconds``. Allowed without asking."""
    note_start(tag)
    await trio.sleep(seconds)
    return f"counted {tag}"


async def counted_guarded(seconds: float, tag: str) -> str:
    """Note this start, then wait ``seconds``. The campaign's rules ask a person before it runs."""
    note_start(tag)
    await trio.sleep(seconds)
    return f"counted {tag}"


def note_start(tag: str) -> None:
    """Append this start to the ``STARTS_ENV`` file, before anything awaits: which process, which
    session and turn (the ids the coordinator binds for its logs), the call's ``tag`` (its model call
    id, unique in a session) and the time. One small ``O_APPEND`` write, so lines from several nodes
    never interleave; nothing without the variable."""
    path = os.environ.get(STARTS_ENV)
    if not path:
        return
    bound = structlog.contextvars.get_contextvars()
    line = {
        "pid": os.getpid(),
        "session_id": bound.get("session_id"),
        "turn_id": bound.get("turn_id"),
        "tag": tag,
        "at": time.time(),
    }
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)
