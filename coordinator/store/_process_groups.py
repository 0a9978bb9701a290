"""The store's records of the process groups coordinators started and have not reaped yet.

A record is written before its group is handed to whoever uses it and deleted once the group is
dead and reaped; one that is left names an instance that died (or whose cleanup ran out of time),
and a later start kills the group and deletes the record (``coordinator/orphans.py``).
"""

from __future__ import annotations

from coordinator.store._read_base import SqlReads
from coordinator.store.rows import INSTANCE_ROW, PROCESS_GROUP_ROW, InstanceRow, ProcessGroupRow

_GROUPS = f"SELECT {PROCESS_GROUP_ROW.select} FROM process_groups"


class ProcessGroupReads(SqlReads):
    """Reads of the recorded process groups."""

    def process_group_of(self, session_id: str, call_id: str) -> ProcessGroupRow | None:
        row = self._one(
            _GROUPS + " WHERE session_id = ? AND call_id = ? ORDER BY created_at LIMIT 1",
            (session_id, call_id),
        )
        return PROCESS_GROUP_ROW.load_or_none(row)

    def process_groups_of(self, owner: str) -> list[ProcessGroupRow]:
        rows = self._all(_GROUPS + " WHERE owner = ? ORDER BY created_at, pgid", (owner,))
        return [PROCESS_GROUP_ROW.load(row) for row in rows]

    def process_groups_with_owners(self, me: str) -> list[tuple[ProcessGroupRow, InstanceRow | None]]:
        group = ", ".join(f"p.{column}" for column in PROCESS_GROUP_ROW.columns)
        owner = ", ".join(f"i.{column}" for column in INSTANCE_ROW.columns)
        rows = self._all(
            f"SELECT {group}, {owner} FROM process_groups p LEFT JOIN instances i ON i.id = p.owner "
            "WHERE p.owner != ? ORDER BY p.created_at, p.pgid",
            (me,),
        )
        owner_at = len(PROCESS_GROUP_ROW.columns)
        return [
            (
                PROCESS_GROUP_ROW.load(row[:owner_at]),
                INSTANCE_ROW.load_or_none(row[owner_at:] if row[owner_at] is not None else None),
            )
            for row in rows
        ]


class ProcessGroupWrites(SqlReads):
    """Writes of the recorded process groups (a transaction's)."""

    def record_process_group(self, group: ProcessGroupRow, created_at: str) -> None:
        self.sql.send(
            f"INSERT INTO process_groups({PROCESS_GROUP_ROW.select}, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                group.pgid,
                group.started,
                group.boot_id,
                group.owner,
                group.session_id,
                group.call_id,
                group.label,
                created_at,
            ),
        )

    def forget_process_groups(self, groups: list[ProcessGroupRow]) -> int:
        return sum(self.sql.run(_FORGET, (group.boot_id, group.pgid, group.started)) for group in groups)

    def forget_process_group(self, group: ProcessGroupRow) -> None:
        self.sql.send(_FORGET, (group.boot_id, group.pgid, group.started))


# A group is named by where it ran, its id and its leader's start: the key, whoever owns it.
_FORGET = "DELETE FROM process_groups WHERE boot_id = ? AND pgid = ? AND started = ?"
