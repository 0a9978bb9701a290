"""A helper process that fsyncs the write-ahead log when asked: durability without the GIL.

A sync in a thread of this process needs the GIL twice, to start the ``fdatasync`` and to report it
done, and the trio thread holds the GIL while it runs the actors' Python: measured on a stop, a sync
handed to the thread started 1.2 ms after its commit and reported 0.3 ms late, while the loop ran the
cleanups the stop had woken. A process has a GIL of its own. The trio thread asks with one byte on a
pipe (a write of microseconds, made by the commit itself) and learns of the sync when the answer
wakes its ``epoll``, like any other I/O.

One answer byte per request byte, in order: ``k`` when synced, ``E`` and a message when the disk
refused (the helper then exits: no later sync is trusted). Requests read together are covered by one
``fdatasync``: each was written after its commit reached the WAL, and fsync flushes every dirty page of
the file, whoever wrote it. The helper exits when its stdin closes, so a coordinator killed with -9
leaves nothing behind. It runs in a process group of its own, killed and reaped at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import trio

from coordinator import errors

REPLY_SECONDS = 10.0
"""How long closing waits for the helper to exit on its own before killing its group."""

_HELPER = r"""
import os, sys
wal, folder = sys.argv[1], sys.argv[2]
fd = None
while True:
    asked = os.read(0, 4096)
    if not asked:
        break
    try:
        if fd is None:
            try:
                fd = os.open(wal, os.O_RDONLY)
            except FileNotFoundError:
                pass  # nothing written yet: nothing to make durable
            else:
                folder_fd = os.open(folder, os.O_RDONLY)
                os.fsync(folder_fd)  # the WAL's own name survives too
                os.close(folder_fd)
        if fd is not None:
            os.fdatasync(fd)
    except OSError as exc:
        os.write(1, b"E" + str(exc).encode(errors="replace")[:500])
        break
    os.write(1, b"k" * len(asked))
"""


def _command(database_path: str) -> list[str]:
    folder = os.path.dirname(os.path.abspath(database_path))
    return [sys.executable, "-I", "-S", "-c", _HELPER, database_path + "-wal", folder]


class SyncProcess:
    """The helper process of one database file. ``request`` from anywhere on the trio thread;
    ``answers`` from one task."""

    def __init__(self, process: trio.Process) -> None:
        self._process = process
        assert isinstance(process.stdin, trio.lowlevel.FdStream) and process.stdout is not None
        self._ask_fd = process.stdin.fileno()
        self._answers = process.stdout

    @classmethod
    async def start(cls, database_path: str) -> SyncProcess:
        """Spawn the helper for ``database_path``'s WAL. **Raises:** ``OSError`` if it cannot start."""
        process = await trio.lowlevel.open_process(
            _command(database_path),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # its own group: killed with it, never by a signal to ours
        )
        return cls(process)

    @property
    def pid(self) -> int:
        return self._process.pid

    def request(self) -> None:
        """Ask for one sync of everything in the WAL now. Never blocks (a byte to a pipe whose
        buffer holds 64 KiB; the caller keeps at most a few requests unanswered).

        **Raises:** ``StoreError`` when the helper is gone.
        """
        try:
            os.write(self._ask_fd, b"s")
        except OSError as exc:
            raise errors.StoreError(f"the sync process is gone: {exc}") from exc

    async def answers(self) -> int:
        """How many requests were answered synced since the last call; waits for at least one.

        **Raises:** ``StoreError`` when the disk refused a sync or the helper died (the syncs
        answered before, in the same read, are lost to the caller: none is declared durable then).
        """
        data = await self._answers.receive_some(4096)
        if not data:
            raise errors.StoreError(f"the sync process exited ({await self._exit_status()})")
        if b"E" in data:
            message = data[data.index(b"E") + 1 :].decode(errors="replace")
            raise errors.StoreError(f"syncing the write-ahead log failed: {message}")
        return len(data)

    async def close(self) -> None:
        """Let the helper exit (its stdin closes), kill its group if it does not, and reap it.

        **Cancellation:** call it in a shielded scope; it is bounded by twice ``REPLY_SECONDS``.
        """
        process = self._process
        try:
            assert process.stdin is not None
            await process.stdin.aclose()
            with trio.move_on_after(REPLY_SECONDS):
                await process.wait()
        finally:
            # SIGKILL is not refused: the reap is quick, and bounded should the kernel be slow.
            with trio.move_on_after(REPLY_SECONDS, shield=True):
                if process.returncode is None:
                    try:
                        os.killpg(process.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    await process.wait()
                await self._answers.aclose()

    async def _exit_status(self) -> str:
        with trio.move_on_after(1):
            return f"status {await self._process.wait()}"
        return "still running"
