"""Invariant 9 and the node forms of 2 and 3, over a round on several nodes: pure functions of what the
round recorded (each life's stream, the tool starts) and of the database's write audit.

- 9a: no tool call starts twice (``counted`` calls note each start in a file, with their process);
- 9b: every event of a turn is committed by the instance holding its session's claim, as the writing
  transaction saw it (the audit's triggers), and no call starts on a node whose claim was taken;
- 9c: every life's ``GET /api/event`` served the store's events, from seq 1, in order, unchanged; the
  lives still running at the end served them all;
- 2: a claim held by a live node is never taken (only a killed, stopped or frozen node's), and every
  claim is released once every turn has settled;
- 3: each takeover resumes its turn at most once, ``after`` saying whether the turn was suspended,
  and only a takeover resumes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from coordinator.chaos.node_audit import AuditRow
from coordinator.chaos.record import StoreView, Violation
from coordinator.chaos.timeline import RESUMED, SUSPENDED, turn_of
from coordinator.statuses import ClaimState

# Events a node commits for a decision it took (any node answers any route): no claim needed.
DECISIONS = frozenset({"session.created", "permission.replied", "form.submitted", "form.cancelled"})
# A start this close to a claim change is not judged: a check of the claim, then a takeover committed
# while the tool was being called, is no stale start (the store's clock is read before the commit).
START_SLACK = 0.5
LIFECYCLE = ("session.turn.started", RESUMED, SUSPENDED)


@attrs.frozen(kw_only=True)
class Start:
    """A ``counted`` call's start, as its line in the starts file says."""

    pid: int
    session_id: str
    turn_id: str
    tag: str
    at: float

    @classmethod
    def from_line(cls, line: str) -> Start:
        data = json.loads(line)
        return cls(
            pid=int(data["pid"]),
            session_id=str(data["session_id"]),
            turn_id=str(data["turn_id"]),
            tag=str(data["tag"]),
            at=float(data["at"]),
        )


@attrs.frozen(kw_only=True)
class LifeRecord:
    """What the checks need of a node's life: who it was, when it was frozen, how it ended."""

    name: str
    instance_id: str
    pid: int
    started_at: float
    ended_at: float | None
    end: str | None
    paused: tuple[tuple[float, float], ...]
    stream: tuple[dict[str, Any], ...]


Namer = Callable[[str | None], str]


def namer(lives: Sequence[LifeRecord]) -> Namer:
    names = {life.instance_id: life.name for life in lives}
    return lambda instance: "nobody" if instance is None else names.get(instance, instance)


def check_streams(view: StoreView, lives: Sequence[LifeRecord]) -> list[Violation]:
    """9c: each life served the store's events from seq 1 on, in order and unchanged; a life still
    running when the round ended served every one."""
    stored = [event.to_dict() for event in view.events]
    found: list[Violation] = []
    for life in lives:
        served = [e for e in life.stream if isinstance(e.get("seq"), int)]
        seqs = [e["seq"] for e in served]
        if seqs != list(range(1, len(seqs) + 1)):
            first = next((i for i, s in enumerate(seqs) if s != i + 1), 0)
            found.append(
                Violation(
                    9,
                    f"{life.name}'s event stream is not seq 1, 2, ...: {seqs[max(0, first - 2) : first + 3]}",
                )
            )
            continue
        for mine, theirs in zip(served, stored, strict=False):
            if mine != theirs:
                found.append(
                    Violation(9, f"{life.name} served seq {mine['seq']} as {mine}, stored as {theirs}")
                )
                break
        if len(served) > len(stored):
            found.append(
                Violation(9, f"{life.name} served {len(served)} events, the store has {len(stored)}")
            )
        elif life.end == "done" and len(served) < len(stored):
            found.append(
                Violation(9, f"{life.name} ran to the end but served {len(served)} of {len(stored)} events")
            )
    return found


