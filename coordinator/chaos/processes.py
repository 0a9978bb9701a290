"""Finding processes that outlived their session: our children, and the orphans they left.

While the campaign runs, this process is a *child subreaper* (Linux ``prctl``): a process whose parent
died (a script's child that escaped its process group kill, say) is re-parented to us instead of init,
so that "no subprocess outlives its session" can be checked by looking at our own children.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def adopt_orphans() -> bool:
    """Become the subreaper of what this process starts (for good); False where the platform cannot."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


@contextlib.contextmanager
def adopting_orphans() -> Iterator[bool]:
    """Be the subreaper of what we start, for the block; yields whether the platform allows it."""
    enabled = adopt_orphans()
    try:
        yield enabled
    finally:
        if enabled:
            _prctl(PR_SET_CHILD_SUBREAPER, 0)
            leftovers()  # reap what was adopted, so that nothing stays a zombie of ours


def leftovers(ignore: frozenset[int] = frozenset()) -> list[str]:
    """Our live child processes, except ``ignore``, as ``pid state cmdline``; dead ones are reaped.

    A dead child is not a leftover: it is a process killed with its group whose parent died first (a
    shell's child), adopted by us, the subreaper, instead of init, and reaped here as init would.
    """
    found = []
    for pid in sorted(_children() - ignore):
        try:
            # The command name is in parentheses and may contain spaces: the state follows the last ")".
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state in ("Z", "X"):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            continue
        found.append(f"{pid} {state} {_cmdline(Path(f'/proc/{pid}'))}")
    return found


def _children() -> set[int]:
    """Pids of this process's children, from ``/proc/self/task/*/children`` (every thread's)."""
    pids: set[int] = set()
    for listing in Path("/proc/self/task").glob("*/children"):
        with contextlib.suppress(OSError):
            pids.update(int(pid) for pid in listing.read_text().split())
    return pids


def _cmdline(folder: Path) -> str:
    try:
        return (folder / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"
