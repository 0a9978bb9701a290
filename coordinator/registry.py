"""The registry of live session actors, and the recovery of turns a previous process left behind."""

from __future__ import annotations

import functools

import attrs
import trio

from coordinator import decisions, orphans
from coordinator.actors import session, stops
from coordinator.actors.context import Runtime, Takeover
from coordinator.actors.session import SessionHandle
from coordinator.claims import Liveness
from coordinator.errors import StoreError
from coordinator.logs import get_logger
from coordinator.statuses import ClaimState, TurnStatus
from coordinator.store import Reader, Transaction
from coordinator.store.rows import ClaimRow, InstanceRow, TurnRow

log = get_logger(__name__)

WAKE_GAP = 0.02
"""Seconds the watch lets pass after it was woken, so that a burst of other nodes' commits is one look."""


class Registry:
    """Starts at most one actor per session, in the coordinator's root nursery."""

    def __init__(self, runtime: Runtime, nursery: trio.Nursery) -> None:
        self._runtime = runtime
        self._nursery = nursery
        self._actors: dict[str, SessionHandle] = {}
        self._takeovers: dict[str, Takeover] = {}
        # Sessions whose actor stopped on a store failure, to take over once the store writes again.
        self._store_failed: set[str] = set()
        self.closed = False
        self._changed = trio.Event()
        runtime.store.on_change(self._notice_change)

    def get(self, session_id: str) -> SessionHandle | None:
        return self._actors.get(session_id)

    def ensure_running(self, session_id: str, *, queued: TurnRow | None = None) -> None:
        """Start the session's actor unless it runs; it picks up every unfinished or queued turn.

        Synchronous, so a prompt committed just before is never missed: the actor reads the store
        when it looks for its next turn, and leaves the registry in the same step as it finds none.
        A running actor is nudged instead: its look may have read a snapshot taken before the
        commit (on PostgreSQL), and a look that saw a nudge meanwhile looks again. ``queued``: the
        session's next turn as the transaction that just committed read it, which a new actor takes
        as its first look.
        """
        if self.closed:
            return
        running = self._actors.get(session_id)
        if running is not None:
            running.nudges += 1
            return
        handle = SessionHandle(session_id=session_id, queued=queued)
        self._actors[session_id] = handle
        self._nursery.start_soon(functools.partial(self._run, handle), name=f"session {session_id}")

    async def _run(self, handle: SessionHandle) -> None:
        try:
            await session.run(self._runtime, handle, self._takeovers)
        finally:
            if self._actors.get(handle.session_id) is handle:
                del self._actors[handle.session_id]
            if handle.store_failed and not self.closed:
                self._store_failed.add(handle.session_id)

    async def recover(self, liveness: Liveness) -> list[str]:
        """Find turns left unfinished by a shutdown or a crash and start their sessions' actors.

        With ``[server] resume = "manual"`` a suspended or crashed turn is parked instead (it stays
        suspended until ``resume`` or an interrupt), and a parked turn is left parked whatever the
        policy; a stop decided before the crash is settled either way. Returns the session ids started.
        A turn whose owner is alive (another process) is left alone. The process groups dead owners
        left are killed first, before any of their turns resumes or is parked.
        """
        found = await self._runtime.store.read(functools.partial(_recovery_view, me=liveness.me.id))
        await orphans.kill_left(self._runtime.store, liveness, found.groups, found.now)
        manual = self._runtime.config.server.resume == "manual"
        started: list[str] = []
        for turn, claim, owner in found.unfinished:
            takeover = _takeover_of(turn, claim, owner, liveness, found.now)
            # A session whose actor lives here is taken over by it already (a resume just asked).
            if takeover is None or turn.session_id in self._actors:
                continue
            if (
                turn.status != TurnStatus.STOPPING
                and turn.id not in found.asked
                and (turn.id in found.parked or manual)
            ):
                if turn.id not in found.parked:
                    await self._park(turn, takeover)
                continue
            self._take_over(turn, takeover)
            started.append(turn.session_id)
        for session_id in [*started, *found.queued]:
            self.ensure_running(session_id)
        return started

    async def retake_store_failed(self) -> None:
        """Take over, as after a crash, the turn of each session whose actor stopped because the
        store refused a write, once the store writes again: the turn resumes (or settles the stop
        decided before the failure, or is parked with ``resume = "manual"``) exactly as at the next
        start, without a restart.

        Only a turn whose claim this instance still holds is retaken here; a takeover whose claim
        commit failed left the claim with its dead owner, and ``recover`` takes it. The probe is
        the instance's heartbeat; while it fails, nothing is retaken (the failure was logged when
        it stopped the actor)."""
        if not self._store_failed:
            return
        me = self._runtime.instance_id
        looked = set(self._store_failed)  # an actor may stop on the store during the awaits below
        held = functools.partial(_turns_held_by, session_ids=sorted(looked), me=me)
        turns = await self._runtime.store.read(held)
        retaken = {turn.session_id for turn in turns}
        self._store_failed -= looked - retaken
        if not turns:
            return
        try:
            await self._runtime.store.write(lambda tx: tx.beat(me))
        except StoreError:
            return  # still failing: look again at the next tick
        self._store_failed -= retaken
        manual = self._runtime.config.server.resume == "manual"
        for turn in turns:
            if turn.session_id in self._actors:
                continue
            takeover = Takeover(previous_owner=me, after="crash")
            if manual and turn.status != TurnStatus.STOPPING:
                await self._park(turn, takeover)  # as a start would park it: a person resumes it
                continue
            self._take_over(turn, takeover, cause="store_failed")
            self.ensure_running(turn.session_id)

    def _take_over(self, turn: TurnRow, takeover: Takeover, **why: str) -> None:
        """Leave ``takeover`` for the actor that runs ``turn`` next, and say so in the log."""
        self._takeovers[turn.id] = takeover
        log.info(
            "turn_recovered",
            session_id=turn.session_id,
            turn_id=turn.id,
            status=turn.status,
            after=takeover.after,
            **why,
        )

    async def _park(self, turn: TurnRow, takeover: Takeover) -> None:
        """Leave ``turn`` suspended for a manual resume, in one transaction: a crashed turn's claim,
        held by its dead owner, becomes suspended (compare-and-set). The processes its running calls
        started were killed just before, with every group its dead owner left (``recover``)."""
        if await self._runtime.store.write(lambda tx: _park_in(tx, turn, takeover)):
            log.info("turn_parked", session_id=turn.session_id, turn_id=turn.id, after=takeover.after)

    async def resume(self, session_id: str) -> str:
        """Resume the session's parked turn now, exactly as a start would; returns its id.

        **Raises:** ``NothingToResume``, ``CoordinatorClosed``.
        """
        turn = await decisions.resume(self._runtime, session_id)
        claim = await self._runtime.store.read(lambda reader: reader.get_claim(session_id))
        after = "shutdown" if turn.status == TurnStatus.SUSPENDED else "crash"
        self._takeovers[turn.id] = Takeover(
            previous_owner=None if claim is None else claim.owner, after=after
        )
        log.info("turn_recovered", session_id=session_id, turn_id=turn.id, status=turn.status, after=after)
        self.ensure_running(session_id)
        return turn.id

    async def settle_decided_stop(self, session_id: str) -> None:
        """Settle now a stop just committed for a turn no actor runs (an interrupt of a parked turn, a
        reject or a dismissal of one of its waits), rather than at the watch's next look: its waits are
        revoked, its calls fail, then the terminal event and ``session.idle``."""
        if session_id in self._actors:
            # Its actor applies the stop. A scheduling point all the same, as the read below is: this
            # method is an await point whatever it finds.
            await trio.lowlevel.checkpoint()
            return
        turn, claim = await self._runtime.store.read(
            lambda reader: (reader.next_turn(session_id), reader.get_claim(session_id))
        )
        if (
            turn is None
            or turn.status != TurnStatus.STOPPING
            or claim is None
            or claim.state != ClaimState.SUSPENDED
        ):
            return
        if session_id in self._actors:
            return
        # As ``recover`` would take it: a stopping turn is settled as its stop, never resumed.
        self._takeovers[turn.id] = Takeover(previous_owner=claim.owner, after="crash")
        log.info("turn_recovered", session_id=session_id, turn_id=turn.id, status=turn.status, after="crash")
        self.ensure_running(session_id)

    def _notice_change(self) -> None:
        self._changed.set()

    async def serve_watch(self, liveness: Liveness, interval: float) -> None:
        """For ever: take over turns of owners that died, and apply decisions other processes made;
        every ``interval`` seconds, and at once (at most every ``WAKE_GAP``) when another node
        committed (PostgreSQL's notifications): its decisions apply here without waiting."""
        while True:
            with trio.move_on_after(interval) as idle:
                await self._changed.wait()
            self._changed = trio.Event()
            if not idle.cancelled_caught:
                await trio.sleep(WAKE_GAP)
            if self.closed:
                return
            try:
                await self.retake_store_failed()
                await self.recover(liveness)
                await decisions.apply_remote_decisions(self._runtime)
                await self._runtime.bus.notice_foreign_commits(self._runtime.store)
            except Exception as exc:  # a busy database: look again at the next tick
                log.warning("watch_failed", exc_info=exc)

    async def abandon(self) -> None:
        """Tear every actor down without a settlement (the store refuses writes by now)."""
        self.closed = True
        actors = list(self._actors.values())
        for handle in actors:
            handle.shutting_down = True
            if handle.turn is not None:
                stops.abandon(handle.turn)
        for handle in actors:
            await handle.done.wait()

    async def shutdown(self) -> None:
        """Suspend every running turn with reason shutdown and wait for every actor to settle.

        **Cancellation:** the caller bounds this with its grace period; actors settle shielded.
        """
        self.closed = True
        actors = list(self._actors.values())
        for handle in actors:
            handle.shutdown()
        for handle in actors:
            await handle.done.wait()
        if self._runtime.lives is not None:
            await self._runtime.lives.end_all()  # what sessions kept outlives their turns, not this


