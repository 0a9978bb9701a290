"""A recorded process group is killed only if its id still names the group that was recorded."""

from __future__ import annotations

import subprocess

import attrs

from coordinator.tools.process import ProcessGroup


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
