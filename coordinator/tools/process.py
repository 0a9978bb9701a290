"""Run a subprocess in its own process group, capture its output, and kill the whole group on a stop."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import attrs
import structlog
import trio

from coordinator.ids import boot_id as this_boot_id

log = structlog.get_logger()

OUTPUT_LIMIT = 32 * 1024
"""Bytes kept of each stream (stdout, stderr): the head; the rest is counted and dropped."""

RECENT_LIMIT = 2 * 1024
"""Bytes of the latest output kept for progress reports, whatever the head limit dropped."""

TERM_GRACE = 2.0
"""Seconds the process gets after SIGTERM to exit before its group is killed with SIGKILL."""

DRAIN_SECONDS = 1.0
"""Seconds to read what is left in the pipes once the group is dead.

A process that left the group (its own ``setsid``) may hold a pipe open forever; past this deadline
its output is abandoned instead of holding the call open.
"""

REAP_SECONDS = 5.0
"""Seconds a stop may wait for the SIGKILLed process to be reaped, beyond the grace period."""

_READ_SIZE = 64 * 1024


@attrs.define
class CapturedOutput:
    """The head of one output stream: at most ``limit`` bytes kept, the rest counted as dropped.

    Owned by the task that runs the process; readable at any time, also after a stop, which is what
    lets a stopped call report what it printed.
    """

    limit: int = OUTPUT_LIMIT
    head: bytearray = attrs.Factory(bytearray)
    dropped: int = 0
    recent: bytearray = attrs.Factory(bytearray)

    def append(self, data: bytes | bytearray) -> None:
        """Keep what fits under ``limit``, count the rest, and remember the latest bytes."""
        room = max(self.limit - len(self.head), 0)
        self.head += data[:room]
        self.dropped += max(len(data) - room, 0)
        self.recent += data[-RECENT_LIMIT:]
        del self.recent[:-RECENT_LIMIT]

    @property
    def total(self) -> int:
        """Bytes received in all, kept or dropped."""
        return len(self.head) + self.dropped

    def text(self) -> str:
        """The kept head as text, with a trailer line saying how many bytes were dropped, if any."""
        rendered = self.head.decode("utf-8", errors="replace")
        if self.dropped:
            rendered += f"\n[... {self.dropped} bytes truncated]"
        return rendered

    def tail(self) -> str:
        """The latest ``RECENT_LIMIT`` bytes received, as text (for progress, not for the result)."""
        return self.recent.decode("utf-8", errors="replace")


@attrs.define
class ProcessOutput:
    """Both captured streams of one process; pass one in to keep reading it after a stop."""

    stdout: CapturedOutput = attrs.Factory(CapturedOutput)
    stderr: CapturedOutput = attrs.Factory(CapturedOutput)

    @classmethod
    def with_limits(cls, stdout_limit: int = OUTPUT_LIMIT, stderr_limit: int = OUTPUT_LIMIT) -> ProcessOutput:
        return cls(stdout=CapturedOutput(limit=stdout_limit), stderr=CapturedOutput(limit=stderr_limit))

    def texts(self) -> dict[str, str]:
        """``{"stdout": ..., "stderr": ...}`` as rendered by ``CapturedOutput.text``."""
        return {"stdout": self.stdout.text(), "stderr": self.stderr.text()}

    def tails(self) -> dict[str, str]:
        """``{"stdout": ..., "stderr": ...}`` of the latest bytes of each stream."""
        return {"stdout": self.stdout.tail(), "stderr": self.stderr.tail()}


@attrs.frozen
class ProcessResult:
    """How a process ended: its exit code (``-N`` when signal N killed it) and its captured output."""

    exit_code: int
    stdout: str
    stderr: str


OutputCallback = Callable[[ProcessOutput], None]


@attrs.frozen
class ProcessGroup:
    """A process group as recorded for a later start: its id and its leader's start time (boot ticks)."""

    pgid: int
    started: int
    boot_id: str

    @classmethod
    def of(cls, pgid: int) -> ProcessGroup:
        return cls(pgid=pgid, started=_start_ticks(pgid) or 0, boot_id=this_boot_id())

    def kill_if_left(self) -> bool:
        """SIGKILL what is left of the group, unless its id now belongs to another process.

        A group's id is its leader's pid, and a pid is not reused while its group has members; so the
        id is ours if no process has that pid (only members are left), or if the process with that
        pid started when our leader did. Never after a reboot (another boot id).
        """
        ticks = _start_ticks(self.pgid)
        if self.boot_id != this_boot_id() or (ticks is not None and ticks != self.started):
            return False
        return signal_group(self.pgid, signal.SIGKILL)


def _start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


StartCallback = Callable[[ProcessGroup], Awaitable[None]]


