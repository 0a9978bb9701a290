"""The writes of the store, one body of SQL for every backend: ``SqlTransaction``, a write
transaction's view (``store.api.Transaction``). Nothing here commits: the backend owns the commit."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from coordinator import clock, errors
from coordinator.events import Draft, Emitted, Event
from coordinator.reasons import ParentLink, StopReason, TextStatus
from coordinator.records import Form, Partial, PermissionRequest, Rule, ToolError
from coordinator.statuses import (
    CallStatus,
    ClaimState,
    FormStatus,
    Parked,
    PermissionStatus,
    StepStatus,
    TurnStatus,
)
from coordinator.store import _history, _status_sql, api
from coordinator.store._deletion import PruneBatch, delete_session, prune_events
from coordinator.store._inputs import InputWrites
from coordinator.store._process_groups import ProcessGroupWrites
from coordinator.store._reads import SqlReader
from coordinator.store._records import dump_json
from coordinator.store._sql import Connection
from coordinator.store._turn_reads import INTERRUPTIBLE_IS_RUNNING, NEXT_TURN, chosen_next_turn
from coordinator.store._wait_reads import SESSION_RULES as _SESSION_RULES
from coordinator.store.rows import InstanceRow, StoredMessage, ToolCallRow, TurnRow


class SqlTransaction(InputWrites, ProcessGroupWrites, SqlReader, api.Transaction):
    """An open write transaction: its reads see its own writes; its events are kept in ``events``
    for the backend to hand over once the commit succeeded."""

    def __init__(self, sql: Connection) -> None:
        super().__init__(sql)
        self.emitted: list[Emitted] = []
        self.sync_wanted_soon = False

    @property
    def events(self) -> list[Event]:
        """The events emitted, with their seqs: read it after the commit (before it, a store across a
        network waits for the server)."""
        return [emitted.event for emitted in self.emitted]

    def _insert_numbered(
        self,
        table: str,
        values: Mapping[str, Any],
        numbered_by: str | None,
        key: Any,
        scope: str,
        computed: Mapping[str, str] | None = None,
    ) -> None:
        """Insert a row whose ``ord`` is the next among the rows of ``table`` with the same
        ``numbered_by`` column (None: the whole table). ``scope`` names what the numbering is per (a
        session id, or the table): concurrent writers of one scope serialize, so the read of the last
        ord and the insert are one step for them.

        One statement: the last ord is the ``MAX`` of an index whose leading column is
        ``numbered_by`` (one lookup in SQLite and PostgreSQL alike), read by the insert itself.
        ``computed`` maps more columns to SQL expressions of their values.
        """
        self.sql.serialize(scope)
        where, args = ("", ()) if numbered_by is None else (f" WHERE {numbered_by} = ?", (key,))
        computed = computed or {}
        columns = ", ".join((*values, *computed))
        placeholders = ", ".join(("?",) * len(values) + tuple(computed.values()))
        self._send(
            f"INSERT INTO {table}({columns}, ord) VALUES ({placeholders}, "
            f"(SELECT COALESCE(MAX(ord) + 1, 0) FROM {table}{where}))",
            (*values.values(), *args),
        )

    def emit(self, draft: Draft) -> Emitted:
        at = clock.now_rfc3339()
        payload = json.dumps(draft.payload, separators=(",", ":"))
        seq_of = self.sql.insert_event(draft.type, draft.session_id, at, payload)
        emitted = Emitted(draft=draft, at=at, seq_of=seq_of)
        self.emitted.append(emitted)
        return emitted

    def sync_soon(self) -> None:
        self.sync_wanted_soon = True

    # sessions -------------------------------------------------------------------------------
    def insert_session(
        self,
        session_id: str,
        title: str,
        created_at: str,
        parent: ParentLink | None = None,
        owner: str | None = None,
    ) -> None:
        parent_session_id, parent_call_id = _link(parent)
        row: dict[str, Any] = {"id": session_id, "title": title, "created_at": created_at, "owner": owner}
        row |= {"parent_session_id": parent_session_id, "parent_call_id": parent_call_id}
        self._insert_numbered("sessions", row, None, None, "sessions")

    def set_last_outcome(self, session_id: str, outcome: str) -> None:
        self._send("UPDATE sessions SET last_outcome = ? WHERE id = ?", (outcome, session_id))

    def delete_session(self, session_id: str) -> int:
        return delete_session(self.sql, session_id)

    # turns ----------------------------------------------------------------------------------
    def insert_turn(
        self, turn_id: str, session_id: str, prompt: str, created_at: str, task: ParentLink | None = None
    ) -> None:
        parent_session_id, parent_call_id = _link(task)
        row: dict[str, Any] = {"id": turn_id, "session_id": session_id, "prompt": prompt}
        row |= {"status": TurnStatus.QUEUED, "created_at": created_at}
        row |= {"parent_session_id": parent_session_id, "parent_call_id": parent_call_id}
        self._insert_numbered("turns", row, "session_id", session_id, session_id)

    def set_turn_status(self, turn_id: str, status: TurnStatus) -> None:
        self._send("UPDATE turns SET status = ? WHERE id = ?", (TurnStatus(status), turn_id))

    def record_stop_intent(self, turn_id: str, reason: StopReason) -> bool:
        return self._compare_and_set(
            f"UPDATE turns SET status = '{TurnStatus.STOPPING}', stop_reason = ?, "
            f"parked = {Parked.NOT_PARKED} WHERE id = ? AND status IN {_status_sql.STOPPABLE}",
            (_reason(reason), turn_id),
            "the turn is the first stop's",
        )

    def settle_turn(
        self, turn_id: str, status: TurnStatus, reason: StopReason | None, outcome: str | None
    ) -> None:
        self._send(
            "UPDATE turns SET status = ?, stop_reason = ?, outcome = ? WHERE id = ?",
            (TurnStatus(status), _reason(reason), outcome, turn_id),
        )

    def mark_resumed(self, turn_id: str, after: str) -> bool:
        changed = self._run(
            f"UPDATE turns SET status = '{TurnStatus.RUNNING}', resumes = resumes + 1, suspended_after = ?, "
            f"parked = {Parked.NOT_PARKED} WHERE id = ? AND status IN {_status_sql.RESUMABLE}",
            (after, turn_id),
        )
        return changed == 1

    # Parked turns (``[server] resume = "manual"``): ``turns.parked`` is a ``statuses.Parked``, and
    # only a turn that a resume moves is parked.
    def park_turn(self, turn_id: str) -> bool:
        changed = self._run(
            f"UPDATE turns SET parked = {Parked.PARKED} WHERE id = ? AND parked IN {_status_sql.PARKABLE} "
            f"AND status IN {_status_sql.RESUMABLE}",
            (turn_id,),
        )
        return changed == 1

    def release_parked(self, turn_id: str) -> bool:
        query = (
            f"UPDATE turns SET parked = {Parked.RELEASED} WHERE id = ? AND parked IN {_status_sql.RELEASABLE}"
        )
        return self._run(query, (turn_id,)) == 1

    # steps ----------------------------------------------------------------------------------
    def insert_step(self, step_id: str, session_id: str, turn_id: str, created_at: str) -> Callable[[], int]:
        # The session counts its steps: a COUNT(*) of them grew with the session (0.6 ms a step at
        # 20,000 steps, design/benchmarks.md).
        row = {"id": step_id, "session_id": session_id, "turn_id": turn_id, "status": StepStatus.RUNNING}
        self._insert_numbered("steps", row | {"created_at": created_at}, "turn_id", turn_id, session_id)
        if self.sql.predicts:  # its index comes after the commit: a step of no session fails before
            self.session_exists(session_id)
        counted = self.sql.later(
            "UPDATE sessions SET step_count = step_count + 1 WHERE id = ? RETURNING step_count", (session_id,)
        )

        def index() -> int:
            rows = counted()
            if not rows:
                raise errors.StoreError(f"step {step_id!r} names no session: {session_id!r}")
            return int(rows[0][0]) - 1

        if not self.sql.predicts:
            index()  # a step of no session fails its transaction, as it always did
        return index

    def queued_turn(self, expected: TurnRow) -> TurnRow | None:
        """The queued turn ``expected`` as it reads now; None when it is not queued any more.
        Where the connection predicts, it is taken to be as ``expected`` says, and the server
        checks that it is still queued, with the same soft stop."""
        if self.sql.predicts and expected.status == TurnStatus.QUEUED:
            self.sql.expect(_STILL_QUEUED, (expected.id, dump_json(expected.soft_stop)), "the turn is queued")
            return expected
        current = self.get_turn(expected.id)
        return current if current is not None and current.status == TurnStatus.QUEUED else None

    def next_turn_later(self, session_id: str) -> Callable[[], TurnRow | None]:
        """``next_turn`` as this transaction reads it here, learned with the commit."""
        rows = self.sql.later(NEXT_TURN, (session_id,))
        return lambda: chosen_next_turn(rows())

    def interruptible_turn_status(
        self, session_id: str, running: str | None
    ) -> tuple[str, TurnStatus] | None:
        """The id and status of ``interruptible_turn``. ``running``: the turn this process runs for
        the session, if any; where the connection predicts, it is taken to be that turn, running,
        and the server checks it."""
        if self.sql.predicts and running is not None:
            self.sql.expect(INTERRUPTIBLE_IS_RUNNING, (session_id, running), "the running turn is known")
            return running, TurnStatus.RUNNING
        turn = self.interruptible_turn(session_id)
        return None if turn is None else (turn.id, turn.status)

    def pending_waits_of_call(
        self, session_id: str, call_id: str
    ) -> tuple[PermissionRequest | None, Form | None]:
        """The call's pending permission request and form. Where the connection predicts, none is
        taken to be left (a call's own wait settles before the call does), and the server checks it."""
        if self.sql.predicts:
            self.sql.expect(_NO_PENDING_WAIT, (session_id, call_id) * 2, "the call has no pending wait")
            return None, None
        request = self.permission_of_call(session_id, call_id, pending=True)
        return request, self.form_of_call(session_id, call_id, pending=True)

    def step_running(self, turn_id: str, step_id: str) -> bool:
        """Whether the step runs still. Where the connection predicts, it is taken to (a step fails
        itself), and the server checks it."""
        if self.sql.predicts:
            self.sql.expect(_STEP_RUNS, (step_id, turn_id), "the step runs")
            return True
        return step_id in self.running_steps(turn_id)

    def running_calls_of_step(self, turn_id: str, step_id: str) -> list[ToolCallRow]:
        """The step's unsettled calls, in order. Where the connection predicts, none is taken to be
        left (each call settles before its step), and the server checks it."""
        if self.sql.predicts:
            self.sql.expect(_NO_RUNNING_CALL_OF_STEP, (turn_id, step_id), "the step's calls are settled")
            return []
        return [c for c in self.running_calls_of_turn(turn_id) if c.step_id == step_id]

    def history_after_later(
        self, session_id: str, after_ord: int
    ) -> Callable[[], tuple[list[StoredMessage], dict[str, str | None]]]:
        return _history.history_after_later(self.sql, session_id, after_ord)

    def session_rules_later(self, session_id: str) -> Callable[[], list[Rule]]:
        rows = self.sql.later(_SESSION_RULES, (session_id,))
        return lambda: [Rule(action=a, resource=r, effect=e) for a, r, e in rows()]

    def stop_intent(self, turn_id: str, expected: StopReason | None) -> StopReason | None:
        """The reason of the stop intent committed for the turn (None: none). Where the connection
        predicts, ``expected`` is taken, and the server checks it."""
        if self.sql.predicts:
            if expected is None:
                condition = (
                    f"NOT EXISTS (SELECT 1 FROM turns WHERE id = ? AND status = '{TurnStatus.STOPPING}')"
                )
                self.sql.expect(condition, (turn_id,), "the turn has no stop intent")
            else:
                condition = (
                    f"EXISTS (SELECT 1 FROM turns WHERE id = ? AND status = '{TurnStatus.STOPPING}' "
                    "AND stop_reason = ?)"
                )
                self.sql.expect(condition, (turn_id, _reason(expected)), "the turn's stop intent is known")
            return expected
        row = self.get_turn(turn_id)
        if row is not None and row.status == TurnStatus.STOPPING:
            return row.stop_reason
        return None

    def settle_step(self, step_id: str, status: StepStatus, reason: StopReason | None) -> None:
        query = "UPDATE steps SET status = ?, reason = ? WHERE id = ?"
        self._send(query, (StepStatus(status), _reason(reason), step_id))

    def succeed_step(self, step_id: str) -> bool:
        query = (
            f"UPDATE steps SET status = '{StepStatus.SUCCEEDED}', reason = NULL "
            f"WHERE id = ? AND status IN {_status_sql.SUCCEEDABLE_STEP}"
        )
        return self._compare_and_set(query, (step_id,), "the step runs")

    def save_streamed_text(self, step_id: str, text: str) -> None:
        self._send("UPDATE steps SET streamed_text = ? WHERE id = ?", (text, step_id))

    # messages -------------------------------------------------------------------------------
    def insert_message(
        self, message_id: str, session_id: str, turn_id: str, role: str, created_at: str
    ) -> None:
        row = {"id": message_id, "session_id": session_id, "turn_id": turn_id, "role": role}
        self._insert_numbered(
            "messages", row | {"created_at": created_at}, "session_id", session_id, session_id
        )

    def add_text_part(self, message_id: str, text: str, status: TextStatus = "complete") -> None:
        row = {"message_id": message_id, "kind": "text", "text": text, "status": status}
        self._insert_numbered("parts", row, "message_id", message_id, message_id)

    def add_tool_part(self, message_id: str, call_id: str) -> None:
        row = {"message_id": message_id, "kind": "tool", "call_id": call_id}
        self._insert_numbered("parts", row, "message_id", message_id, message_id)

    # tool calls -----------------------------------------------------------------------------
    def insert_tool_call(self, call: ToolCallRow, created_at: str) -> None:
        row = {
            "session_id": call.session_id,
            "call_id": call.call_id,
            "turn_id": call.turn_id,
            "step_id": call.step_id,
            "parent_call_id": call.parent_call_id,
            "model_call_id": call.model_call_id,
            "name": call.name,
            "input": json.dumps(call.input),
            "status": call.status,
            "created_at": created_at,
        }
        # The call's events (``logged_lines``) all come after the seq given last before it began.
        seq_at_start = {"seq_at_start": self.sql.last_seq_sql()}
        self._insert_numbered("tool_calls", row, "turn_id", call.turn_id, call.session_id, seq_at_start)

    def settle_tool_call(
        self,
        session_id: str,
        call_id: str,
        *,
        output: Any = None,
        error: ToolError | None = None,
        partial: Partial | None = None,
    ) -> bool:
        status = CallStatus.RUNNING.transition(
            CallStatus.FAILED if error is not None else CallStatus.SUCCEEDED
        )
        return self._compare_and_set(
            "UPDATE tool_calls SET status = ?, output = ?, error = ?, partial = ? "
            f"WHERE session_id = ? AND call_id = ? AND status IN {_status_sql.SETTLEABLE_CALL}",
            (
                status,
                None if error is not None else json.dumps(output),
                dump_json(error),
                dump_json(partial),
                session_id,
                call_id,
            ),
            "the call runs",
        )

    def mark_tool_started(self, session_id: str, call_id: str) -> None:
        self._send(
            "UPDATE tool_calls SET tool_started = 1 WHERE session_id = ? AND call_id = ?",
            (session_id, call_id),
        )

    def set_tool_progress(self, session_id: str, call_id: str, progress: Any) -> None:
        self._send(
            "UPDATE tool_calls SET progress = ? WHERE session_id = ? AND call_id = ?",
            (json.dumps(progress), session_id, call_id),
        )

    # claims and instances -------------------------------------------------------------------
    def hold_session(self, session_id: str) -> None:
        self.sql.serialize(session_id)

    def acquire_claim(self, session_id: str, owner: str, since: str, *, takeover_from: str | None) -> int:
        self.sql.serialize(session_id)
        self._send(_NEW_CLAIM, (session_id,))
        claimed = self._one(_TAKE_CLAIM, (owner, since, session_id, takeover_from))
        return 0 if claimed is None else int(claimed[0])

    def acquire_claim_later(
        self, session_id: str, owner: str, since: str, *, takeover_from: str | None
    ) -> Callable[[], int] | None:
        """``acquire_claim``, its epoch learned with the commit; None when the claim is held elsewhere.
        Where the connection predicts, the claim is taken to be free, and the server checks it."""
        if not self.sql.predicts:
            epoch = self.acquire_claim(session_id, owner, since, takeover_from=takeover_from)
            return None if epoch == 0 else lambda: epoch
        self.sql.serialize(session_id)
        self._send(_NEW_CLAIM, (session_id,))
        self.sql.expect(_CLAIM_FREE, (session_id, takeover_from), "the claim is free")
        claimed = self.sql.later(_TAKE_CLAIM, (owner, since, session_id, takeover_from))
        return lambda: int(claimed()[0][0])

    def set_claim_state(self, session_id: str, state: ClaimState) -> None:
        if state == ClaimState.RELEASED:
            self._send(
                f"UPDATE claims SET state = '{ClaimState.RELEASED}', owner = NULL, since = NULL "
                "WHERE session_id = ?",
                (session_id,),
            )
        else:
            self._send("UPDATE claims SET state = ? WHERE session_id = ?", (ClaimState(state), session_id))

    def suspend_dead_claim(self, session_id: str, dead_owner: str | None) -> bool:
        changed = self._run(
            f"UPDATE claims SET state = '{ClaimState.SUSPENDED}' WHERE session_id = ? "
            f"AND state IN {_status_sql.SUSPENDABLE_CLAIM} AND owner IS NOT DISTINCT FROM ?",
            (session_id, dead_owner),
        )
        return changed == 1

    def register_instance(self, instance: InstanceRow, started_at: str) -> None:
        self._send(
            "INSERT INTO instances(id, host, pid, boot_id, started_at, heartbeat, stopped, node_id) "
            "VALUES (?, ?, ?, ?, ?, ?, 0, ?)",
            (
                instance.id,
                instance.host,
                instance.pid,
                instance.boot_id,
                started_at,
                self.sql.clock(),
                instance.node_id,
            ),
        )

    def beat(self, instance_id: str) -> None:
        self._send("UPDATE instances SET heartbeat = ? WHERE id = ?", (self.sql.clock(), instance_id))

    def mark_instance_stopped(self, instance_id: str) -> None:
        self._send("UPDATE instances SET stopped = 1 WHERE id = ?", (instance_id,))

    # permission requests and rules ----------------------------------------------------------
    def insert_permission(self, request: PermissionRequest, turn_id: str, deadline_at: float | None) -> None:
        row = {
            "id": request.id,
            "session_id": request.session_id,
            "turn_id": turn_id,
            "call_id": request.call_id,
            "action": request.action,
            "resource": request.resource,
            "status": PermissionStatus.PENDING,
            "created_at": request.created_at,
            "deadline_at": deadline_at,
        }
        self._insert_numbered("permission_requests", row, None, None, "permission_requests")

    def reply_permission(
        self, request_id: str, decision: str, message: str | None, edited_input: Any = None
    ) -> bool:
        return self._compare_and_set(
            f"UPDATE permission_requests SET status = '{PermissionStatus.REPLIED}', "
            f"decision = ?, message = ?, input = ? WHERE id = ? AND status IN {_status_sql.REPLIABLE}",
            (decision, message, dump_json(edited_input), request_id),
            "the request is pending",
        )

    def revoke_permission(self, request_id: str, reason: StopReason) -> bool:
        return self._compare_and_set(
            f"UPDATE permission_requests SET status = '{PermissionStatus.REVOKED}', reason = ? "
            f"WHERE id = ? AND status IN {_status_sql.REVOCABLE}",
            (_reason(reason), request_id),
            "the request is pending",
        )

    def add_session_rule(self, session_id: str, rule: Rule) -> None:
        row = {
            "session_id": session_id,
            "action": rule.action,
            "resource": rule.resource,
            "effect": rule.effect,
        }
        self._insert_numbered("session_rules", row, "session_id", session_id, session_id)

    # forms ----------------------------------------------------------------------------------
    def insert_form(
        self, form: Form, turn_id: str, deadline_at: float | None, resume: dict[str, Any] | None = None
    ) -> None:
        row = {
            "id": form.id,
            "session_id": form.session_id,
            "turn_id": turn_id,
            "call_id": form.call_id,
            "questions": dump_json(form.questions),
            "status": FormStatus.PENDING,
            "created_at": form.created_at,
            "deadline_at": deadline_at,
            "source": None if form.source is None else dump_json(form.source),
            "schema": None if form.schema is None else dump_json(form.schema),
            "prompt": form.prompt,
            "resume": None if resume is None else dump_json(resume),
        }
        self._insert_numbered("forms", row, None, None, "forms")

    def settle_form(
        self,
        form_id: str,
        status: FormStatus,
        *,
        answers: dict[str, Any] | None = None,
        message: str | None = None,
        reason: StopReason | None = None,
    ) -> bool:
        settled = FormStatus.PENDING.transition(FormStatus(status))
        return self._compare_and_set(
            "UPDATE forms SET status = ?, answers = ?, message = ?, reason = ? "
            f"WHERE id = ? AND status = '{FormStatus.PENDING}'",
            (settled, None if answers is None else json.dumps(answers), message, _reason(reason), form_id),
            "the form is pending",
        )

    # events ---------------------------------------------------------------------------------
    def prune_events(self, cutoff: str, after: int, limit: int) -> PruneBatch:
        return prune_events(self.sql, cutoff, after, limit)


_NO_PENDING_WAIT = (
    f"NOT EXISTS (SELECT 1 FROM permission_requests WHERE session_id = ? AND call_id = ? "
    f"AND status = '{PermissionStatus.PENDING}') AND NOT EXISTS (SELECT 1 FROM forms WHERE "
    f"session_id = ? AND call_id = ? AND status = '{FormStatus.PENDING}')"
)
_STEP_RUNS = f"EXISTS (SELECT 1 FROM steps WHERE id = ? AND turn_id = ? AND status = '{StepStatus.RUNNING}')"
_NO_RUNNING_CALL_OF_STEP = f"NOT EXISTS (SELECT 1 FROM tool_calls WHERE turn_id = ? AND step_id = ? AND status = '{CallStatus.RUNNING}')"
_STILL_QUEUED = (
    f"EXISTS (SELECT 1 FROM turns WHERE id = ? AND status = '{TurnStatus.QUEUED}' "
    "AND soft_stop IS NOT DISTINCT FROM ?)"
)
_NEW_CLAIM = (
    "INSERT INTO claims(session_id, owner, epoch, state, since) "
    f"VALUES (?, NULL, 0, '{ClaimState.RELEASED}', NULL) ON CONFLICT(session_id) DO NOTHING"
)
_CLAIMABLE = f"(state = '{ClaimState.RELEASED}' OR owner IS NOT DISTINCT FROM ?)"
_TAKE_CLAIM = (
    f"UPDATE claims SET owner = ?, epoch = epoch + 1, state = '{ClaimState.HELD}', since = ? "
    f"WHERE session_id = ? AND {_CLAIMABLE} RETURNING epoch"
)
_CLAIM_FREE = f"EXISTS (SELECT 1 FROM claims WHERE session_id = ? AND {_CLAIMABLE})"


def _link(link: ParentLink | None) -> tuple[str | None, str | None]:
    return (None, None) if link is None else (link.session_id, link.call_id)


def _reason(reason: StopReason | None) -> str | None:
    return dump_json(reason) if reason is not None else None
