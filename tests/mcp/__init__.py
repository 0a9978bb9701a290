"""The MCP tests' fixture server, and what they share."""

from __future__ import annotations

from collections.abc import Callable

import trio


async def eventually(holds: Callable[[], bool], seconds: float = 10) -> None:
    """Return once ``holds()`` is true, looking every 20 ms. **Raises:** ``trio.TooSlowError``."""
    with trio.fail_after(seconds):
        while not holds():  # noqa: ASYNC110 (another process changes it: nothing to wait on)
            await trio.sleep(0.02)
