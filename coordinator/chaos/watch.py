"""Watching a phase: its store's commits, the live subscription, and the tasks left when it closes.

``before_commit`` runs inside each transaction, just before its commit (the injector's, while the
phase is current): it raises the injected store failure, or reads which turns the transaction stops
(their first durable intent). ``on_commit`` runs
right after each commit that appended events, before any other task: the moment to check that a
settlement wrote what it must (claim, waits, outcome) in the same transaction as its event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import trio

from coordinator import Coordinator, errors
from coordinator.actors.context import TurnScope
from coordinator.chaos.faults import Injection
from coordinator.chaos.leaks import ProcessLedger
from coordinator.chaos.record import Intent, RunRecord
from coordinator.events import Event
from coordinator.statuses import ClaimState, TurnStatus
from coordinator.store import Reader, Store

TERMINALS = frozenset(
    {"session.execution.succeeded", "session.execution.interrupted", "session.execution.failed"}
)
SUSPENDED = "session.execution.suspended"
CALL_SETTLED = frozenset({"session.tool.succeeded", "session.tool.failed"})
# Names of the coordinator's own tasks (trio names a task after its function unless given a name).
COORDINATOR_TASKS = ("session ", "heartbeat", "watch", "actors.", "coordinator.")
STORE_ERRORS: dict[str, type[errors.StoreError]] = {
    "error": errors.StoreError,
    "full": errors.StoreFull,
    "busy": errors.StoreBusy,
}


class CommitWatch:
    """One coordinator's commits, for one phase of a run."""

    def __init__(
        self,
        record: RunRecord,
        store: Store,
        view: Reader,
        phase: int,
        tick: Callable[[], None],
        ledger: ProcessLedger | None = None,
    ) -> None:
        self.record = record
        self.ledger = ledger
        self.view = view  # the store as committed, read with no await (phase.py)
        self.phase = phase
        self.tick = tick
        self.fail_next: type[errors.StoreError] | None = None
        self.fired = False
        store.on_commit(self.on_commit)

    def arm_failure(self, injection: Injection, turn: TurnScope) -> bool:
        """Make the next commit fail; False when one is armed already. (A crashed coordinator's
        store refuses every write anyway; the injector arms nothing once its phase is closed.)"""
        if self.fail_next is not None:
            return False
        self.fail_next = STORE_ERRORS[injection.fault.variant or "error"]
        return True

    def disarm(self) -> None:
        self.fail_next = None

    def before_commit(self, read: Reader) -> None:
        """Inside the transaction, with its view: an injected failure, or the intents it records."""
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            self.fired = True
            self.record.failed_turns |= self.record.live_turns() | self._running_turns(read)
            raise error("chaos: injected store failure")
        if self.record.discovering:
            self.record.discover(read)
        for turn_id in self.record.live_turns() - set(self.record.intents):
            row = read.get_turn(turn_id)
            if row is not None and row.status == TurnStatus.STOPPING:
                self.record.intents[turn_id] = Intent(
                    reason=row.stop_reason, phase=self.phase, seq=read.last_seq()
                )

    def _running_turns(self, read: Reader) -> set[str]:
        """Turns running in the store: one may run before the driver learned its id, since
        ``prompt()`` answers only once the prompt is durable."""
        return {row.id for s in self.record.sessions if (row := read.running_turn(s)) is not None}

    def on_commit(self, events: Sequence[Event]) -> None:
        ended = False
        for event in events:
            if event.type in TERMINALS:
                self._check_settled(event)
                ended = True
            elif event.type == SUSPENDED:
                self._check_suspended(event)
                ended = True
            elif event.type in CALL_SETTLED:
                self._check_call(event)
                if self.ledger is not None:
                    self.ledger.settled(str(event.session_id), event.payload["call_id"])
            elif event.type == "session.tool.started" and self.ledger is not None:
                self.ledger.started(str(event.session_id), event.payload["call_id"], event.payload["name"])
            elif event.type == "session.idle":
                self._check_idle(event)
            elif event.type in ("permission.asked", "form.asked"):
                kind = event.type.partition(".")[0]
                wait_id = event.payload["request" if kind == "permission" else "form"]["id"]
                self.record.asked.setdefault(str(event.session_id), []).append((kind, wait_id))
                self.record.asked_in.setdefault(wait_id, self.phase)
        if ended:
            self.tick()

    def _check_settled(self, event: Event) -> None:
        read, turn_id, session_id = self.view, event.payload["turn_id"], str(event.session_id)
        self.record.settled.add(turn_id)
        row = read.get_turn(turn_id)
        if row is None or row.status != TurnStatus.SETTLED:
            status = None if row is None else row.status
            self.record.violate(
                7, f"seq {event.seq}: {event.type} of {turn_id} committed with the turn {status}"
            )
        claim = read.get_claim(session_id)
        if claim is None or claim.state != ClaimState.RELEASED:
            state = None if claim is None else claim.state
            self.record.violate(
                2, f"seq {event.seq}: {turn_id} ended ({event.type}) but its claim is {state}"
            )
        pending = [r.id for r in read.pending_permissions(turn_id=turn_id)]
        pending += [f.id for f in read.pending_forms(turn_id=turn_id)]
        for wait_id in pending:
            self.record.violate(4, f"seq {event.seq}: {turn_id} ended with {self._wait(wait_id)} pending")

    def _check_suspended(self, event: Event) -> None:
        read, turn_id = self.view, event.payload["turn_id"]
        row = read.get_turn(turn_id)
        claim = read.get_claim(str(event.session_id))
        if (
            row is None
            or row.status != TurnStatus.SUSPENDED
            or claim is None
            or claim.state != ClaimState.SUSPENDED
        ):
            status = None if row is None else row.status
            state = None if claim is None else claim.state
            self.record.violate(
                2, f"seq {event.seq}: {turn_id} suspended with the turn {status}, the claim {state}"
            )

    def _check_call(self, event: Event) -> None:
        read, session_id, call_id = self.view, str(event.session_id), event.payload["call_id"]
        request = read.permission_of_call(session_id, call_id, pending=True)
        form = read.form_of_call(session_id, call_id, pending=True)
        error = event.payload.get("error")
        how = "succeeded" if error is None else f"failed {error['type']}: {error['message']}"
        for wait in (request, form):
            if wait is not None:
                self.record.violate(
                    4,
                    f"seq {event.seq}: call {call_id} ({how}) settled while {self._wait(wait.id)} is pending",
                )

    def _wait(self, wait_id: str) -> str:
        """A wait, and whether a restart kept it (it was asked by an earlier coordinator)."""
        asked = self.record.asked_in.get(wait_id, self.phase)
        kept = ", kept across a restart" if asked < self.phase else ""
        return f"its wait {wait_id} (asked by coordinator {asked}{kept})"

    def _check_idle(self, event: Event) -> None:
        session = self.view.get_session(str(event.session_id))
        outcome = event.payload["outcome"]
        if session is None or session.last_outcome != outcome:
            seen = None if session is None else session.last_outcome
            self.record.violate(7, f"seq {event.seq}: session.idle says {outcome}, the session says {seen}")


