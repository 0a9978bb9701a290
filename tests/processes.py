"""Looking at processes from a test: gone, or only a zombie left for init to reap."""

from __future__ import annotations

from pathlib import Path

import trio


def is_gone(pid: int) -> bool:
    """No such process, or only its zombie (this container's init may not reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def wait_gone(pid: int, seconds: float = 2.0) -> bool:
    """Whether ``pid`` is gone within ``seconds``: the kernel completes a SIGKILL asynchronously."""
    for _ in range(int(seconds / 0.01)):
        if is_gone(pid):
            return True
        await trio.sleep(0.01)
    return is_gone(pid)
