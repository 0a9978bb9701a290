"""Who counts as a claim's live owner: the heartbeat decides, a gone pid only sooner."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import attrs
import pytest

from coordinator.claims import LIVE_IN_THIS_PROCESS, Liveness, this_instance
from coordinator.store.rows import InstanceRow

LEASE = 15.0


@pytest.fixture
def me() -> InstanceRow:
    return this_instance()


@pytest.fixture
def other_process() -> object:
    """A live process of this host, not this one: the owner another coordinator would be."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield child
    child.kill()
    child.wait()


def owner_like(me: InstanceRow, **changes: object) -> InstanceRow:
    return attrs.evolve(me, id="ins_other", **changes)


def test_a_live_process_with_a_fresh_heartbeat_keeps_its_claims(me: InstanceRow, other_process) -> None:
    """Another node that beats in time owns its turns: taking them would run them twice."""
    owner = owner_like(me, pid=other_process.pid, heartbeat=time.time())
    assert not Liveness(me=me, lease=LEASE).owner_is_dead(owner)


def test_a_frozen_process_loses_its_claims_once_its_heartbeat_is_older_than_the_lease(
    me: InstanceRow, other_process
) -> None:
    """A SIGSTOPped or hung owner whose pid still exists must not hold its sessions for ever."""
    owner = owner_like(me, pid=other_process.pid, heartbeat=time.time() - LEASE - 1)
    assert Liveness(me=me, lease=LEASE).owner_is_dead(owner)


def test_a_gone_pid_on_this_boot_is_dead_before_its_lease_runs_out(me: InstanceRow) -> None:
    """A crash on this machine is taken over at once, not after the lease."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    owner = owner_like(me, pid=child.pid, heartbeat=time.time())
    assert Liveness(me=me, lease=LEASE).owner_is_dead(owner)


def test_an_owner_on_another_host_is_judged_by_its_heartbeat_alone(me: InstanceRow) -> None:
    """Its pid means nothing here; only a heartbeat older than the lease means it is gone."""
    fresh = owner_like(me, host="elsewhere", boot_id="b", pid=1, heartbeat=time.time())
    stale = attrs.evolve(fresh, heartbeat=time.time() - LEASE - 1)
    liveness = Liveness(me=me, lease=LEASE)
    assert not liveness.owner_is_dead(fresh)
    assert liveness.owner_is_dead(stale)


def test_this_host_after_a_reboot_owns_nothing_any_more(me: InstanceRow) -> None:
    """A claim held by this host's previous boot belongs to processes that are gone."""
    owner = owner_like(me, boot_id="an-earlier-boot", pid=os.getpid(), heartbeat=time.time())
    assert Liveness(me=me, lease=LEASE).owner_is_dead(owner)


def test_a_coordinator_dropped_inside_this_process_is_dead_and_an_open_one_is_not(me: InstanceRow) -> None:
    """The in-process crash the chaos campaign simulates: only the open coordinators are alive."""
    owner = owner_like(me, heartbeat=time.time())
    liveness = Liveness(me=me, lease=LEASE)
    assert liveness.owner_is_dead(owner)
    LIVE_IN_THIS_PROCESS.add(owner.id)
    try:
        assert not liveness.owner_is_dead(owner)
    finally:
        LIVE_IN_THIS_PROCESS.discard(owner.id)
