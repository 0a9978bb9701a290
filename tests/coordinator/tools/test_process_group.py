"""One process group per long-lived child: recorded before it is used, killed, reaped and forgotten
however its owner leaves; and a recorded group is killed only if its id still names that group."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import attrs
import pytest
import trio

from coordinator.errors import StoreError
from coordinator.tools.process_group import ProcessGroup, open_process_group
from tests.servers import group_gone, wait_group_gone


def test_a_group_whose_leader_pid_was_reused_is_left_alone() -> None:
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        recorded = ProcessGroup.of(process.pid)
        assert attrs.evolve(recorded, started=recorded.started + 1).kill_if_left() is False
        assert attrs.evolve(recorded, boot_id="another-boot").kill_if_left() is False
        assert process.poll() is None
        assert recorded.kill_if_left() is True
        assert process.wait(timeout=5) == -9
    finally:
        process.kill()
        process.wait()


@attrs.define
class Ledger:
    """``GroupRecords`` in memory: what was recorded and forgotten, in order."""

    refuse: bool = False
    events: list[tuple[str, ProcessGroup]] = attrs.Factory(list)

    async def record(self, group: ProcessGroup) -> None:
        await trio.lowlevel.checkpoint()
        if self.refuse:
            raise StoreError("refused")
        self.events.append(("recorded", group))

    async def forget(self, group: ProcessGroup) -> None:
        await trio.lowlevel.checkpoint()
        self.events.append(("forgotten", group))


# The leader and a member it put in the background: the whole group must go, not the leader alone.
FAMILY = "sleep 60 & exec sleep 60"


class Boom(Exception):
    pass


@pytest.mark.parametrize("how", ["end", "exception", "cancelled"])
async def test_a_group_is_recorded_before_it_is_yielded_and_ended_then_forgotten_however_the_block_leaves(
    tmp_path: Path, how: str
) -> None:
    """The record is there for as long as anything of the group may run: written before the block
    gets the process, deleted only once the whole group is dead and its leader reaped."""
    ledger = Ledger()
    with trio.move_on_after(30) as never, contextlib.suppress(Boom):
        async with open_process_group(FAMILY, records=ledger, shell=True, cwd=tmp_path) as proc:
            group = ProcessGroup.of(proc.pid)
            assert ledger.events == [("recorded", group)] and not group_gone(proc.pid)
            if how == "exception":
                raise Boom
            if how == "cancelled":
                never.cancel()
                await trio.sleep_forever()
    assert ledger.events == [("recorded", group), ("forgotten", group)]
    assert proc.returncode is not None and await wait_group_gone(proc.pid)


async def test_a_group_that_cannot_be_recorded_is_killed_before_the_error_propagates(tmp_path: Path) -> None:
    """Unrecorded, it would outlive a crash unseen: it never reaches the block."""
    ledger = Ledger(refuse=True)
    started: list[trio.Process] = []
    with pytest.raises(StoreError):
        async with open_process_group(FAMILY, records=ledger, shell=True, cwd=tmp_path) as proc:
            started.append(proc)
    assert started == []
    [(what, group)] = ledger.events
    assert what == "forgotten" and await wait_group_gone(group.pgid)


async def test_what_a_reaped_leader_left_in_its_group_is_killed_on_leaving(tmp_path: Path) -> None:
    """A block may wait for its process itself (a shell command that exited): its backgrounded
    children are killed on leaving, by the group's recorded start, never a group that reused its id."""
    async with open_process_group("sleep 60 & echo started", records=None, shell=True, cwd=tmp_path) as proc:
        assert await proc.wait() == 0
        assert not group_gone(proc.pid)
    assert await wait_group_gone(proc.pid)
