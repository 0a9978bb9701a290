"""Plugin tools of the campaign's runs: work that takes time (on trio's clock) without a subprocess."""

from __future__ import annotations

import trio


async def slow(seconds: float) -> str:
    """Wait ``seconds``, then say so. Allowed without asking."""
    await trio.sleep(seconds)
    return f"slept {seconds:g}s"


async def guarded(seconds: float) -> str:
    """Wait ``seconds``, then say so. The campaign's rules ask a person before it runs."""
    await trio.sleep(seconds)
    return f"guarded {seconds:g}s"