@attrs.frozen
class _RecoveryView:
    """What a recovery reads, in one read: each unfinished turn with its claim and owner, the turns
    parked or asked to resume, the sessions with a queued turn and no claim, and the process groups
    other instances recorded, with their owners."""

    unfinished: list[tuple[TurnRow, ClaimRow | None, InstanceRow | None]]
    groups: list[orphans.OwnedGroup]
    now: float  # the store's clock, which heartbeats are judged by
    parked: set[str]
    asked: set[str]  # by a resume whose instance died before its takeover
    queued: list[str]


def _turns_held_by(reader: Reader, session_ids: list[str], me: str) -> list[TurnRow]:
    """The unfinished turn of each of ``session_ids`` whose claim ``me`` holds."""
    turns = []
    for session_id in session_ids:
        claim = reader.get_claim(session_id)
        if claim is None or claim.owner != me or claim.state != ClaimState.HELD:
            continue
        turn = reader.next_turn(session_id)
        if turn is not None and turn.status in (TurnStatus.RUNNING, TurnStatus.STOPPING):
            turns.append(turn)
    return turns


def _recovery_view(reader: Reader, me: str) -> _RecoveryView:
    return _RecoveryView(
        # The turns whose claim ``me`` holds are left out: their owner lives (``_takeover_of``).
        unfinished=reader.unfinished_turns_with_owners(me),
        groups=reader.process_groups_with_owners(me),
        now=reader.clock(),
        parked=reader.parked_turn_ids(),
        asked=reader.resume_asked_turn_ids(),
        queued=reader.sessions_with_queued_turns(),
    )


