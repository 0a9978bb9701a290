"""The store's records of what people send into a session's turns besides prompts: steers (a text
for the running turn's next step boundary), the queue of turns (listed, cancelled, one put first),
soft stops (a stop for the next boundary), and approvals with an edited input."""

from __future__ import annotations

import json
from typing import Any

import attrs

from coordinator import wire
from coordinator.reasons import StopReason
from coordinator.statuses import SteerStatus, TurnStatus
from coordinator.store import _status_sql
from coordinator.store._read_base import SqlReads
from coordinator.store._records import dump_json
from coordinator.store.rows import STEER_ROW, TURN_ROW, SteerRow, TurnRow

_STEERS = f"SELECT {STEER_ROW.select} FROM steers"
# ``status = 'pending'`` as the partial index says it (``steers_pending``), so that it is used.
_PENDING_STEERS = _STEERS + f" WHERE turn_id = ? AND status = '{SteerStatus.PENDING}' ORDER BY ord"
_QUEUED_TURNS = (
    f"SELECT {TURN_ROW.select} FROM turns WHERE session_id = ? AND status != '{TurnStatus.SETTLED}' "
    f"AND status = '{TurnStatus.QUEUED}' AND parent_call_id IS NULL ORDER BY ord"
)
# The turn that began and has not settled (a task call's included: a sub-agent's session runs it).
_ACTIVE_TURN = (
    f"SELECT {TURN_ROW.select} FROM turns WHERE session_id = ? AND status != '{TurnStatus.SETTLED}' "
    f"AND status != '{TurnStatus.QUEUED}' ORDER BY ord LIMIT 1"
)

_NO_PENDING_STEER = (
    f"NOT EXISTS (SELECT 1 FROM steers WHERE turn_id = ? AND status = '{SteerStatus.PENDING}')"
)
_NOTHING_AT_BOUNDARY = (
    f"EXISTS (SELECT 1 FROM turns WHERE id = ? AND status = '{TurnStatus.RUNNING}' AND soft_stop IS NULL) "
    f"AND {_NO_PENDING_STEER}"
)


@attrs.frozen
class Boundary:
    """What a turn's step boundary acts on, read in one statement: the turn's status, the soft stop
    waiting for the boundary, and the steers waiting to be delivered there."""

    status: TurnStatus | None
    soft_stop: StopReason | None
    steers: list[SteerRow]


_STEER_OF_S = ", ".join(f"s.{column}" for column in STEER_ROW.columns)
_BOUNDARY = (
    f"SELECT t.status, t.soft_stop, {_STEER_OF_S} FROM turns t LEFT JOIN steers s "
    f"ON s.turn_id = t.id AND s.status = '{SteerStatus.PENDING}' WHERE t.id = ? ORDER BY s.ord"
)


class InputReads(SqlReads):
    """Reads of steers, the queue and soft stops."""

    def boundary(self, turn_id: str) -> Boundary:
        if self.sql.predicts:
            # Nearly every boundary finds its turn running with nothing sent into it.
            self.sql.expect(_NOTHING_AT_BOUNDARY, (turn_id, turn_id), "nothing waits at the boundary")
            return Boundary(status=TurnStatus.RUNNING, soft_stop=None, steers=[])
        rows = self._all(_BOUNDARY, (turn_id,))
        if not rows:
            return Boundary(status=None, soft_stop=None, steers=[])
        status, soft_stop = rows[0][0], rows[0][1]
        return Boundary(
            status=TurnStatus(status),
            soft_stop=None if soft_stop is None else _stop_reason(soft_stop),
            steers=[STEER_ROW.load(row[2:]) for row in rows if row[2] is not None],
        )

    def pending_steers(self, turn_id: str) -> list[SteerRow]:
        if self.sql.predicts:
            self.sql.expect(_NO_PENDING_STEER, (turn_id,), "no steer is pending")
            return []
        return [STEER_ROW.load(row) for row in self._all(_PENDING_STEERS, (turn_id,))]

    def get_steer(self, steer_id: str) -> SteerRow | None:
        return STEER_ROW.load_or_none(self._one(_STEERS + " WHERE id = ?", (steer_id,)))

    def steers_of_session(self, session_id: str) -> list[SteerRow]:
        rows = self._all(_STEERS + " WHERE session_id = ? ORDER BY ord", (session_id,))
        return [STEER_ROW.load(row) for row in rows]

    def active_turn(self, session_id: str) -> TurnRow | None:
        return TURN_ROW.load_or_none(self._one(_ACTIVE_TURN, (session_id,)))

    def queued_turns(self, session_id: str) -> list[TurnRow]:
        return [TURN_ROW.load(row) for row in self._all(_QUEUED_TURNS, (session_id,))]