async def subscribe_all(coord: Coordinator, after: int, seen: list[Event], scope: trio.CancelScope) -> None:
    """Keep every event after ``after`` the coordinator's bus delivers, until it closes."""
    with scope:
        async for event in coord.subscribe(after=after):
            seen.append(event)


def check_bus(record: RunRecord, view: Reader, first_seq: int, seen: list[Event]) -> None:
    """The live subscription delivered exactly what the phase committed, in order."""
    stored = view.events_after(first_seq, limit=100_000)
    if [e.seq for e in seen] != [e.seq for e in stored]:
        delivered = {e.seq for e in seen}
        missed = [f"{e.seq} {e.type}" for e in stored if e.seq not in delivered]
        record.violate(
            7,
            f"the subscriber saw seqs {[e.seq for e in seen]}, the store has {[e.seq for e in stored]}"
            f" (not delivered: {', '.join(missed) or 'none'})",
        )


def live_tasks() -> list[trio.lowlevel.Task]:
    """Every task of this trio run, the run's own included."""
    found: list[trio.lowlevel.Task] = []
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        if task is None:
            continue
        for nursery in task.child_nurseries:
            found.extend(nursery.child_tasks)
            stack.extend(nursery.child_tasks)
    return found


def check_tasks(record: RunRecord, number: int) -> None:
    """No task of the closed coordinator (a session actor, the heartbeat) outlives it."""
    stray = sorted(
        t.name
        for t in live_tasks()
        if t.name.startswith(COORDINATOR_TASKS) and not t.name.startswith("coordinator.chaos.")
    )
    if stray:
        record.violate(6, f"phase {number}: tasks alive after the coordinator closed: {stray}")
