"""The benchmarks' plugin tool: does nothing, so a turn's cost is the coordinator's own."""

from __future__ import annotations

import time

import trio


async def noop() -> str:
    """Return "ok" at once (one yield to trio): the cheapest tool a model can call."""
    await trio.lowlevel.checkpoint()
    return "ok"


RETURNED: dict[str, float] = {}
"""When each ``pause`` call returned (``time.perf_counter()``), by its ``key``: the steering bench's
boundary (the benchmarks run the coordinator in their own process)."""


async def pause(ms: int, key: str) -> str:
    """Sleep ``ms`` milliseconds, note when it returns, return "ok": a tool call of a known length."""
    await trio.sleep(ms / 1000)
    RETURNED[key] = time.perf_counter()
    return "ok"
