"""The SQL of the SQLite store, as synchronous methods over one connection.

``SqliteStore.read`` runs them outside a transaction (each statement sees a committed snapshot);
``SqliteTx`` runs them inside one.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import apsw

from coordinator import errors, wire
from coordinator.events import Event
from coordinator.reasons import ParentLink, StopReason, TextStatus
from coordinator.records import (
    ClaimView,
    Form,
    Message,
    Partial,
    PermissionRequest,
    Question,
    Rule,
    Session,
    TextPart,
    ToolError,
    ToolPart,
)
from coordinator.store._errors import mapped
from coordinator.store.rows import (
    TOOL_CALL_COLUMNS,
    TURN_COLUMNS,
    ClaimRow,
    InstanceRow,
    StoredMessage,
    ToolCallRow,
    TurnRow,
    WaitRow,
    dump_json,
    dump_reason,
    load_json,
    load_reason,
)

_SESSION_SELECT = """
    SELECT s.id, s.title, s.last_outcome, s.created_at, c.owner, c.state, c.since,
           s.parent_session_id, s.parent_call_id
    FROM sessions s LEFT JOIN claims c ON c.session_id = s.id
"""


def _session_from_row(row: tuple[Any, ...]) -> Session:
    id, title, last_outcome, created_at, owner, state, since, parent_session_id, parent_call_id = row
    held = state in ("held", "suspended")
    status = {"held": "busy", "suspended": "suspended"}.get(state or "", "idle")
    return Session(
        id=id,
        title=title,
        status=status,  # type: ignore[arg-type]
        claim=ClaimView(owner=owner, since=since) if held else None,
        last_outcome=last_outcome,
        created_at=created_at,
        parent=None
        if parent_session_id is None
        else ParentLink(session_id=parent_session_id, call_id=parent_call_id),
    )


_PERMISSION_COLUMNS = "id, session_id, call_id, action, resource, status, decision, reason, created_at"


def _permission_from_row(row: tuple[Any, ...]) -> PermissionRequest:
    id, session_id, call_id, action, resource, status, decision, reason, created_at = row
    return PermissionRequest(
        id=id,
        session_id=session_id,
        call_id=call_id,
        action=action,
        resource=resource,
        status=status,
        decision=decision,
        reason=load_reason(reason),
        created_at=created_at,
    )


_FORM_COLUMNS = "id, session_id, call_id, questions, status, answers, reason, created_at"


def _form_from_row(row: tuple[Any, ...]) -> Form:
    id, session_id, call_id, questions, status, answers, reason, created_at = row
    return Form(
        id=id,
        session_id=session_id,
        call_id=call_id,
        questions=wire.structure(json.loads(questions), list[Question]),
        status=status,
        answers=load_json(answers),
        reason=load_reason(reason),
        created_at=created_at,
    )


MAX_SEQ = 2**63 - 1
"""The largest seq SQLite can hold (a signed 64-bit integer)."""


class Queries:
    """Reads and writes of every table. No method here commits: the caller owns the transaction."""

    def __init__(self, db: apsw.Connection) -> None:
        self.db = db

    def _one(self, sql: str, args: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
        rows = self._all(sql, args)
        return rows[0] if rows else None

    def _all(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return self.db.execute(sql, args).fetchall()
        except apsw.Error as exc:  # a page damaged after the open's check, a busy reader...
            raise mapped(exc) from exc

    def _next_ord(self, table: str, where: str, args: tuple[Any, ...]) -> int:
        row = self._one(f"SELECT COALESCE(MAX(ord), -1) + 1 FROM {table} WHERE {where}", args)
        assert row is not None
        return int(row[0])

    # sessions -------------------------------------------------------------------------------
    def insert_session(
        self, session_id: str, title: str, created_at: str, parent: ParentLink | None = None
    ) -> None:
        ord = self._next_ord("sessions", "1", ())
        self.db.execute(
            "INSERT INTO sessions(id, title, last_outcome, created_at, ord, parent_session_id, "
            "parent_call_id) VALUES (?, ?, NULL, ?, ?, ?, ?)",
            (
                session_id,
                title,
                created_at,
                ord,
                None if parent is None else parent.session_id,
                None if parent is None else parent.call_id,
            ),
        )

    def descendants(self, session_id: str) -> list[str]:
        """The ids of the session's sub-agent sessions at every depth (not the session itself)."""
        rows = self._all(
            "WITH RECURSIVE tree(id) AS (SELECT id FROM sessions WHERE parent_session_id = ? "
            "UNION SELECT s.id FROM sessions s JOIN tree t ON s.parent_session_id = t.id) "
            "SELECT id FROM tree",
            (session_id,),
        )
        return [r[0] for r in rows]

    def session_depth(self, session_id: str) -> int:
        """How many parents the session has: 0 for a top-level session, 1 for its sub-agents..."""
        row = self._one(
            "WITH RECURSIVE up(id, depth) AS (SELECT parent_session_id, 0 FROM sessions WHERE id = ? "
            "UNION ALL SELECT s.parent_session_id, up.depth + 1 FROM sessions s JOIN up ON s.id = up.id) "
            "SELECT MAX(depth) FROM up WHERE id IS NOT NULL",
            (session_id,),
        )
        return 0 if row is None or row[0] is None else int(row[0]) + 1

    def get_session(self, session_id: str) -> Session | None:
        row = self._one(_SESSION_SELECT + " WHERE s.id = ?", (session_id,))
        return None if row is None else _session_from_row(row)

    def list_sessions(self) -> list[Session]:
        return [_session_from_row(r) for r in self._all(_SESSION_SELECT + " ORDER BY s.ord")]

    def session_page(self, limit: int, before: str | None) -> list[Session] | None:
        """At most ``limit`` sessions, newest first, older than ``before``; None if ``before`` is unknown."""
        if before is None:
            rows = self._all(_SESSION_SELECT + " ORDER BY s.ord DESC LIMIT ?", (limit,))
        else:
            cursor = self._one("SELECT ord FROM sessions WHERE id = ?", (before,))
            if cursor is None:
                return None
            rows = self._all(
                _SESSION_SELECT + " WHERE s.ord < ? ORDER BY s.ord DESC LIMIT ?", (cursor[0], limit)
            )
        return [_session_from_row(r) for r in rows]

    def set_last_outcome(self, session_id: str, outcome: str) -> None:
        self.db.execute("UPDATE sessions SET last_outcome = ? WHERE id = ?", (outcome, session_id))

    # turns ----------------------------------------------------------------------------------
    def insert_turn(
        self, turn_id: str, session_id: str, prompt: str, created_at: str, task: ParentLink | None = None
    ) -> None:
        """A queued turn; ``task``: the task call that runs it (a sub-agent's turn, run by that call)."""
        ord = self._next_ord("turns", "session_id = ?", (session_id,))
        self.db.execute(
            "INSERT INTO turns(id, session_id, ord, prompt, status, created_at, parent_session_id, "
            "parent_call_id) VALUES (?, ?, ?, ?, 'queued', ?, ?, ?)",
            (
                turn_id,
                session_id,
                ord,
                prompt,
                created_at,
                None if task is None else task.session_id,
                None if task is None else task.call_id,
            ),
        )

    def turn_of_task_call(self, session_id: str, call_id: str) -> TurnRow | None:
        """The sub-agent turn the task call ``call_id`` of session ``session_id`` runs, if it made one."""
        row = self._one(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE parent_session_id = ? AND parent_call_id = ?",
            (session_id, call_id),
        )
        return None if row is None else TurnRow.from_row(row)

    def get_turn(self, turn_id: str) -> TurnRow | None:
        row = self._one(f"SELECT {TURN_COLUMNS} FROM turns WHERE id = ?", (turn_id,))
        return None if row is None else TurnRow.from_row(row)

    def turn_ids_of_session(self, session_id: str) -> list[str]:
        """Every turn of the session, queued ones included, in prompt order."""
        return [
            r[0] for r in self._all("SELECT id FROM turns WHERE session_id = ? ORDER BY ord", (session_id,))
        ]

    def next_turn(self, session_id: str) -> TurnRow | None:
        """The turn the session should run next: one left unfinished first, then the oldest queued."""
        # A task call's turn is run by that call, never by the session's own actor.
        row = self._one(
            f"""SELECT {TURN_COLUMNS} FROM turns WHERE session_id = ? AND status != 'settled'
                AND parent_call_id IS NULL ORDER BY status = 'queued', ord LIMIT 1""",
            (session_id,),
        )
        return None if row is None else TurnRow.from_row(row)

    def running_turn(self, session_id: str) -> TurnRow | None:
        row = self._one(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE session_id = ? AND status = 'running'", (session_id,)
        )
        return None if row is None else TurnRow.from_row(row)

    def unfinished_turns(self) -> list[TurnRow]:
        """Turns that a previous process left running, stopping or suspended, oldest first.

        A task call's turn is not among them: its parent's resume runs it, inside that call.
        """
        rows = self._all(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE status IN ('running', 'stopping', 'suspended') "
            "AND parent_call_id IS NULL ORDER BY rowid"
        )
        return [TurnRow.from_row(r) for r in rows]

    def sessions_with_queued_turns(self) -> list[str]:
        """Sessions with a queued turn and no held or suspended claim (those run it themselves)."""
        rows = self._all(
            "SELECT DISTINCT session_id FROM turns WHERE status = 'queued' AND parent_call_id IS NULL "
            "AND session_id NOT IN "
            "(SELECT session_id FROM claims WHERE state != 'released') ORDER BY rowid"
        )
        return [r[0] for r in rows]

    def set_turn_status(self, turn_id: str, status: str) -> None:
        self.db.execute("UPDATE turns SET status = ? WHERE id = ?", (status, turn_id))

    def record_stop_intent(self, turn_id: str, reason: StopReason) -> bool:
        """Durable intent: mark a running (or suspended) turn as stopping with ``reason``.

        False, changing nothing, if the turn is stopping or settled already: the first stop wins. A
        suspended turn takes the intent too (a reject of a request its shutdown kept), so that the next
        start settles it as that stop instead of resuming it.
        """
        self.db.execute(
            "UPDATE turns SET status = 'stopping', stop_reason = ?, parked = 0 "
            "WHERE id = ? AND status IN ('running', 'suspended')",
            (dump_reason(reason), turn_id),
        )
        return self.db.changes() == 1

    def settle_turn(self, turn_id: str, status: str, reason: StopReason | None, outcome: str | None) -> None:
        self.db.execute(
            "UPDATE turns SET status = ?, stop_reason = ?, outcome = ? WHERE id = ?",
            (status, dump_reason(reason), outcome, turn_id),
        )

    def mark_resumed(self, turn_id: str, after: str) -> bool:
        """Count a resume of a suspended or crashed turn. False if a stop was decided meanwhile."""
        self.db.execute(
            "UPDATE turns SET status = 'running', resumes = resumes + 1, suspended_after = ?, parked = 0 "
            "WHERE id = ? AND status IN ('running', 'suspended')",
            (after, turn_id),
        )
        return self.db.changes() == 1

    # Parked turns (``[server] resume = "manual"``, contract section 14): suspended or crashed turns a
    # start left for ``POST /api/session/{sid}/resume``; ``turns.parked`` keeps them so across restarts.
    # 0: not parked; 1: parked; 2: a resume was asked and the turn awaits its takeover: no one parks it
    # again (a watch that read it unparked before the resume), and any instance may take it over.
    def park_turn(self, turn_id: str) -> bool:
        """Park an unfinished turn that is not stopping. False if it moved on, is parked already, or a
        resume was asked for it meanwhile."""
        self.db.execute(
            "UPDATE turns SET parked = 1 WHERE id = ? AND parked = 0 AND status IN ('running', 'suspended')",
            (turn_id,),
        )
        return self.db.changes() == 1

    def release_parked(self, turn_id: str) -> bool:
        """Ask the resume of a parked turn (compare-and-set). False if it is not parked (any more)."""
        self.db.execute("UPDATE turns SET parked = 2 WHERE id = ? AND parked = 1", (turn_id,))
        return self.db.changes() == 1

    def resume_asked_turn_ids(self) -> set[str]:
        """Turns released from parking whose takeover has not happened yet."""
        return {r[0] for r in self._all("SELECT id FROM turns WHERE parked = 2")}

    def parked_turn_ids(self) -> set[str]:
        return {r[0] for r in self._all("SELECT id FROM turns WHERE parked = 1")}

    def is_parked(self, turn_id: str) -> bool:
        return self._one("SELECT 1 FROM turns WHERE id = ? AND parked = 1", (turn_id,)) is not None

    def parked_turn(self, session_id: str) -> TurnRow | None:
        row = self._one(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE session_id = ? AND parked = 1", (session_id,)
        )
        return None if row is None else TurnRow.from_row(row)

    def interruptible_turn(self, session_id: str) -> TurnRow | None:
        """The turn an interrupt stops: the running one, else a parked one (its claim suspended)."""
        row = self._one(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE session_id = ? "
            "AND (status = 'running' OR (status = 'suspended' AND parked != 0)) ORDER BY ord LIMIT 1",
            (session_id,),
        )
        return None if row is None else TurnRow.from_row(row)

    def suspend_dead_claim(self, session_id: str, dead_owner: str | None) -> bool:
        """Compare-and-set: the claim a dead ``dead_owner`` holds becomes suspended (owner kept, for the
        record; the epoch unchanged: the next owner's takeover raises it). False if another took it."""
        self.db.execute(
            "UPDATE claims SET state = 'suspended' WHERE session_id = ? AND state = 'held' AND owner IS ?",
            (session_id, dead_owner),
        )
        return self.db.changes() == 1

    # steps ----------------------------------------------------------------------------------
    def insert_step(self, step_id: str, session_id: str, turn_id: str, created_at: str) -> int:
        """Insert a running step; returns the session's 0-based model request index."""
        index = self._one("SELECT COUNT(*) FROM steps WHERE session_id = ?", (session_id,))
        ord = self._next_ord("steps", "turn_id = ?", (turn_id,))
        self.db.execute(
            "INSERT INTO steps(id, session_id, turn_id, ord, status, created_at) VALUES (?, ?, ?, ?, 'running', ?)",
            (step_id, session_id, turn_id, ord, created_at),
        )
        assert index is not None
        return int(index[0])

    def settle_step(self, step_id: str, status: str, reason: StopReason | None) -> None:
        self.db.execute(
            "UPDATE steps SET status = ?, reason = ? WHERE id = ?", (status, dump_reason(reason), step_id)
        )

    def save_streamed_text(self, step_id: str, text: str) -> None:
        self.db.execute("UPDATE steps SET streamed_text = ? WHERE id = ?", (text, step_id))

    def streamed_text(self, step_id: str) -> str:
        """The text a step had streamed at its last save ("" when none was saved)."""
        row = self._one("SELECT streamed_text FROM steps WHERE id = ?", (step_id,))
        return "" if row is None or row[0] is None else str(row[0])

    def running_steps(self, turn_id: str) -> list[str]:
        rows = self._all(
            "SELECT id FROM steps WHERE turn_id = ? AND status = 'running' ORDER BY ord", (turn_id,)
        )
        return [r[0] for r in rows]

    # messages -------------------------------------------------------------------------------
    def insert_message(
        self, message_id: str, session_id: str, turn_id: str, role: str, created_at: str
    ) -> None:
        ord = self._next_ord("messages", "session_id = ?", (session_id,))
        self.db.execute(
            "INSERT INTO messages(id, session_id, turn_id, role, ord, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (message_id, session_id, turn_id, role, ord, created_at),
        )

    def add_text_part(self, message_id: str, text: str, status: TextStatus = "complete") -> None:
        ord = self._next_ord("parts", "message_id = ?", (message_id,))
        self.db.execute(
            "INSERT INTO parts(message_id, ord, kind, text, status) VALUES (?, ?, 'text', ?, ?)",
            (message_id, ord, text, status),
        )

    def add_tool_part(self, message_id: str, call_id: str) -> None:
        ord = self._next_ord("parts", "message_id = ?", (message_id,))
        self.db.execute(
            "INSERT INTO parts(message_id, ord, kind, call_id) VALUES (?, ?, 'tool', ?)",
            (message_id, ord, call_id),
        )

    def history(self, session_id: str) -> list[Message]:
        """The session's messages with their parts, tool parts joined with their calls."""
        return self.history_with_model_ids(session_id)[0]

    def history_with_model_ids(self, session_id: str) -> tuple[list[Message], dict[str, str | None]]:
        """The history, and each tool call's model id (what the model is sent back), in two reads.

        One join reads every message with its parts in order (not a query per message). A step
        reads only what came after its session's settled turns (``history_after``); this is the
        whole history from scratch.
        """
        calls = {c.call_id: c for c in self.tool_calls_of_session(session_id)}
        rows = self._all(
            "SELECT m.id, m.turn_id, m.role, m.created_at, p.kind, p.text, p.call_id, p.status "
            "FROM messages m LEFT JOIN parts p ON p.message_id = m.id "
            "WHERE m.session_id = ? ORDER BY m.ord, p.ord",
            (session_id,),
        )
        messages = [message for message, _ in _messages(session_id, rows, calls)]
        return messages, {call.call_id: call.model_call_id for call in calls.values()}

    def history_after(
        self, session_id: str, after_ord: int
    ) -> tuple[list[StoredMessage], dict[str, str | None]]:
        """The session's messages whose ``ord`` is above ``after_ord``, each with its ord and whether
        its turn is settled, and the model ids of their tool calls: the tail of ``history``.

        Reads only those messages, their parts and their calls, so a step's read does not grow with
        the session's settled turns (``coordinator/models/history.py``, ``Conversations``).
        """
        calls = {
            c.call_id: c
            for c in (
                ToolCallRow.from_row(row)
                for row in self._all(
                    f"SELECT {_CALL_COLUMNS_OF_C} FROM messages m JOIN parts p ON p.message_id = m.id "
                    "JOIN tool_calls c ON c.session_id = m.session_id AND c.call_id = p.call_id "
                    "WHERE m.session_id = ? AND m.ord > ? AND p.kind = 'tool'",
                    (session_id, after_ord),
                )
            )
        }
        rows = self._all(
            "SELECT m.id, m.turn_id, m.role, m.created_at, p.kind, p.text, p.call_id, p.status, "
            "m.ord, t.status = 'settled' "
            "FROM messages m JOIN turns t ON t.id = m.turn_id LEFT JOIN parts p ON p.message_id = m.id "
            "WHERE m.session_id = ? AND m.ord > ? ORDER BY m.ord, p.ord",
            (session_id, after_ord),
        )
        stored = [
            StoredMessage(ord=extra[0], turn_settled=bool(extra[1]), message=message)
            for message, extra in _messages(session_id, rows, calls)
        ]
        return stored, {call.call_id: call.model_call_id for call in calls.values()}

    # tool calls -----------------------------------------------------------------------------
    def insert_tool_call(self, call: ToolCallRow, created_at: str) -> None:
        ord = self._next_ord("tool_calls", "turn_id = ?", (call.turn_id,))
        self.db.execute(
            f"INSERT INTO tool_calls({TOOL_CALL_COLUMNS}, ord, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL, ?, ?)",
            (
                call.session_id,
                call.call_id,
                call.turn_id,
                call.step_id,
                call.parent_call_id,
                call.model_call_id,
                call.name,
                json.dumps(call.input),
                call.status,
                ord,
                created_at,
            ),
        )

    def call_id_taken(self, session_id: str, call_id: str) -> bool:
        row = self._one(
            "SELECT 1 FROM tool_calls WHERE session_id = ? AND call_id = ?", (session_id, call_id)
        )
        return row is not None

    def get_tool_call(self, session_id: str, call_id: str) -> ToolCallRow | None:
        row = self._one(
            f"SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE session_id = ? AND call_id = ?",
            (session_id, call_id),
        )
        return None if row is None else ToolCallRow.from_row(row)

    def tool_calls_of_session(self, session_id: str) -> list[ToolCallRow]:
        rows = self._all(
            f"SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE session_id = ? ORDER BY rowid", (session_id,)
        )
        return [ToolCallRow.from_row(r) for r in rows]

    def tool_calls_of_turn(self, turn_id: str) -> list[ToolCallRow]:
        rows = self._all(
            f"SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE turn_id = ? ORDER BY ord", (turn_id,)
        )
        return [ToolCallRow.from_row(r) for r in rows]

    def settle_tool_call(
        self,
        session_id: str,
        call_id: str,
        *,
        output: Any = None,
        error: ToolError | None = None,
        partial: Partial | None = None,
    ) -> bool:
        """Settle a running call as succeeded (no ``error``) or failed. False if already settled."""
        status = "failed" if error is not None else "succeeded"
        self.db.execute(
            "UPDATE tool_calls SET status = ?, output = ?, error = ?, partial = ? "
            "WHERE session_id = ? AND call_id = ? AND status = 'running'",
            (
                status,
                None if error is not None else json.dumps(output),
                dump_json(error),
                dump_json(partial),
                session_id,
                call_id,
            ),
        )
        return self.db.changes() == 1

    def set_process_group(self, session_id: str, call_id: str, group: Any) -> None:
        self.db.execute(
            "UPDATE tool_calls SET process_group = ? WHERE session_id = ? AND call_id = ?",
            (dump_json(group), session_id, call_id),
        )

    def mark_tool_started(self, session_id: str, call_id: str) -> None:
        self.db.execute(
            "UPDATE tool_calls SET tool_started = 1 WHERE session_id = ? AND call_id = ?",
            (session_id, call_id),
        )

    def tool_started(self, session_id: str, call_id: str) -> bool:
        row = self._one(
            "SELECT tool_started FROM tool_calls WHERE session_id = ? AND call_id = ?", (session_id, call_id)
        )
        return row is not None and bool(row[0])

    def process_group_of(self, session_id: str, call_id: str) -> Any:
        row = self._one(
            "SELECT process_group FROM tool_calls WHERE session_id = ? AND call_id = ?", (session_id, call_id)
        )
        return None if row is None else load_json(row[0])

    def set_tool_progress(self, session_id: str, call_id: str, progress: Any) -> None:
        self.db.execute(
            "UPDATE tool_calls SET progress = ? WHERE session_id = ? AND call_id = ?",
            (json.dumps(progress), session_id, call_id),
        )

    # claims and instances -------------------------------------------------------------------
    def get_claim(self, session_id: str) -> ClaimRow | None:
        row = self._one(
            "SELECT session_id, owner, epoch, state, since FROM claims WHERE session_id = ?", (session_id,)
        )
        return None if row is None else ClaimRow.from_row(row)

    def acquire_claim(self, session_id: str, owner: str, since: str, *, takeover_from: str | None) -> int:
        """Compare-and-set: take the claim if released, or (``takeover_from``) held by that owner.

        Returns the new epoch, or 0 when another owner holds the claim.
        """
        self.db.execute(
            "INSERT OR IGNORE INTO claims(session_id, owner, epoch, state, since) VALUES (?, NULL, 0, 'released', NULL)",
            (session_id,),
        )
        self.db.execute(
            "UPDATE claims SET owner = ?, epoch = epoch + 1, state = 'held', since = ? "
            "WHERE session_id = ? AND (state = 'released' OR owner IS ?)",
            (owner, since, session_id, takeover_from),
        )
        if self.db.changes() != 1:
            return 0
        claim = self.get_claim(session_id)
        assert claim is not None
        return claim.epoch

    def fence(self, session_id: str, owner: str, epoch: int) -> None:
        """Raise ``Fenced`` unless ``owner`` still holds the claim at ``epoch``."""
        # One indexed probe, no record built: every write of a turn runs this.
        held = self._one(
            "SELECT 1 FROM claims WHERE session_id = ? AND owner = ? AND epoch = ? AND state = 'held'",
            (session_id, owner, epoch),
        )
        if held is None:
            raise errors.Fenced(session_id=session_id, epoch=epoch)

    def set_claim_state(self, session_id: str, state: str) -> None:
        """``released`` (the owner is cleared) or ``suspended`` (the owner is kept for the record)."""
        if state == "released":
            self.db.execute(
                "UPDATE claims SET state = 'released', owner = NULL, since = NULL WHERE session_id = ?",
                (session_id,),
            )
        else:
            self.db.execute("UPDATE claims SET state = ? WHERE session_id = ?", (state, session_id))

    def claims_in_state(self, state: str) -> list[ClaimRow]:
        rows = self._all(
            "SELECT session_id, owner, epoch, state, since FROM claims WHERE state = ?", (state,)
        )
        return [ClaimRow.from_row(r) for r in rows]

    def register_instance(self, instance: InstanceRow, started_at: str) -> None:
        self.db.execute(
            "INSERT INTO instances(id, host, pid, boot_id, started_at, heartbeat, stopped) VALUES (?, ?, ?, ?, ?, ?, 0)",
            (instance.id, instance.host, instance.pid, instance.boot_id, started_at, instance.heartbeat),
        )

    def beat(self, instance_id: str, heartbeat: float) -> None:
        self.db.execute("UPDATE instances SET heartbeat = ? WHERE id = ?", (heartbeat, instance_id))

    def mark_instance_stopped(self, instance_id: str) -> None:
        self.db.execute("UPDATE instances SET stopped = 1 WHERE id = ?", (instance_id,))

    def get_instance(self, instance_id: str) -> InstanceRow | None:
        row = self._one(
            "SELECT id, host, pid, boot_id, heartbeat, stopped FROM instances WHERE id = ?", (instance_id,)
        )
        return None if row is None else InstanceRow.from_row(row)

    # permission requests and rules ----------------------------------------------------------
    def insert_permission(self, request: PermissionRequest, turn_id: str, deadline_at: float | None) -> None:
        ord = self._next_ord("permission_requests", "1", ())
        self.db.execute(
            "INSERT INTO permission_requests(id, session_id, turn_id, call_id, action, resource, status, "
            "created_at, deadline_at, ord) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
            (
                request.id,
                request.session_id,
                turn_id,
                request.call_id,
                request.action,
                request.resource,
                request.created_at,
                deadline_at,
                ord,
            ),
        )

    def get_permission(self, request_id: str) -> PermissionRequest | None:
        row = self._one(f"SELECT {_PERMISSION_COLUMNS} FROM permission_requests WHERE id = ?", (request_id,))
        return None if row is None else _permission_from_row(row)

    def permission_wait_row(self, request_id: str) -> WaitRow | None:
        row = self._one(
            "SELECT turn_id, deadline_at, message FROM permission_requests WHERE id = ?", (request_id,)
        )
        return None if row is None else WaitRow(turn_id=row[0], deadline_at=row[1], message=row[2])

    def pending_permissions(
        self, session_id: str | None = None, turn_id: str | None = None, session_ids: list[str] | None = None
    ) -> list[PermissionRequest]:
        """Pending requests, in the order they were asked; of one session, of several, of one turn."""
        sql = f"SELECT {_PERMISSION_COLUMNS} FROM permission_requests WHERE status = 'pending'"
        args: tuple[Any, ...] = ()
        if session_id is not None:
            sql, args = sql + " AND session_id = ?", (*args, session_id)
        if session_ids is not None:
            sql, args = sql + _in("session_id", session_ids), (*args, *session_ids)
        if turn_id is not None:
            sql, args = sql + " AND turn_id = ?", (*args, turn_id)
        return [_permission_from_row(r) for r in self._all(sql + " ORDER BY ord", args)]

    def pending_permission_of_call(self, session_id: str, call_id: str) -> PermissionRequest | None:
        row = self._one(
            f"SELECT {_PERMISSION_COLUMNS} FROM permission_requests "
            "WHERE session_id = ? AND call_id = ? AND status = 'pending'",
            (session_id, call_id),
        )
        return None if row is None else _permission_from_row(row)

    def latest_permission_of_call(self, session_id: str, call_id: str) -> PermissionRequest | None:
        """The call's last permission request, whatever its status."""
        row = self._one(
            f"SELECT {_PERMISSION_COLUMNS} FROM permission_requests "
            "WHERE session_id = ? AND call_id = ? ORDER BY ord DESC LIMIT 1",
            (session_id, call_id),
        )
        return None if row is None else _permission_from_row(row)

    def reply_permission(self, request_id: str, decision: str, message: str | None) -> bool:
        self.db.execute(
            "UPDATE permission_requests SET status = 'replied', decision = ?, message = ? "
            "WHERE id = ? AND status = 'pending'",
            (decision, message, request_id),
        )
        return self.db.changes() == 1

    def revoke_permission(self, request_id: str, reason: StopReason) -> bool:
        self.db.execute(
            "UPDATE permission_requests SET status = 'revoked', reason = ? WHERE id = ? AND status = 'pending'",
            (dump_reason(reason), request_id),
        )
        return self.db.changes() == 1

    def session_rules(self, session_id: str) -> list[Rule]:
        rows = self._all(
            "SELECT action, resource, effect FROM session_rules WHERE session_id = ? ORDER BY ord",
            (session_id,),
        )
        return [Rule(action=a, resource=r, effect=e) for a, r, e in rows]

    def add_session_rule(self, session_id: str, rule: Rule) -> None:
        ord = self._next_ord("session_rules", "session_id = ?", (session_id,))
        self.db.execute(
            "INSERT INTO session_rules(session_id, ord, action, resource, effect) VALUES (?, ?, ?, ?, ?)",
            (session_id, ord, rule.action, rule.resource, rule.effect),
        )

    # forms ----------------------------------------------------------------------------------
    def insert_form(self, form: Form, turn_id: str, deadline_at: float | None) -> None:
        ord = self._next_ord("forms", "1", ())
        self.db.execute(
            "INSERT INTO forms(id, session_id, turn_id, call_id, questions, status, created_at, deadline_at, ord) "
            "VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
            (
                form.id,
                form.session_id,
                turn_id,
                form.call_id,
                json.dumps(wire.unstructure(form.questions)),
                form.created_at,
                deadline_at,
                ord,
            ),
        )

    def get_form(self, form_id: str) -> Form | None:
        row = self._one(f"SELECT {_FORM_COLUMNS} FROM forms WHERE id = ?", (form_id,))
        return None if row is None else _form_from_row(row)

    def form_wait_row(self, form_id: str) -> WaitRow | None:
        row = self._one("SELECT turn_id, deadline_at, message FROM forms WHERE id = ?", (form_id,))
        return None if row is None else WaitRow(turn_id=row[0], deadline_at=row[1], message=row[2])

    def pending_forms(
        self, session_id: str | None = None, turn_id: str | None = None, session_ids: list[str] | None = None
    ) -> list[Form]:
        sql = f"SELECT {_FORM_COLUMNS} FROM forms WHERE status = 'pending'"
        args: tuple[Any, ...] = ()
        if session_id is not None:
            sql, args = sql + " AND session_id = ?", (*args, session_id)
        if session_ids is not None:
            sql, args = sql + _in("session_id", session_ids), (*args, *session_ids)
        if turn_id is not None:
            sql, args = sql + " AND turn_id = ?", (*args, turn_id)
        return [_form_from_row(r) for r in self._all(sql + " ORDER BY ord", args)]

    def pending_form_of_call(self, session_id: str, call_id: str) -> Form | None:
        row = self._one(
            f"SELECT {_FORM_COLUMNS} FROM forms WHERE session_id = ? AND call_id = ? AND status = 'pending'",
            (session_id, call_id),
        )
        return None if row is None else _form_from_row(row)

    def latest_form_of_call(self, session_id: str, call_id: str) -> Form | None:
        """The call's last form, whatever its status."""
        row = self._one(
            f"SELECT {_FORM_COLUMNS} FROM forms WHERE session_id = ? AND call_id = ? ORDER BY ord DESC LIMIT 1",
            (session_id, call_id),
        )
        return None if row is None else _form_from_row(row)

    def settle_form(
        self,
        form_id: str,
        status: str,
        *,
        answers: dict[str, str] | None = None,
        message: str | None = None,
        reason: StopReason | None = None,
    ) -> bool:
        self.db.execute(
            "UPDATE forms SET status = ?, answers = ?, message = ?, reason = ? WHERE id = ? AND status = 'pending'",
            (status, None if answers is None else json.dumps(answers), message, dump_reason(reason), form_id),
        )
        return self.db.changes() == 1

    # events ---------------------------------------------------------------------------------
    def events_after(
        self, after: int, session_id: str | None = None, limit: int = 500, upto: int | None = None
    ) -> list[Event]:
        """Events with ``after < seq <= upto`` (of one session, or all), in seq order, at most ``limit``."""
        high = MAX_SEQ if upto is None else upto
        if session_id is None:
            rows = self._all(
                "SELECT seq, type, session_id, at, payload FROM events WHERE seq > ? AND seq <= ? "
                "ORDER BY seq LIMIT ?",
                (after, high, limit),
            )
        else:
            rows = self._all(
                "SELECT seq, type, session_id, at, payload FROM events WHERE session_id = ? AND seq > ? "
                "AND seq <= ? ORDER BY seq LIMIT ?",
                (session_id, after, high, limit),
            )
        return [
            Event(seq=seq, type=type, session_id=sid, at=at, payload=json.loads(payload))
            for seq, type, sid, at, payload in rows
        ]

    def logged_lines(self, session_id: str, call_id: str) -> list[str]:
        """The lines a call's script printed, from its ``session.tool.progress`` events."""
        rows = self._all(
            "SELECT json_extract(payload, '$.log') FROM events WHERE session_id = ? "
            "AND type = 'session.tool.progress' AND json_extract(payload, '$.call_id') = ? "
            "AND json_extract(payload, '$.log') IS NOT NULL ORDER BY seq",
            (session_id, call_id),
        )
        return [r[0] for r in rows]

    def last_seq(self) -> int:
        """The highest seq ever given, even if its event was deleted since (a deleted session's,
        or one retention pruned): ``sqlite_sequence`` keeps it for the ``AUTOINCREMENT`` column."""
        row = self._one(
            "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), "
            "COALESCE((SELECT MAX(seq) FROM events), 0))"
        )
        assert row is not None
        return int(row[0])

    def page_counts(self) -> tuple[int, int]:
        """The database's free pages and all its pages."""
        free = self._one("PRAGMA freelist_count")
        total = self._one("PRAGMA page_count")
        assert free is not None and total is not None
        return int(free[0]), int(total[0])

    def event_horizon(self) -> int:
        """The highest seq retention deleted (0 when it deleted none): a replay from below it has lost
        events and starts with ``stream.truncated``."""
        row = self._one("SELECT CAST(value AS INTEGER) FROM store_meta WHERE key = 'event_horizon'")
        return 0 if row is None else int(row[0])

    def oldest_seq_after(self, after: int) -> int:
        """The seq of the oldest kept event after ``after`` (of any session); the next seq to be given
        when there is none."""
        row = self._one("SELECT MIN(seq) FROM events WHERE seq > ?", (after,))
        return self.last_seq() + 1 if row is None or row[0] is None else int(row[0])

    def unsettled_turn_statuses(self, session_id: str) -> list[str]:
        """The statuses of the session's turns that are queued, running, stopping or suspended."""
        rows = self._all(
            "SELECT status FROM turns WHERE session_id = ? AND status != 'settled' ORDER BY ord",
            (session_id,),
        )
        return [r[0] for r in rows]


