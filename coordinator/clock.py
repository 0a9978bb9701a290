"""Wall-clock time for durable deadlines (a wait's deadline must mean the same after a restart).

Trio's clock measures time within one run; a deadline stored for another process must be wall-clock.
Tests replace ``wall`` to pretend that time passed while the coordinator was down.
"""

from __future__ import annotations

import math
import time

import trio


def wall() -> float:
    """Seconds since the epoch."""
    return time.time()


def trio_deadline(wall_deadline: float | None) -> float:
    """The trio deadline that falls at ``wall_deadline`` (``inf`` for none; now if it has passed)."""
    if wall_deadline is None:
        return math.inf
    return trio.current_time() + max(0.0, wall_deadline - wall())
