"""Process groups left running by a coordinator that died (or whose cleanup ran out of time): killed,
then their records deleted.

A coordinator records every process group it starts (``coordinator/tools/process_group.py``) and
deletes the record once the group is dead and reaped. A record left behind names a group nobody
watches: a start and the registry's watch kill those of dead instances (``kill_left``), a graceful
close those of its own instance (``kill_own``). Each kill happens outside any transaction (a body may
be run again, and must act on nothing outside its ``tx``): a read decides which groups, the kill acts,
then a write deletes the records of the groups acted on. A death between the kill and that write
leaves records of dead groups, which the next look kills no one for and deletes.
"""

from __future__ import annotations

import trio

from coordinator.claims import Liveness
from coordinator.logs import get_logger
from coordinator.store import Store
from coordinator.store.rows import InstanceRow, ProcessGroupRow
from coordinator.tools.process_group import ProcessGroup

log = get_logger(__name__)

OwnedGroup = tuple[ProcessGroupRow, InstanceRow | None]


async def kill_left(store: Store, liveness: Liveness, found: list[OwnedGroup], now: float) -> int:
    """Kill the groups among ``found`` whose owner is dead, as ``liveness`` judges by the store's
    clock ``now`` (the owners' turns are taken over by the same judgement), then delete their
    records; returns how many records were deleted.

    A group on this machine is killed unless its id now names another process (``kill_if_left``);
    one recorded on this host before it booted again is gone already. One on another host is left,
    record and all, for a coordinator started there: no kill from here could reach it.

    **Cancellation:** may be cancelled before it begins; once the kills began, the records may be left (they are
    deleted at the next look). **Raises:** ``StoreError`` when the records cannot be deleted.
    """
    me = liveness.me
    dead = [
        row
        for row, owner in found
        if liveness.owner_is_dead(owner, now)
        and (row.boot_id == me.boot_id or owner is None or owner.host == me.host)
    ]
    return await _kill_and_forget(store, dead)


async def kill_own(store: Store, instance_id: str) -> int:
    """Kill the groups instance ``instance_id`` still has recorded, then delete their records: at a
    graceful close, after the actors ended, what a cleanup that ran out of time left. Returns how
    many records were deleted.

    **Cancellation:** may be cancelled before it begins. **Raises:** ``StoreError``.
    """
    rows = await store.read(lambda reader: reader.process_groups_of(instance_id))
    return await _kill_and_forget(store, rows)


async def _kill_and_forget(store: Store, rows: list[ProcessGroupRow]) -> int:
    if not rows:
        await trio.lowlevel.checkpoint()
        return 0
    for row in rows:
        if ProcessGroup.recorded(row).kill_if_left():
            log.warning(
                "orphaned_process_group_killed",
                pgid=row.pgid,
                owner=row.owner,
                session_id=row.session_id,
                call_id=row.call_id,
                label=row.label,
            )
    return await store.write(lambda tx: tx.forget_process_groups(rows))
