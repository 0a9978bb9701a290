"""Wall-clock time for durable deadlines (a wait's deadline must mean the same after a restart).

Trio's clock measures time within one run; a deadline stored for another process must be wall-clock.
Tests replace ``wall`` to pretend that time passed while the coordinator was down.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import trio


def wall() -> float:
    """Seconds since the epoch."""
    return time.time()


def trio_deadline(wall_deadline: float | None) -> float:
    """The trio deadline that falls at ``wall_deadline`` (``inf`` for none; now if it has passed)."""
    if wall_deadline is None:
        return math.inf
    return trio.current_time() + max(0.0, wall_deadline - wall())


def now_rfc3339() -> str:
    """The wall-clock time as RFC 3339 with milliseconds, in UTC (``2026-12-02T14:39:25.123Z``)."""
    return rfc3339(time.time())


def rfc3339(now: float) -> str:
    """``now`` (seconds since the epoch) as RFC 3339 with milliseconds, in UTC."""
    second = int(now)
    cached = _SECOND
    if cached[0] != second:  # formatting the date and time costs more than a commit's other strings
        cached[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))]
    return f"{cached[1]}.{int((now - second) * 1000):03d}Z"


_SECOND: list[Any] = [-1, ""]
"""The last whole second ``now_rfc3339`` formatted, and its text."""


def virtual() -> bool:
    """Whether trio runs on ``trio.testing.MockClock``: then the stores run their blocking calls
    inline, since a worker thread would let the clock jump while they run. Whoever made one imported
    ``trio.testing``; importing it here would cost every server 9 MiB of memory and 166 modules."""
    testing = sys.modules.get("trio.testing")
    return testing is not None and isinstance(trio.lowlevel.current_clock(), testing.MockClock)
