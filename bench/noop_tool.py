"""The benchmarks' plugin tool: does nothing, so a turn's cost is the coordinator's own."""

from __future__ import annotations

import trio


async def noop() -> str:
    """Return "ok" at once (one yield to trio): the cheapest tool a model can call."""
    await trio.lowlevel.checkpoint()
    return "ok"