def check_fenced_writes(audit: Sequence[AuditRow], name: Namer) -> list[Violation]:
    """9b: every event but a decision's is written by the holder of its session's claim, as the
    writing transaction saw the claim: before its own release or suspension, after its own take."""
    found: list[Violation] = []
    for rows in _by_transaction(audit).values():
        before: dict[str, AuditRow] = {}  # each session's first claim change in this transaction
        taken: dict[str, AuditRow] = {}  # a claim this transaction took
        for row in rows:
            session = row.session_id or ""
            if row.kind == "claim":
                before.setdefault(session, row)
                if _takes(row):
                    taken[session] = row
                continue
            if row.event_type in DECISIONS or row.session_id is None:
                continue
            owner, epoch, state = _claim_seen(row, before.get(session), taken.get(session))
            if owner != row.writer or state != ClaimState.HELD:
                found.append(
                    Violation(
                        9,
                        f"seq {row.seq} {row.event_type} of {session} was committed by {name(row.writer)} "
                        f"while the claim was {state} by {name(owner)} at epoch {epoch}",
                    )
                )
    return found


def tenures(audit: Sequence[AuditRow]) -> dict[int, tuple[str, int | None]]:
    """Each event's seq -> the instance that committed it and the claim epoch it wrote under."""
    found: dict[int, tuple[str, int | None]] = {}
    for rows in _by_transaction(audit).values():
        before: dict[str, AuditRow] = {}
        taken: dict[str, AuditRow] = {}
        for row in rows:
            session = row.session_id or ""
            if row.kind == "claim":
                before.setdefault(session, row)
                if _takes(row):
                    taken[session] = row
            elif row.seq is not None:
                found[row.seq] = (row.writer, _claim_seen(row, before.get(session), taken.get(session))[1])
    return found


def _takes(row: AuditRow) -> bool:
    """A claim change by which its writer takes the claim (a start or a takeover)."""
    return row.state == ClaimState.HELD and row.owner == row.writer and row.epoch != row.old_epoch


def _by_transaction(audit: Iterable[AuditRow]) -> dict[int, list[AuditRow]]:
    grouped: dict[int, list[AuditRow]] = {}
    for row in audit:
        grouped.setdefault(row.xid, []).append(row)
    return grouped


def _claim_seen(
    event: AuditRow, first_change: AuditRow | None, taken: AuditRow | None
) -> tuple[str | None, int | None, str | None]:
    """The claim an event was written under: the one its transaction took, else the claim as it was
    before the transaction changed it, else as it stood at the event's insert."""
    if taken is not None and taken.id < event.id:
        return taken.owner, taken.epoch, taken.state
    if first_change is not None and first_change.id < event.id:
        if first_change.old_state is None:  # the row was inserted, released, by this transaction
            return None, 0, ClaimState.RELEASED
        return first_change.old_owner, first_change.old_epoch, first_change.old_state
    return event.owner, event.epoch, event.state


def check_starts(
    starts: Sequence[Start],
    audit: Sequence[AuditRow],
    lives: Sequence[LifeRecord],
    view: StoreView,
    name: Namer,
) -> list[Violation]:
    """9a: no ``counted`` call starts twice; 9b: none starts on a node whose claim was taken before."""
    found: list[Violation] = []
    call_ids = {(s, row.model_call_id): row.call_id for (s, _), row in view.calls.items()}
    by_call: dict[tuple[str, str], list[Start]] = {}
    for start in starts:
        by_call.setdefault((start.session_id, start.tag), []).append(start)
    instance = _instance_by_pid(lives)
    for (session, tag), mine in sorted(by_call.items()):
        if len(mine) > 1:
            who = ", ".join(name(instance(s.pid, s.at)) for s in mine)
            call = call_ids.get((session, tag), tag)
            found.append(Violation(9, f"call {call} of {session} started {len(mine)} times ({who})"))
    claims = [row for row in audit if row.kind == "claim"]
    for start in starts:
        starter = instance(start.pid, start.at)
        holder = _holder(claims, start.session_id, start.at - START_SLACK)
        recent = any(
            row.session_id == start.session_id and start.at - START_SLACK < row.at <= start.at
            for row in claims
        )
        if holder != starter and not recent:
            call = call_ids.get((start.session_id, start.tag), start.tag)
            found.append(
                Violation(
                    9,
                    f"call {call} of {start.session_id} started on {name(starter)} while {name(holder)} "
                    "held its claim",
                )
            )
    return found


