"""A long-lived child process in a process group of its own: started, recorded in the store while it
runs, and killed, reaped and forgotten however its owner leaves.

Every child process a coordinator keeps (a shell command, the ``execute`` runner, a server it runs)
goes through ``open_process_group``. Its record names the group (id, its leader's start time, the
boot) and its owner (the instance, and the tool call or label it belongs to): a coordinator killed
with -9 cannot kill its groups, and the next start that finds its records does
(``coordinator/orphans.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs
import trio

from coordinator.clock import now_rfc3339
from coordinator.errors import StoreError
from coordinator.ids import boot_id as this_boot_id
from coordinator.logs import get_logger
from coordinator.store import Store
from coordinator.store.rows import ProcessGroupRow

log = get_logger(__name__)

TERM_GRACE = 2.0
"""Seconds the process gets after SIGTERM to exit before its group is killed with SIGKILL."""

REAP_SECONDS = 5.0
"""Seconds a stop may wait for the SIGKILLed process to be reaped, beyond the grace period."""

FORGET_SECONDS = 5.0
"""Seconds the cleanup may spend deleting the group's record once the group is dead."""


@attrs.frozen
class ProcessGroup:
    """A process group as recorded for a later start: its id and its leader's start time (boot ticks)."""

    pgid: int
    started: int
    boot_id: str

    @classmethod
    def of(cls, pgid: int) -> ProcessGroup:
        return cls(pgid=pgid, started=_start_ticks(pgid) or 0, boot_id=this_boot_id())

    @classmethod
    def recorded(cls, row: ProcessGroupRow) -> ProcessGroup:
        """The group a store record names."""
        return cls(pgid=row.pgid, started=row.started, boot_id=row.boot_id)

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


@attrs.frozen(kw_only=True)
class GroupOwner:
    """Whose a process group is: the coordinator instance, and the tool call (its session and call
    ids) or the label (a server's name) it belongs to."""

    instance_id: str
    session_id: str | None = None
    call_id: str | None = None
    label: str | None = None

    def row(self, group: ProcessGroup) -> ProcessGroupRow:
        """The store's record of ``group`` owned so."""
        return ProcessGroupRow(
            pgid=group.pgid,
            started=group.started,
            boot_id=group.boot_id,
            owner=self.instance_id,
            session_id=self.session_id,
            call_id=self.call_id,
            label=self.label,
        )


class GroupRecords(Protocol):
    """Where the process groups of one owner are recorded while they run."""

    async def record(self, group: ProcessGroup) -> None:
        """Record ``group`` (committed on return). **Raises:** ``StoreError``."""
        ...

    async def forget(self, group: ProcessGroup) -> None:
        """Delete the record of ``group``, dead and reaped. **Raises:** ``StoreError``."""
        ...


@attrs.frozen
class StoredGroups:
    """``GroupRecords`` in the store's ``process_groups`` table, owned by ``owner``."""

    store: Store = attrs.field(repr=False)
    owner: GroupOwner

    async def record(self, group: ProcessGroup) -> None:
        # Committed is enough, durable is not needed: what loses a commit (a power loss) takes the
        # group with it. Unfenced: the record is the instance's, whichever claim it holds.
        row = self.owner.row(group)
        await self.store.write(lambda tx: tx.record_process_group(row, now_rfc3339()))

    async def forget(self, group: ProcessGroup) -> None:
        row = self.owner.row(group)
        await self.store.write(lambda tx: tx.forget_process_group(row))


@contextlib.asynccontextmanager
async def open_process_group(
    command: str | Sequence[str],
    *,
    records: GroupRecords | None,
    cwd: str | Path,
    env: dict[str, str] | None = None,
    shell: bool = False,
    pass_fds: Sequence[int] = (),
    stdin: Any = subprocess.DEVNULL,
    stdout: Any = None,
    stderr: Any = None,
    term_grace: float = TERM_GRACE,
) -> AsyncIterator[trio.Process]:
    """Start ``command`` as the leader of a new session and process group, record the group, and
    yield the process; on leaving, kill the whole group, reap the leader and forget the record.

    The record is committed before the process is yielded, so from then on a coordinator that dies
    leaves it for the next start to find (a death between the start and that commit leaves the
    group unrecorded). The block may reap the process itself (``wait``); then only what is left of
    its group is killed on leaving, never a group that reused its id.

    Args:
        command: an argv, or a command line when ``shell`` is true.
        records: where the group is recorded; None records nothing (a tool run outside a coordinator).
        cwd, env, shell, pass_fds, stdin, stdout, stderr: as ``trio.lowlevel.open_process`` takes them.
        term_grace: seconds between SIGTERM and SIGKILL when the process still runs on leaving.

    **Cancellation:** leaving the block, however (its end, an exception, a cancellation, the record
    failing), sends a still running process SIGTERM, then SIGKILL to its group after ``term_grace``,
    reaps it, closes its pipes and deletes the record, in a shielded scope with a deadline. A record
    whose deletion fails (a store that refuses writes) is left for the next sweep; it names a dead
    group, which is never killed again.

    **Raises:** ``OSError`` when the process cannot start (nothing runs then); ``StoreError`` when
    the record cannot be written (the group is killed first).
    """
    proc = await trio.lowlevel.open_process(
        command,
        shell=shell,
        cwd=cwd,
        env=env,
        start_new_session=True,  # its group's id is its pid
        pass_fds=pass_fds,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
    )
    group = ProcessGroup.of(proc.pid)
    try:
        if records is not None:
            await records.record(group)
        yield proc
    finally:
        with trio.move_on_after(term_grace + REAP_SECONDS + FORGET_SECONDS, shield=True):
            await _end_group(proc, group, term_grace)
            # Only once the group is dead: a record kept names a group a later sweep must kill.
            if records is not None:
                await _forget(records, group)


async def _end_group(proc: trio.Process, group: ProcessGroup, term_grace: float) -> None:
    if proc.returncode is None:
        await terminate_group(proc, term_grace)
    else:
        group.kill_if_left()  # the block reaped its leader: the id may be another group's by now
    await _close_pipes(proc)


async def _forget(records: GroupRecords, group: ProcessGroup) -> None:
    try:
        await records.forget(group)
    except StoreError as exc:
        log.warning("process_group_record_kept", pgid=group.pgid, error=str(exc))


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


async def _close_pipes(proc: trio.Process) -> None:
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if isinstance(stream, trio.lowlevel.FdStream):
            stream.close()  # every one closed, then one cancel point: a stop waits for this
        elif stream is not None:
            await stream.aclose()
    await trio.lowlevel.checkpoint()
