"""The store's reads of turns and what runs in them: steps, the history and tool calls."""

from __future__ import annotations

from typing import Any

from coordinator.records import Message
from coordinator.statuses import (
    CallStatus,
    ClaimState,
    FormStatus,
    Parked,
    PermissionStatus,
    StepStatus,
    TurnStatus,
)
from coordinator.store import _history
from coordinator.store._read_base import IN_CHUNK, SqlReads, in_list
from coordinator.store._status_sql import UNFINISHED_TURN
from coordinator.store.rows import (
    CLAIM_ROW,
    INSTANCE_ROW,
    TOOL_CALL_ROW,
    TURN_ROW,
    ClaimRow,
    InstanceRow,
    StoredMessage,
    ToolCallRow,
    TurnRow,
)

_TURNS = f"SELECT {TURN_ROW.select} FROM turns"
_CALLS = f"SELECT {TOOL_CALL_ROW.select} FROM tool_calls"
# The queries every turn runs, built once (an enum formatted into a query costs a call each time).
NEXT_TURN = _TURNS + f" WHERE session_id = ? AND status != '{TurnStatus.SETTLED}' AND parent_call_id IS NULL"
_RUNNING_TURN = _TURNS + f" WHERE session_id = ? AND status = '{TurnStatus.RUNNING}'"
_RUNNING_STEPS = f"SELECT id FROM steps WHERE turn_id = ? AND status = '{StepStatus.RUNNING}' ORDER BY ord"
_RUNNING_CALLS = _CALLS + f" WHERE turn_id = ? AND status = '{CallStatus.RUNNING}' ORDER BY ord"
# One query for what four would read: in a clean stop every actor settled its own part.
_ANY_LEFT = (
    f"EXISTS (SELECT 1 FROM tool_calls WHERE turn_id = ? AND status = '{CallStatus.RUNNING}') "
    f"OR EXISTS (SELECT 1 FROM permission_requests WHERE turn_id = ? AND status = '{PermissionStatus.PENDING}') "
    f"OR EXISTS (SELECT 1 FROM forms WHERE turn_id = ? AND status = '{FormStatus.PENDING}') "
    f"OR EXISTS (SELECT 1 FROM steps WHERE turn_id = ? AND status = '{StepStatus.RUNNING}')"
)
_LEFTOVERS, _NOTHING_LEFT = f"SELECT {_ANY_LEFT}", f"NOT ({_ANY_LEFT})"
# ``parked != 0`` is the partial index's own condition (``turns_parked``): a query uses that index
# only when its WHERE says so itself.
_PARKED = "SELECT id FROM turns WHERE parked != 0 AND parked = ?"
_TURN_STATUS, _TURN_ORD = TURN_ROW.columns.index("status"), TURN_ROW.columns.index("ord")


def _queued_last(row: tuple[Any, ...]) -> tuple[bool, int]:
    return row[_TURN_STATUS] == TurnStatus.QUEUED, row[_TURN_ORD]


# The turn an interrupt stops. ``status != 'settled'`` as the index of unsettled turns says it, so
# that it is used.
_INTERRUPTIBLE = (
    f" WHERE session_id = ? AND status != '{TurnStatus.SETTLED}' "
    f"AND (status = '{TurnStatus.RUNNING}' OR (status = '{TurnStatus.SUSPENDED}' AND parked != 0)) "
    "ORDER BY ord LIMIT 1"
)
INTERRUPTIBLE_IS_RUNNING = (
    f"COALESCE((SELECT id || ' ' || status FROM turns{_INTERRUPTIBLE}), '') = ? || ' {TurnStatus.RUNNING}'"
)


def chosen_next_turn(rows: list[tuple[Any, ...]]) -> TurnRow | None:
    """The next turn among ``NEXT_TURN``'s rows: the unfinished one, else the first queued."""
    return TURN_ROW.load(min(rows, key=_queued_last)) if rows else None


