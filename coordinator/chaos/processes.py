"""Finding processes that outlived their session: our children, and the orphans they left.

While the campaign runs, this process is a *child subreaper* (Linux ``prctl``): a process whose parent
died (a script's child that escaped its process group kill, say) is re-parented to us instead of init,
so that "no subprocess outlives its session" can be checked by looking at our own children.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import attrs

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


def _children(pid: int | str = "self") -> set[int]:
    """Pids of a process's children, from ``/proc/PID/task/*/children`` (every thread's)."""
    pids: set[int] = set()
    for listing in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            pids.update(int(pid) for pid in listing.read_text().split())
    return pids


def children() -> frozenset[int]:
    """This process's children now (to leave out of ``leftovers`` what was there before a run)."""
    return frozenset(_children())


@attrs.frozen
class Seen:
    """A live process below this one, as ``/proc`` showed it. ``started`` tells a reused pid apart."""

    pid: int
    started: int  # clock ticks after boot (``/proc/PID/stat`` field 22)
    pgid: int
    command: str


def descendants() -> dict[tuple[int, int], Seen]:
    """Every live process below this one (children, theirs, and orphans we adopted), by (pid, start).

    Read-only: a zombie is skipped, never reaped here, since its parent (a tool's ``Process.wait``)
    may be about to reap it and must get its real exit status.
    """
    found: dict[tuple[int, int], Seen] = {}
    stack = list(_children())
    while stack:
        pid = stack.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) < 20 or fields[0] in ("Z", "X"):
            continue
        seen = Seen(
            pid=pid, started=int(fields[19]), pgid=int(fields[2]), command=_cmdline(Path(f"/proc/{pid}"))
        )
        found[(pid, seen.started)] = seen
        stack.extend(_children(pid))
    return found


def is_alive(seen: Seen) -> bool:
    """Whether the process ``seen`` (not a reused pid) still runs (a zombie has ended)."""
    try:
        fields = Path(f"/proc/{seen.pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return False
    return len(fields) >= 20 and int(fields[19]) == seen.started and fields[0] not in ("Z", "X")


def command_of(seen: Seen) -> str:
    """The process's command line now (it may have exec'd since it was seen), or as it was seen."""
    return _cmdline(Path(f"/proc/{seen.pid}")) if is_alive(seen) else seen.command


def kill(seen: Seen) -> None:
    """SIGKILL a leaked process, and its group when it leads one of its own (never ours)."""
    with contextlib.suppress(OSError):
        if seen.pgid == seen.pid and seen.pgid != os.getpgrp():
            os.killpg(seen.pgid, signal.SIGKILL)
        elif is_alive(seen):
            os.kill(seen.pid, signal.SIGKILL)


def _cmdline(folder: Path) -> str:
    try:
        return (folder / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"
