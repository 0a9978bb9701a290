"""The store's reads of the waits a turn may be parked in: permission requests, rules and forms."""

from __future__ import annotations

import json
from typing import Any

from coordinator.records import Form, PermissionRequest, Rule
from coordinator.statuses import FormStatus, PermissionStatus
from coordinator.store._read_base import IN_CHUNK, SqlReads, in_list
from coordinator.store._records import load_json
from coordinator.store._status_sql import sql_list
from coordinator.store.rows import FORM_ROW, PERMISSION_ROW, WAIT_ROW, WaitRow

_PERMISSIONS = f"SELECT {PERMISSION_ROW.select} FROM permission_requests"
_FORMS = f"SELECT {FORM_ROW.select} FROM forms"
_ANSWERED_FORM = sql_list(FormStatus.SUBMITTED, FormStatus.CANCELLED)

# Both kinds of wait are pending by the same word (``PermissionStatus.PENDING``, ``FormStatus.PENDING``).
_PENDING = f"status = '{PermissionStatus.PENDING}'"

# A call's wait: the pending one, or the latest whatever its status.
_OF_CALL = {
    True: " WHERE session_id = ? AND call_id = ? AND " + _PENDING,
    False: " WHERE session_id = ? AND call_id = ? ORDER BY ord DESC LIMIT 1",
}


SESSION_RULES = "SELECT action, resource, effect FROM session_rules WHERE session_id = ? ORDER BY ord"


class WaitReads(SqlReads):
    """Reads of permission requests, session rules and question forms."""

    # permission requests and rules ----------------------------------------------------------
    def get_permission(self, request_id: str) -> PermissionRequest | None:
        return PERMISSION_ROW.load_or_none(self._one(_PERMISSIONS + " WHERE id = ?", (request_id,)))

    def decided_waits(self, wait_ids: list[str]) -> tuple[dict[str, tuple[str, str | None, Any]], list[Form]]:
        # Of the waits this process runs, the few decided meanwhile (by another process): a read of
        # each, every second, cost 21 ms with 1,000 people to answer.
        replied: dict[str, tuple[str, str | None, Any]] = {}
        settled: list[Form] = []
        for start in range(0, len(wait_ids), IN_CHUNK):
            chunk = wait_ids[start : start + IN_CHUNK]
            for request_id, decision, message, edited in self._all(
                "SELECT id, decision, message, input FROM permission_requests "
                f"WHERE status = '{PermissionStatus.REPLIED}' AND decision IS NOT NULL"
                + in_list("id", chunk),
                tuple(chunk),
            ):
                replied[request_id] = (decision, message, load_json(edited))
            rows = self._all(
                _FORMS + f" WHERE status IN {_ANSWERED_FORM}" + in_list("id", chunk), tuple(chunk)
            )
            settled += [FORM_ROW.load(row) for row in rows]
        return replied, settled

    def permission_wait_row(self, request_id: str) -> WaitRow | None:
        row = self._one(f"SELECT {WAIT_ROW.select} FROM permission_requests WHERE id = ?", (request_id,))
        return WAIT_ROW.load_or_none(row)

    def pending_permissions(
        self, session_id: str | None = None, turn_id: str | None = None, session_ids: list[str] | None = None
    ) -> list[PermissionRequest]:
        where, args = _pending_filter(session_id, turn_id, session_ids)
        return [PERMISSION_ROW.load(r) for r in self._all(_PERMISSIONS + where + " ORDER BY ord", args)]

    def permission_of_call(self, session_id: str, call_id: str, *, pending: bool) -> PermissionRequest | None:
        return PERMISSION_ROW.load_or_none(self._one(_PERMISSIONS + _OF_CALL[pending], (session_id, call_id)))

    def session_rules(self, session_id: str) -> list[Rule]:
        rows = self._all(SESSION_RULES, (session_id,))
        return [Rule(action=a, resource=r, effect=e) for a, r, e in rows]

    # forms ----------------------------------------------------------------------------------
    def get_form(self, form_id: str) -> Form | None:
        return FORM_ROW.load_or_none(self._one(_FORMS + " WHERE id = ?", (form_id,)))

    def form_wait_row(self, form_id: str) -> WaitRow | None:
        return WAIT_ROW.load_or_none(
            self._one(f"SELECT {WAIT_ROW.select} FROM forms WHERE id = ?", (form_id,))
        )

    def pending_forms(
        self, session_id: str | None = None, turn_id: str | None = None, session_ids: list[str] | None = None
    ) -> list[Form]:
        where, args = _pending_filter(session_id, turn_id, session_ids)
        return [FORM_ROW.load(r) for r in self._all(_FORMS + where + " ORDER BY ord", args)]

    def form_resume(self, form_id: str) -> dict[str, Any] | None:
        row = self._one("SELECT resume FROM forms WHERE id = ?", (form_id,))
        return None if row is None or row[0] is None else json.loads(row[0])

    def form_of_call(self, session_id: str, call_id: str, *, pending: bool) -> Form | None:
        return FORM_ROW.load_or_none(self._one(_FORMS + _OF_CALL[pending], (session_id, call_id)))


def _pending_filter(
    session_id: str | None, turn_id: str | None, session_ids: list[str] | None
) -> tuple[str, tuple[Any, ...]]:
    """`` WHERE status = 'pending' ...`` of one session, of several, or of one turn."""
    where = " WHERE " + _PENDING
    args: tuple[Any, ...] = ()
    if session_id is not None:
        where, args = where + " AND session_id = ?", (*args, session_id)
    if session_ids is not None:
        where, args = where + in_list("session_id", session_ids), (*args, *session_ids)
    if turn_id is not None:
        where, args = where + " AND turn_id = ?", (*args, turn_id)
    return where, args
