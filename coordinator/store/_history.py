"""Reading the history: messages joined with their parts and their tool calls, whole or its tail."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from coordinator.records import Message, TextPart, ToolPart
from coordinator.statuses import TurnStatus
from coordinator.store._sql import Connection
from coordinator.store.rows import TOOL_CALL_ROW, StoredMessage, ToolCallRow

_CALL_COLUMNS_OF_C = ", ".join(f"c.{column}" for column in TOOL_CALL_ROW.columns)


def history_with_model_ids(
    sql: Connection, session_id: str, calls: list[ToolCallRow]
) -> tuple[list[Message], dict[str, str | None]]:
    """The whole history of a session whose tool calls are ``calls``, and each call's model id.

    One join reads every message with its parts in order (not a query per message).
    """
    by_id = {c.call_id: c for c in calls}
    rows = sql.all(
        "SELECT m.id, m.turn_id, m.role, m.created_at, p.kind, p.text, p.call_id, p.status "
        "FROM messages m LEFT JOIN parts p ON p.message_id = m.id "
        "WHERE m.session_id = ? ORDER BY m.ord, p.ord",
        (session_id,),
    )
    messages = [message for message, _ in _messages(session_id, rows, by_id)]
    return messages, {call.call_id: call.model_call_id for call in calls}


def history_after(
    sql: Connection, session_id: str, after_ord: int
) -> tuple[list[StoredMessage], dict[str, str | None]]:
    """The messages above ``after_ord``, each with its ord and whether its turn is settled, and the
    model ids of their calls. Reads only those messages, their parts and their calls, in one
    statement, so a step's read does not grow with the session's settled turns
    (``coordinator/models/history.py``)."""
    return _stored_messages(session_id, sql.all(_HISTORY_AFTER, (session_id, after_ord)))


def history_after_later(
    sql: Connection, session_id: str, after_ord: int
) -> Callable[[], tuple[list[StoredMessage], dict[str, str | None]]]:
    """``history_after``, learned with the commit (``Connection.later``)."""
    rows = sql.later(_HISTORY_AFTER, (session_id, after_ord))
    return lambda: _stored_messages(session_id, rows())


_HISTORY_AFTER = (
    "SELECT m.id, m.turn_id, m.role, m.created_at, p.kind, p.text, p.call_id, p.status, "
    f"m.ord, t.status = '{TurnStatus.SETTLED}', {_CALL_COLUMNS_OF_C} "
    "FROM messages m JOIN turns t ON t.id = m.turn_id LEFT JOIN parts p ON p.message_id = m.id "
    "LEFT JOIN tool_calls c ON p.kind = 'tool' AND c.session_id = m.session_id AND c.call_id = p.call_id "
    "WHERE m.session_id = ? AND m.ord > ? ORDER BY m.ord, p.ord"
)


def _stored_messages(
    session_id: str, rows: list[tuple[Any, ...]]
) -> tuple[list[StoredMessage], dict[str, str | None]]:
    calls = {row[6]: TOOL_CALL_ROW.load(row[10:]) for row in rows if row[4] == "tool"}
    stored = [
        StoredMessage(ord=extra[0], turn_settled=bool(extra[1]), message=message)
        for message, extra in _messages(session_id, rows, calls)
    ]
    return stored, {call.call_id: call.model_call_id for call in calls.values()}


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


def _tool_part(call: ToolCallRow) -> ToolPart:
    return ToolPart(
        call_id=call.call_id,
        name=call.name,
        input=call.input,
        state=call.status,  # type: ignore[arg-type]  # a CallStatus: the words of CallState
        output=call.output,
        error=call.error,
        partial=call.partial,
        edited_input=call.edited_input,
    )