_CALL_COLUMNS_OF_C = ", ".join(f"c.{column.strip()}" for column in TOOL_CALL_COLUMNS.split(","))


def _messages(
    session_id: str, rows: list[tuple[Any, ...]], calls: dict[str, ToolCallRow]
) -> Iterator[tuple[Message, tuple[Any, ...]]]:
    """Messages from rows of a message joined with its parts, in order (``id, turn_id, role,
    created_at, kind, text, call_id, status``, then any columns of the message's own, returned with it)."""
    for message_id, group in itertools.groupby(rows, key=lambda row: row[0]):
        first, *rest = group
        _, turn_id, role, created_at = first[:4]
        parts: list[TextPart | ToolPart] = [
            TextPart(text=text, status=status) if kind == "text" else _tool_part(calls[call_id])
            for kind, text, call_id, status in (row[4:8] for row in (first, *rest))
            if kind is not None  # a message without parts joins one row of NULLs
        ]
        message = Message(
            id=message_id,
            session_id=session_id,
            turn_id=turn_id,
            role=role,
            parts=parts,
            created_at=created_at,
        )
        yield message, first[8:]


def _in(column: str, values: list[str]) -> str:
    """`` AND column IN (?, ...)`` for ``values`` (never empty: a session and its descendants)."""
    return f" AND {column} IN ({', '.join('?' for _ in values)})"


def _tool_part(call: ToolCallRow) -> ToolPart:
    state = call.status if call.status in ("succeeded", "failed") else "running"
    return ToolPart(
        call_id=call.call_id,
        name=call.name,
        input=call.input,
        state=state,  # type: ignore[arg-type]
        output=call.output,
        error=call.error,
        partial=call.partial,
    )
