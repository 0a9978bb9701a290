"""Claims' owners: who this process is, whether another owner is alive, and the heartbeat.

A claim names its owner, an instance id. An instance records its host, pid, boot id and a heartbeat.
A claim whose owner is dead belongs to a crashed process and is taken over (its epoch grows, fencing
the old owner out). Another process's instance is dead once its heartbeat is older than the lease,
whatever its pid: a frozen process (SIGSTOP, a hung event loop, a paused container) or a recycled pid
must not hold its sessions for ever, and the fencing epoch stops whatever it writes when it wakes. A
gone pid on the same host and boot only makes that sooner. An instance of this very process is dead
when it is not one of the coordinators open in it now.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import attrs
import trio

from coordinator.errors import StoreError
from coordinator.ids import boot_id, new_id
from coordinator.logs import get_logger
from coordinator.store import Store
from coordinator.store.rows import InstanceRow

log = get_logger(__name__)

# Instance ids of the coordinators open in this process: an instance of this pid not listed here
# was dropped (a crash in the same process, as the chaos campaign simulates).
LIVE_IN_THIS_PROCESS: set[str] = set()


def this_instance(node_id: str = "") -> InstanceRow:
    """This process's instance, naming ``node_id`` (``[server] node_id``) when one is configured."""
    return InstanceRow(
        node_id=node_id or None,
        id=new_id("ins"),
        host=socket.gethostname(),
        pid=os.getpid(),
        boot_id=boot_id(),
        heartbeat=time.time(),
        stopped=False,
    )


def _pid_alive(pid: int) -> bool:
    """Is ``pid`` a live process? A zombie (killed, not yet reaped by its parent) is dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return _signalable(pid)  # no /proc here: a zombie cannot be told apart
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _signalable(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@attrs.frozen
class Liveness:
    """Decides whether a claim's owner is alive, as seen by instance ``me``."""

    me: InstanceRow
    lease: float

    def owner_is_dead(self, owner: InstanceRow | None, now: float | None = None) -> bool:
        """Whether ``owner`` is dead; ``now`` is the store's clock, which heartbeats are written by
        (``Reader.clock``; this process's clock when not given)."""
        if owner is None or owner.stopped:
            return True
        if owner.id == self.me.id:
            return False
        same_boot = owner.host == self.me.host and owner.boot_id == self.me.boot_id
        if same_boot and owner.pid == self.me.pid:
            return owner.id not in LIVE_IN_THIS_PROCESS
        if (time.time() if now is None else now) - owner.heartbeat > self.lease:
            return True
        if same_boot:
            return not _pid_alive(owner.pid)
        return owner.host == self.me.host  # the same host booted again since: its processes are gone


async def serve_heartbeat(store: Store, instance_id: str, lease: float) -> None:
    """Refresh this instance's heartbeat three times a lease, for ever.

    A failed beat (a busy or full disk) is logged and retried at the next one: the lease is three beats
    long, so one failure costs nothing.
    """
    while True:
        await trio.sleep(lease / 3)
        try:
            await store.write(lambda tx: tx.beat(instance_id))
        except StoreError as exc:
            log.warning("heartbeat_failed", error=str(exc))
