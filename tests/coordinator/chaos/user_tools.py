"""A user's plugin tools for the campaign's tests: one leaves its helper process behind, one does not."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable
from typing import Any

import trio

from coordinator.testing import checkpoint

# An odd duration, so that a test can tell these helpers from any other process.
HELPER = ["sleep", "60.021"]

LEFT_BEHIND: list[subprocess.Popen[bytes]] = []
"""The leaky tool's helpers, kept as a real leak keeps them: a handle collected while its process
runs warns (ResourceWarning) in whichever later test the collector happens to run in."""


def reap_left_behind() -> None:
    """Kill and reap what the leaky tool left (the campaign has usually killed it already)."""
    while LEFT_BEHIND:
        helper = LEFT_BEHIND.pop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(helper.pid, signal.SIGKILL)
        helper.wait()


async def leaky(seconds: float, progress: Callable[[Any], None]) -> str:
    """Crunch with a helper process, stopped only when the work is done (not when the call stops)."""
    helper = await trio.to_thread.run_sync(lambda: subprocess.Popen(HELPER, start_new_session=True))
    LEFT_BEHIND.append(helper)
    await checkpoint("helper-started")
    progress("crunching")
    await trio.sleep(seconds)
    helper.terminate()
    await trio.to_thread.run_sync(helper.wait)
    return f"crunched for {seconds:g}s"


async def tidy(seconds: float, progress: Callable[[Any], None]) -> str:
    """Crunch with a helper process whose whole group is killed and reaped however the call ends."""
    helper = await trio.lowlevel.open_process(HELPER, start_new_session=True)
    try:
        await checkpoint("helper-started")
        progress("crunching")
        await trio.sleep(seconds)
        return f"crunched for {seconds:g}s"
    finally:
        with trio.move_on_after(5, shield=True):
            os.killpg(helper.pid, signal.SIGKILL)
            await helper.wait()


async def unwinding(seconds: float) -> str:
    """Fail at once, then clean up (shielded) for ``seconds``: longer than the tool's deadline, say."""
    try:
        raise RuntimeError("it broke")
    finally:
        with trio.CancelScope(shield=True):
            await trio.sleep(seconds)