def _stop_reason(text: str) -> StopReason:
    reason: StopReason = wire.structure(json.loads(text), StopReason)
    return reason


class InputWrites(SqlReads):
    """Writes of steers, the queue, soft stops and edited inputs (inside a write transaction)."""

    def _run(self, query: str, args: tuple[Any, ...] = ()) -> int:
        """Execute a statement; how many rows it changed (a backend across a network waits for it)."""
        return self.sql.run(query, args)

    def _send(self, query: str, args: tuple[Any, ...] = ()) -> None:
        """Execute a statement whose result is not read (it may travel with the next one or the commit)."""
        self.sql.send(query, args)

    def _compare_and_set(self, query: str, args: tuple[Any, ...], what: str) -> bool:
        """Execute an ``UPDATE`` that changes one row or none; whether it changed one. Where the
        connection predicts, it is taken to change one, and the server checks that it did."""
        if self.sql.predicts:
            self.sql.expect_changed(query, args, what)
            return True
        return self._run(query, args) == 1

    def insert_steer(
        self,
        steer_id: str,
        session_id: str,
        turn_id: str | None,
        text: str,
        created_at: str,
        sent_by: str | None = None,
    ) -> None:
        # Numbered in its session as every row of a session is (``SqlTransaction._insert_numbered``).
        self.sql.serialize(session_id)
        self._send(
            "INSERT INTO steers(id, session_id, turn_id, text, status, created_at, sent_by, ord) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, (SELECT COALESCE(MAX(ord) + 1, 0) FROM steers WHERE session_id = ?))",
            (steer_id, session_id, turn_id, text, SteerStatus.PENDING, created_at, sent_by, session_id),
        )

    def deliver_steer(self, steer_id: str) -> bool:
        return self._compare_and_set(
            f"UPDATE steers SET status = '{SteerStatus.DELIVERED}' "
            f"WHERE id = ? AND status IN {_status_sql.DELIVERABLE_STEER}",
            (steer_id,),
            "the steer is pending",
        )

    def queue_steer(self, steer_id: str, turn_id: str) -> bool:
        return self._compare_and_set(
            f"UPDATE steers SET status = '{SteerStatus.QUEUED}', queued_turn_id = ? "
            f"WHERE id = ? AND status IN {_status_sql.QUEUEABLE_STEER}",
            (turn_id, steer_id),
            "the steer is pending",
        )

    def put_turn_first(self, turn_id: str, session_id: str) -> None:
        """Move the queued turn ``turn_id`` ahead of the session's other queued turns."""
        row = self._one(_FIRST_QUEUED_ORD, (session_id, turn_id))
        if row is None or row[0] is None:
            return  # no other turn waits: it is first already
        first = row[0]
        self._send(
            f"UPDATE turns SET ord = ord + 1 WHERE session_id = ? AND status = '{TurnStatus.QUEUED}' "
            "AND parent_call_id IS NULL AND id != ?",
            (session_id, turn_id),
        )
        self._send("UPDATE turns SET ord = ? WHERE id = ?", (first, turn_id))

    def cancel_queued_turn(self, turn_id: str) -> bool:
        changed = self._run(
            f"UPDATE turns SET status = '{TurnStatus.SETTLED}', outcome = 'cancelled' "
            f"WHERE id = ? AND status IN {_status_sql.CANCELLABLE_TURN}",
            (turn_id,),
        )
        return changed == 1

    def record_soft_stop(self, turn_id: str, reason: StopReason) -> bool:
        changed = self._run(
            "UPDATE turns SET soft_stop = ? "
            f"WHERE id = ? AND soft_stop IS NULL AND status IN {_status_sql.SOFT_STOPPABLE}",
            (dump_json(reason), turn_id),
        )
        return changed == 1

    def set_edited_input(self, session_id: str, call_id: str, edited: Any) -> None:
        self._send(
            "UPDATE tool_calls SET edited_input = ? WHERE session_id = ? AND call_id = ?",
            (dump_json(edited), session_id, call_id),
        )


_FIRST_QUEUED_ORD = (
    f"SELECT MIN(ord) FROM turns WHERE session_id = ? AND status != '{TurnStatus.SETTLED}' "
    f"AND status = '{TurnStatus.QUEUED}' AND parent_call_id IS NULL AND id != ?"
)