class TurnReads(SqlReads):
    """Reads of turns, steps, the history and tool calls."""

    # turns ----------------------------------------------------------------------------------
    def get_turn(self, turn_id: str) -> TurnRow | None:
        return TURN_ROW.load_or_none(self._one(_TURNS + " WHERE id = ?", (turn_id,)))

    def turn_of_task_call(self, session_id: str, call_id: str) -> TurnRow | None:
        row = self._one(_TURNS + " WHERE parent_session_id = ? AND parent_call_id = ?", (session_id, call_id))
        return TURN_ROW.load_or_none(row)

    def turn_ids_of_session(self, session_id: str) -> list[str]:
        return [
            r[0] for r in self._all("SELECT id FROM turns WHERE session_id = ? ORDER BY ord", (session_id,))
        ]

    def next_turn(self, session_id: str) -> TurnRow | None:
        # A task call's turn is run by that call, never by the session's own actor.
        # The unfinished turn before the queued ones, then by ord; chosen here among the session's
        # few unsettled turns (the ``turns_unsettled`` index), read twice a turn.
        return chosen_next_turn(self._all(NEXT_TURN, (session_id,)))

    def stopping_turns(self, turn_ids: list[str]) -> list[TurnRow]:
        rows: list[tuple[Any, ...]] = []
        for start in range(0, len(turn_ids), IN_CHUNK):
            chunk = turn_ids[start : start + IN_CHUNK]
            query = _TURNS + f" WHERE status = '{TurnStatus.STOPPING}'" + in_list("id", chunk)
            rows += self._all(query, tuple(chunk))
        return [TURN_ROW.load(row) for row in rows]

    def running_turn(self, session_id: str) -> TurnRow | None:
        return TURN_ROW.load_or_none(self._one(_RUNNING_TURN, (session_id,)))

    def unfinished_turns_with_owners(
        self, me: str
    ) -> list[tuple[TurnRow, ClaimRow | None, InstanceRow | None]]:
        # One statement for what was a claim and an instance read for each turn, every second (the
        # watch); the turns whose claim ``me`` holds while it lives are not taken over: left out.
        turn = ", ".join(f"t.{column}" for column in TURN_ROW.columns)
        claim = ", ".join(f"c.{column}" for column in CLAIM_ROW.columns)
        owner = ", ".join(f"i.{column}" for column in INSTANCE_ROW.columns)
        rows = self._all(
            f"SELECT {turn}, {claim}, {owner} FROM turns t "
            "LEFT JOIN claims c ON c.session_id = t.session_id LEFT JOIN instances i ON i.id = c.owner "
            f"WHERE t.status IN {UNFINISHED_TURN} AND t.parent_call_id IS NULL "
            "AND NOT EXISTS (SELECT 1 FROM claims mine JOIN instances alive ON alive.id = mine.owner "
            f"WHERE mine.session_id = t.session_id AND mine.state = '{ClaimState.HELD}' AND mine.owner = ? "
            "AND alive.stopped = 0) "
            "ORDER BY t.rowid",
            (me,),
        )
        claim_at = len(TURN_ROW.columns)
        owner_at = claim_at + len(CLAIM_ROW.columns)
        return [
            (
                TURN_ROW.load(row[:claim_at]),
                CLAIM_ROW.load_or_none(row[claim_at:owner_at] if row[claim_at] is not None else None),
                INSTANCE_ROW.load_or_none(row[owner_at:] if row[owner_at] is not None else None),
            )
            for row in rows
        ]

    def sessions_with_queued_turns(self) -> list[str]:
        rows = self._all(
            # A claim is looked up by its session for each queued turn: a NOT IN of every claim not
            # released read every claim ever made (one a session) whenever a turn was queued.
            f"SELECT session_id FROM turns t WHERE status = '{TurnStatus.QUEUED}' AND parent_call_id IS NULL "
            "AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.session_id = t.session_id "
            f"AND c.state != '{ClaimState.RELEASED}') "
            "GROUP BY session_id ORDER BY MIN(rowid)"
        )
        return [r[0] for r in rows]

    def resume_asked_turn_ids(self) -> set[str]:
        return {r[0] for r in self._all(_PARKED, (Parked.RELEASED,))}

    def parked_turn_ids(self) -> set[str]:
        return {r[0] for r in self._all(_PARKED, (Parked.PARKED,))}

    def is_parked(self, turn_id: str) -> bool:
        return (
            self._one(f"SELECT 1 FROM turns WHERE id = ? AND parked = {Parked.PARKED}", (turn_id,))
            is not None
        )

    def parked_turn(self, session_id: str) -> TurnRow | None:
        return TURN_ROW.load_or_none(
            self._one(
                _TURNS + f" WHERE parked != 0 AND session_id = ? AND parked = {Parked.PARKED}", (session_id,)
            )
        )

    def interruptible_turn(self, session_id: str) -> TurnRow | None:
        return TURN_ROW.load_or_none(self._one(_TURNS + _INTERRUPTIBLE, (session_id,)))

    def unsettled_turn_statuses(self, session_id: str) -> list[str]:
        rows = self._all(
            f"SELECT status FROM turns WHERE session_id = ? AND status != '{TurnStatus.SETTLED}' "
            "ORDER BY ord",
            (session_id,),
        )
        return [r[0] for r in rows]

    # steps ----------------------------------------------------------------------------------
    def streamed_text(self, step_id: str) -> str:
        row = self._one("SELECT streamed_text FROM steps WHERE id = ?", (step_id,))
        return "" if row is None or row[0] is None else str(row[0])

    def running_steps(self, turn_id: str) -> list[str]:
        rows = self._all(_RUNNING_STEPS, (turn_id,))
        return [r[0] for r in rows]

    # history --------------------------------------------------------------------------------
    def history(self, session_id: str) -> list[Message]:
        return self.history_with_model_ids(session_id)[0]

    def history_with_model_ids(self, session_id: str) -> tuple[list[Message], dict[str, str | None]]:
        return _history.history_with_model_ids(self.sql, session_id, self.tool_calls_of_session(session_id))

    def history_after(
        self, session_id: str, after_ord: int
    ) -> tuple[list[StoredMessage], dict[str, str | None]]:
        return _history.history_after(self.sql, session_id, after_ord)

    # tool calls -----------------------------------------------------------------------------
    def call_id_taken(self, session_id: str, call_id: str) -> bool:
        query = "SELECT 1 FROM tool_calls WHERE session_id = ? AND call_id = ?"
        if self.sql.predicts:  # a model's call id is new in its session but for a few models
            self.sql.expect(f"NOT EXISTS ({query})", (session_id, call_id), "the call id is new")
            return False
        return self._one(query, (session_id, call_id)) is not None

    def get_tool_call(self, session_id: str, call_id: str) -> ToolCallRow | None:
        row = self._one(_CALLS + " WHERE session_id = ? AND call_id = ?", (session_id, call_id))
        return TOOL_CALL_ROW.load_or_none(row)

    def tool_calls_of_session(self, session_id: str) -> list[ToolCallRow]:
        rows = self._all(_CALLS + " WHERE session_id = ? ORDER BY rowid", (session_id,))
        return [TOOL_CALL_ROW.load(r) for r in rows]

    def tool_calls_of_turn(self, turn_id: str) -> list[ToolCallRow]:
        return [
            TOOL_CALL_ROW.load(r) for r in self._all(_CALLS + " WHERE turn_id = ? ORDER BY ord", (turn_id,))
        ]

    def running_calls_of_turn(self, turn_id: str) -> list[ToolCallRow]:
        return [TOOL_CALL_ROW.load(r) for r in self._all(_RUNNING_CALLS, (turn_id,))]

    def has_leftovers(self, turn_id: str) -> bool:
        if self.sql.predicts:  # in a clean stop every child settled itself, in the same transaction
            self.sql.expect(_NOTHING_LEFT, (turn_id,) * 4, "nothing of the turn is left")
            return False
        row = self._one(_LEFTOVERS, (turn_id,) * 4)
        return row is not None and bool(row[0])

    def tool_started(self, session_id: str, call_id: str) -> bool:
        row = self._one(
            "SELECT tool_started FROM tool_calls WHERE session_id = ? AND call_id = ?", (session_id, call_id)
        )
        return row is not None and bool(row[0])