async def run_in_process_group(
    argv_or_command: str | Sequence[str],
    *,
    shell: bool,
    cwd: str | Path,
    env: dict[str, str] | None = None,
    stdout_limit: int = OUTPUT_LIMIT,
    stderr_limit: int = OUTPUT_LIMIT,
    on_output: OutputCallback | None = None,
    output: ProcessOutput | None = None,
    term_grace: float = TERM_GRACE,
    on_start: StartCallback | None = None,
) -> ProcessResult:
    """Run a process in a new session (its own process group) and wait until it exits.

    Both pipes are read concurrently; bytes beyond a stream's limit are read and dropped, so the
    process never blocks on a full pipe. When the process exits, whatever is left of its group
    (backgrounded grandchildren) is killed with SIGKILL, so nothing it started keeps the call open.

    Args:
        argv_or_command: a command line when ``shell`` is true, else an argv.
        shell: run ``argv_or_command`` through ``/bin/sh -c``.
        cwd: the working directory.
        env: the environment; ``None`` inherits this process's.
        stdout_limit: bytes of stdout kept (ignored when ``output`` is given).
        stderr_limit: bytes of stderr kept (ignored when ``output`` is given).
        on_output: called (synchronously, keep it cheap) with the output after every chunk read.
        output: where to capture; pass one in to read what was printed after a stop.
        term_grace: seconds between SIGTERM and SIGKILL on a stop.
        on_start: awaited with the new process group once it runs, so that the caller can record it
            durably: a coordinator that dies cannot kill the group, the next start can.

    **Cancellation:** the process group gets SIGTERM, then SIGKILL after ``term_grace`` seconds if the
    process has not exited; the process is always reaped and the pipes drained into ``output`` and
    closed (in a shielded scope with a deadline) before the ``Cancelled`` propagates. The same happens
    when reading the output raises (for instance ``on_output``).

    **Raises:** ``OSError`` when the process cannot start (a missing ``cwd`` or program); nothing has
    run then.
    """
    if output is None:
        output = ProcessOutput.with_limits(stdout_limit, stderr_limit)
    proc = await trio.lowlevel.open_process(
        argv_or_command,
        shell=shell,
        cwd=cwd,
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    # With start_new_session the child leads a new session and group whose id is its pid.
    pgid = proc.pid
    terminating = False  # SIGTERM sent to the group
    try:
        if on_start is not None:
            await on_start(ProcessGroup.of(pgid))
        async with trio.open_nursery() as nursery:
            _start_pumps(nursery, proc, output, on_output)
            try:
                await proc.wait()
            except trio.Cancelled:
                # The stop reaches the process here, before the pumps unwind: the group dies on the
                # other core while this process tears the rest of the call down.
                terminating = signal_group(pgid, signal.SIGTERM)
                raise
            signal_group(pgid, signal.SIGKILL)
            # Writers are dead now, so the pipes reach EOF at once unless one escaped the group.
            nursery.cancel_scope.deadline = trio.current_time() + DRAIN_SECONDS
    except BaseException:
        with trio.move_on_after(term_grace + REAP_SECONDS + DRAIN_SECONDS, shield=True):
            await terminate_group(proc, term_grace, terminating=terminating)
            # No callback here: it could raise inside cleanup and hide the stop's own exception.
            await _drain(proc, output)
        raise
    finally:
        with trio.move_on_after(REAP_SECONDS, shield=True):
            await _close_pipes(proc)
    assert proc.returncode is not None
    return ProcessResult(exit_code=proc.returncode, stdout=output.stdout.text(), stderr=output.stderr.text())


def signal_group(pgid: int, signum: signal.Signals) -> bool:
    """Send ``signum`` to process group ``pgid``; false when no process is left in it."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    log.info("process_group_killed", pgid=pgid, signal=signum.name)
    return True


async def terminate_group(proc: trio.Process, term_grace: float, *, terminating: bool = False) -> None:
    """SIGTERM the group of ``proc`` (unless ``terminating``: sent already), give ``proc``
    ``term_grace`` seconds to exit, SIGKILL, reap.

    Whatever of the group outlives ``proc`` by the end of the grace period (a grandchild that
    ignores SIGTERM) is killed with it.

    **Cancellation:** call it in a shielded scope; a cancel may leave the process unreaped.

    **Raises:** nothing of its own.
    """
    if not terminating:
        signal_group(proc.pid, signal.SIGTERM)
    with trio.move_on_after(term_grace):
        await proc.wait()
    signal_group(proc.pid, signal.SIGKILL)
    if proc.returncode is None:
        await proc.wait()


def _start_pumps(
    nursery: trio.Nursery, proc: trio.Process, output: ProcessOutput, on_output: OutputCallback | None
) -> None:
    assert proc.stdout is not None and proc.stderr is not None
    nursery.start_soon(_pump, proc.stdout, output.stdout, output, on_output)
    nursery.start_soon(_pump, proc.stderr, output.stderr, output, on_output)


async def _pump(
    stream: trio.abc.ReceiveStream,
    captured: CapturedOutput,
    output: ProcessOutput,
    on_output: OutputCallback | None,
) -> None:
    while chunk := await stream.receive_some(_READ_SIZE):
        captured.append(chunk)
        if on_output is not None:
            on_output(output)


async def _drain(proc: trio.Process, output: ProcessOutput) -> None:
    """Read what the dead group left in the pipes, so a stop keeps everything printed before it."""
    async with trio.open_nursery() as nursery:
        nursery.cancel_scope.deadline = trio.current_time() + DRAIN_SECONDS
        _start_pumps(nursery, proc, output, None)


async def _close_pipes(proc: trio.Process) -> None:
    for stream in (proc.stdout, proc.stderr):
        if isinstance(stream, trio.lowlevel.FdStream):
            stream.close()  # both closed, then one cancel point: a stop waits for this
        elif stream is not None:
            await stream.aclose()
    await trio.lowlevel.checkpoint()