def _instance_by_pid(lives: Sequence[LifeRecord]) -> Callable[[int, float], str | None]:
    def instance(pid: int, at: float) -> str | None:
        mine = [life for life in lives if life.pid == pid and life.started_at <= at]
        return max(mine, key=lambda life: life.started_at).instance_id if mine else None

    return instance


def _holder(claims: Sequence[AuditRow], session_id: str, at: float) -> str | None:
    """Who held the session's claim at ``at`` (the database's clock), as its last change said."""
    holder = None
    for row in claims:
        if row.session_id == session_id and row.at <= at:
            holder = row.owner if row.state == ClaimState.HELD else None
    return holder


def check_takeovers(
    audit: Sequence[AuditRow], lives: Sequence[LifeRecord], lease: float, name: Namer
) -> list[Violation]:
    """2: a held claim is taken only from a life that was killed, stopped or frozen long enough."""
    found: list[Violation] = []
    by_instance = {life.instance_id: life for life in lives}
    for row in audit:
        if row.kind != "claim" or row.old_state != ClaimState.HELD or row.old_owner in (None, row.owner):
            continue
        if row.state != ClaimState.HELD:
            continue
        owner = by_instance.get(row.old_owner or "")
        if owner is None or not _was_down(owner, row.at, lease):
            found.append(
                Violation(
                    2,
                    f"{name(row.owner)} took the claim of {row.session_id} (epoch {row.epoch}) from "
                    f"{name(row.old_owner)}, which was running",
                )
            )
    return found


def _was_down(life: LifeRecord, at: float, lease: float) -> bool:
    if life.ended_at is not None and life.ended_at <= at + START_SLACK:
        return True
    # Frozen: its last heartbeat was at most a third of a lease before the stop; once continued, it
    # beats again within a third of a lease.
    return any(stopped + lease / 2 <= at <= continued + lease for stopped, continued in life.paused)


def is_takeover(row: AuditRow) -> bool:
    """A claim held again after it was held (by a dead owner) or suspended: a takeover."""
    return (
        row.kind == "claim"
        and row.state == ClaimState.HELD
        and row.old_state in (ClaimState.HELD, ClaimState.SUSPENDED)
    )


def check_resumes(audit: Sequence[AuditRow], view: StoreView) -> list[Violation]:
    """3: a resumption follows a takeover, at most one a takeover, after what the turn went through."""
    found: list[Violation] = []
    epochs = {row.seq: (row.session_id, row.epoch) for row in audit if row.kind == "event"}
    taken = {(row.session_id, row.epoch) for row in audit if is_takeover(row)}
    counts: Counter[tuple[str, Any]] = Counter()
    last: dict[str, str] = {}
    for event in view.events:
        turn_id = turn_of(event)
        if turn_id is None or event.type not in LIFECYCLE:
            continue
        if event.type == RESUMED:
            epoch = epochs.get(event.stored_seq)
            counts[(turn_id, epoch)] += 1
            if epoch not in taken:
                found.append(
                    Violation(3, f"{turn_id} was resumed at seq {event.stored_seq} with no takeover")
                )
            expected = "shutdown" if last.get(turn_id) == SUSPENDED else "crash"
            if event.payload["after"] != expected:
                found.append(
                    Violation(
                        3,
                        f"{turn_id} was resumed after {event.payload['after']} at seq {event.stored_seq}, "
                        f"but its last was {last.get(turn_id)}",
                    )
                )
        last[turn_id] = event.type
    found += [
        Violation(3, f"{turn_id} was resumed {n} times under epoch {epoch}")
        for (turn_id, epoch), n in counts.items()
        if n > 1
    ]
    return found


def check_released(view: StoreView) -> list[Violation]:
    """2: once every turn has settled, every claim is released."""
    return [
        Violation(2, f"{session_id}'s claim is {claim.state} by {claim.owner} at the end")
        for session_id, claim in view.claims.items()
        if claim is not None and claim.state != ClaimState.RELEASED
    ]