def _takeover_of(
    turn: TurnRow, claim: ClaimRow | None, owner: InstanceRow | None, liveness: Liveness, now: float
) -> Takeover | None:
    """How ``turn`` is taken over, or None while its owner lives (and runs it)."""
    # A suspended turn whose claim is held again is being resumed by that owner (between its claim
    # and its resume): taken only if that owner died, or live nodes would take it from each other
    # without end (design/model/ checks this).
    suspended = claim is not None and claim.state == ClaimState.SUSPENDED
    if not suspended and not liveness.owner_is_dead(owner, now):
        return None
    after = "shutdown" if turn.status == TurnStatus.SUSPENDED else "crash"
    return Takeover(previous_owner=None if claim is None else claim.owner, after=after)


def _park_in(tx: Transaction, turn: TurnRow, takeover: Takeover) -> bool:
    """The parking transaction: True when the turn was parked (its claim suspended if it crashed)."""
    tx.hold_session(turn.session_id)  # what it reads, no fenced write changes before its commit
    current = tx.get_turn(turn.id)
    if current is None or current.status not in (TurnStatus.RUNNING, TurnStatus.SUSPENDED):
        return False
    if current.status == TurnStatus.RUNNING and not tx.suspend_dead_claim(
        turn.session_id, takeover.previous_owner
    ):
        return False  # another instance took it over meanwhile
    return tx.park_turn(turn.id)
