"""The driver of a phase (``phase.py`` opens it): applies the faults, and says when the phase is over.

It applies the faults that actors park for (interrupt, decline, deadline, shutdown, crash) and ends the
phase when every turn has settled (a clean shutdown), when a shutdown or a crash it applied is complete,
or when a session is wedged by a failed commit (then it shuts down, and the next phase resumes it).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio
import trio.testing

from coordinator import Coordinator, errors
from coordinator._coordinator import crash
from coordinator.actors import stops
from coordinator.chaos.faults import INPUTS
from coordinator.chaos.injector import ChaosInjector, Park
from coordinator.chaos.leaks import ProcessLedger
from coordinator.chaos.record import RunRecord, Sent
from coordinator.chaos.scenario import SCENARIO_PATIENCE, ScenarioRun
from coordinator.chaos.watch import CommitWatch, live_tasks
from coordinator.chaos.world import ChaosModel, World
from coordinator.reasons import Timeout
from coordinator.records import Form, PermissionRequest
from coordinator.statuses import PENDING_WAIT, TurnStatus

# Bounds in trio (mock) seconds: a phase that does not end is stuck; the driver looks around at least
# this often while nothing happens, to notice a session wedged by a failed commit.
PHASE_LIMIT_TURNS = 4
LOOK_AROUND = 5.0
LOOK_AROUND_REAL_TIME = 0.25
REAL_TIME_WAIT = 5.0  # for a deadline to fire once the clock (at real speed) jumped to it
# Scheduler passes to wait for a stop to reach a parked turn (a commit and a cancel take a few).
STOP_PASSES = 200
WEDGE_SECONDS = 3.0  # longer than the watch's interval, which restarts a session with queued turns

TICK = "tick"
REAL_LIMIT = 60.0  # wall seconds a phase may take before it counts as stuck


@attrs.define(eq=False)
class RunState:
    """What every phase of one run shares."""

    world: World
    record: RunRecord
    injector: ChaosInjector
    model: ChaosModel
    clock: trio.testing.MockClock
    ledger: ProcessLedger = attrs.Factory(ProcessLedger)


@attrs.define(eq=False)
class Teardown:
    kind: str  # shutdown | crash
    done: trio.Event = attrs.Factory(trio.Event)


class Driver:
    """Applies parked faults and decides when the phase is over."""

    def __init__(
        self,
        state: RunState,
        coord: Coordinator,
        number: int,
        receive: trio.MemoryReceiveChannel[Any],
        watch: CommitWatch,
        scenario: ScenarioRun | None = None,
    ) -> None:
        self.scenario = scenario
        self.state = state
        self.record = state.record
        self.coord = coord
        self.number = number
        self.receive = receive
        self.watch = watch
        self.teardown: Teardown | None = None
        self.applying: trio.Nursery
        self.idle_since: float | None = None
        self.settled_since: float | None = None

    async def drive(self) -> str:
        """Apply faults until the phase ends; returns how it ended."""
        async with trio.open_nursery() as self.applying:
            end = await self._until_the_end()
            self.applying.cancel_scope.cancel()  # a fault still letting time pass on a stuck phase
        return end

    async def _until_the_end(self) -> str:
        limit = PHASE_LIMIT_TURNS * self.state.world.turn_limit
        started = time.monotonic()
        with trio.move_on_after(limit):
            while time.monotonic() - started < REAL_LIMIT:
                if self.teardown is not None and self.teardown.done.is_set():
                    return self.teardown.kind
                if self.record.discovering:
                    self.record.discover(self.watch.view)
                settled = self._all_settled()
                if not settled:
                    self.settled_since = None
                if self.teardown is None and settled and self._scenario_over():
                    await self._close()
                    return "done"
                if self.teardown is None and self._wedged():
                    if not self.watch.fired:
                        self.record.violate(
                            1, f"phase {self.number}: turns left unsettled with no actor: {self._unsettled()}"
                        )
                    await self._close()
                    return "wedged"
                message = None
                with trio.move_on_after(LOOK_AROUND_REAL_TIME if self.state.world.processes else LOOK_AROUND):
                    message = await self.receive.receive()
                if isinstance(message, Park):
                    # Each fault in its own task: a fault that lets time pass must not hold the others.
                    self.applying.start_soon(self.apply, message)
        self.record.violate(
            1, f"phase {self.number} did not end ({limit:g}s of trio time, {REAL_LIMIT:g}s real)"
        )
        return "stuck"

    def _scenario_over(self) -> bool:
        """The scenario returned, or lingers with every turn settled (waiting on a stream, say)."""
        if self.scenario is None or self.scenario.done:
            return True
        now = trio.current_time()
        self.settled_since = now if self.settled_since is None else self.settled_since
        if now - self.settled_since < SCENARIO_PATIENCE:
            return False
        self.scenario.scope.cancel()
        return True

    async def _close(self) -> None:
        self.watch.disarm()
        await self.coord.shutdown()

    def _all_settled(self) -> bool:
        read = self.watch.view
        return all(
            (row := read.get_turn(t)) is not None and row.status == TurnStatus.SETTLED
            for t in self.record.turns
        )

    def _unsettled(self) -> dict[str, str]:
        read = self.watch.view
        rows = {t: read.get_turn(t) for t in self.record.turns}
        return {
            t: row.status for t, row in rows.items() if row is not None and row.status != TurnStatus.SETTLED
        }

    def _wedged(self) -> bool:
        """No unsettled turn has had a session actor for a while (the watch restarts queued turns in 1s).

        A commit that failed can end a session actor: what it could not write stays, and the next start
        resumes it. Without an injected store failure, this is a bug.
        """
        live = {task.name for task in live_tasks()}
        if any(f"session {self.record.turns[t]}" in live for t in self._unsettled()):
            self.idle_since = None
            return False
        now = trio.current_time()
        self.idle_since = now if self.idle_since is None else self.idle_since
        return now - self.idle_since >= WEDGE_SECONDS

    async def apply(self, park: Park) -> None:
        kind = park.injection.fault.kind
        if self.teardown is not None and self.teardown.kind == "crash":
            park.released.set()  # the coordinator is being dropped: nothing more is injected
            return
        try:
            if kind == "shutdown" or kind == "crash":
                await self._teardown(park, kind)
            elif kind == "interrupt":
                await self._interrupt(park)
            elif kind == "decline":
                await self._decline(park)
            elif kind in INPUTS:
                await self._send_input(park)
            else:
                await self._deadline(park)
        except errors.CoordinatorError as exc:  # its own write hit the injected store failure, say
            self._applied(park, f"failed: {type(exc).__name__}: {exc}")
        finally:
            park.answer = not park.turn.stopping
            if kind not in ("shutdown", "crash"):
                park.released.set()

    def _applied(self, park: Park, effect: str) -> None:
        self.state.injector.applied(park.injection, park.turn, effect)

    async def _teardown(self, park: Park, kind: str) -> None:
        if self.teardown is not None and (self.teardown.kind == kind or kind == "shutdown"):
            park.released.set()  # a second shutdown changes nothing
            return
        self._applied(park, kind)
        if self.scenario is not None:
            self.scenario.scope.cancel()  # the user's program goes down with its coordinator
        teardown = self.teardown = Teardown(kind)
        action: Callable[[], Awaitable[None]]
        if kind == "crash":
            assert self.state.injector.phase is not None
            self.state.injector.phase.open = False
            action = functools.partial(crash, self.coord)
        else:
            action = self.coord.shutdown
        self.applying.start_soon(self._run_teardown, action, teardown)
        await self._until_stopped(park)
        park.released.set()

    async def _run_teardown(self, action: Any, teardown: Teardown) -> None:
        await action()
        teardown.done.set()
        self.watch.tick()  # wake ``drive``: the phase is over

    async def _until_stopped(self, park: Park) -> None:
        for _ in range(STOP_PASSES):
            if park.turn.stopping:
                return
            await trio.lowlevel.checkpoint()

    async def _interrupt(self, park: Park) -> None:
        settling = _settling(park)
        accepted = await self.coord.interrupt(park.turn.session_id, by="api")
        self._applied(park, f"interrupt answered {accepted}")
        self._check_interrupt(park, accepted, settling)

    def _check_interrupt(self, park: Park, accepted: bool, settling: bool) -> None:
        if accepted:
            self.record.interrupted_sessions.add(park.turn.session_id)
            if settling:
                message = (
                    f"an interrupt at {park.injection.label()} answered true while {park.turn.turn_id} was "
                    "already settling (an interrupt of a settling turn answers false and changes nothing)"
                )
                self.record.violate(1, message)

    async def _send_input(self, park: Park) -> None:
        """A person's input into the running turn: a steer, a queued prompt (cancelled at once, or
        interrupting the turn), or a soft stop (cancelling the queue too)."""
        fault, session_id = park.injection.fault, park.turn.session_id
        self.record.discovering = True  # the turns it makes are the record's too
        text = f"{fault.label()} at {park.injection.occurrence}"
        if fault.kind == "steer":
            steered = await self.coord.steer(session_id, text)
            self.record.sent.append(
                Sent(kind="steer", session_id=session_id, id=steered.steer_id, phase=self.number)
            )
            self._applied(park, f"steered {steered.steer_id} into {steered.turn_id}")
        elif fault.kind == "queue":
            await self._queue(park, text)
        else:
            settling = _settling(park)
            cancel = fault.variant == "cancel"
            if cancel:
                self.record.queue_cancelled.add(session_id)
            accepted = await self.coord.interrupt(
                session_id, by="api", when="after_step", queued="cancel" if cancel else "keep"
            )
            self._applied(park, f"soft stop answered {accepted}")
            self._check_interrupt(park, accepted, settling)

    async def _queue(self, park: Park, text: str) -> None:
        fault, session_id = park.injection.fault, park.turn.session_id
        mode = "interrupt" if fault.variant == "interrupt" else "queue"
        if mode == "interrupt":
            # Whether it stopped the turn is not answered: its interrupt explains an interrupted turn.
            self.record.interrupted_sessions.add(session_id)
        turn_id = await self.coord.prompt(session_id, text, mode=mode)
        self.record.sent.append(Sent(kind="prompt", session_id=session_id, id=turn_id, phase=self.number))
        if fault.variant != "cancel":
            self._applied(park, f"queued {turn_id} ({mode})")
            return
        self.record.cancelled_turns.add(turn_id)
        try:
            await self.coord.cancel_turn(session_id, turn_id)
        except errors.TurnNotQueued:
            self._applied(park, f"queued {turn_id}: it started before its cancellation")
            return
        self._applied(park, f"queued {turn_id}, then cancelled it")

    async def _decline(self, park: Park) -> None:
        target = self._decline_target(park)
        if target is None:
            return  # nothing was ever asked in this session: no decline to make
        kind, wait_id, pending = target
        session_id = park.turn.session_id
        message = None if park.injection.fault.variant == "stop" else "chaos: not like this"
        settled: PermissionRequest | Form
        try:
            if kind == "permission":
                settled = await self.coord.reply_permission(session_id, wait_id, "reject", message)
            else:
                settled = await self.coord.dismiss_form(session_id, wait_id, message)
        except (errors.PermissionAlreadySettled, errors.FormAlreadySettled):
            self._applied(park, f"late decline of {wait_id}: already settled")
            return
        self._applied(park, f"declined {kind} {wait_id}{' with feedback' if message else ''}")
        if not pending:
            self.record.violate(4, f"a decline of {wait_id}, settled before, was accepted: {settled}")
        if message is None:
            self.record.declined_calls.add((session_id, settled.call_id))
            self._check_declined(kind, wait_id, park)

    def _check_declined(self, kind: str, wait_id: str, park: Park) -> None:
        """A decline without a message, accepted, has stopped its turn (durably), or found it stopping
        (durably, or in memory for a final reason that records no intent: an internal error)."""
        read = self.watch.view
        wait = read.permission_wait_row(wait_id) if kind == "permission" else read.form_wait_row(wait_id)
        row = None if wait is None else read.get_turn(wait.turn_id)
        reason = park.turn.handle.reason if row is not None and park.turn.turn_id == row.id else None
        if reason is not None and not reason.resumable:
            return
        if row is None or row.status not in (TurnStatus.STOPPING, TurnStatus.SETTLED):
            status = None if row is None else row.status
            message = f"the decline of {wait_id} was accepted, but its turn is {status}: nothing will stop it"
            self.record.violate(1, message)

    def _decline_target(self, park: Park) -> tuple[str, str, bool] | None:
        read = self.watch.view
        if park.wait_id is not None:
            return (
                "permission" if park.injection.checkpoint == "permission.wait" else "form",
                park.wait_id,
                True,
            )
        requests = read.pending_permissions(turn_id=park.turn.turn_id)
        if requests:
            return ("permission", requests[-1].id, True)
        forms = read.pending_forms(turn_id=park.turn.turn_id)
        if forms:
            return ("form", forms[-1].id, True)
        for kind, wait_id in reversed(self.record.asked.get(park.turn.session_id, [])):
            found = read.get_permission(wait_id) if kind == "permission" else read.get_form(wait_id)
            if found is not None and found.status not in PENDING_WAIT:
                return (kind, wait_id, False)
        return None

    async def _deadline(self, park: Park) -> None:
        """Let time pass until the turn's deadlines fire (see ``design/chaos.md``)."""
        turn, limit, point = park.turn, self.state.world.turn_limit, park.injection.checkpoint
        if point == "settle.turn":
            self._applied(park, "no deadline is armed while a turn writes its settlement")
            return
        if self.teardown is not None or turn.stopping or point.startswith("settle."):
            # The turn is settling: its deadline firing now must change nothing. Fire it as its timer
            # does, without letting time pass, which would also run out the bounds of the cleanups
            # under way (a shutdown's grace, a settlement's), which no real deadline does.
            stopped = await stops.decide(turn, Timeout.deadline("turn", limit))
            if stopped:  # settling an internal error, not a stop yet: the deadline comes first
                self.record.timed_turns.add(turn.turn_id)
            self._applied(park, f"the turn deadline fired while it was settling (stopped: {stopped})")
            return
        # Time passes for every session: any turn not settled yet may time out meanwhile.
        self.record.timed_turns |= set(self.record.turns) - self.record.settled
        if point == "turn.start":
            # Its deadline is armed after this checkpoint: the start takes the whole limit, then the
            # deadline fires as its timer does.
            await self._pass_time(limit)
            stopped = await stops.decide(turn, Timeout.deadline("turn", limit))
            self._applied(park, f"the turn deadline fired at its start (stopped: {stopped})")
            return
        armed = self.state.injector.armed_at.get(turn.turn_id)
        if self.state.world.processes and armed is not None:
            self.state.clock.jump(max(0.0, armed + limit - trio.current_time()) + 0.001)
        real = self.state.world.processes
        with trio.move_on_after(REAL_TIME_WAIT if real else 2 * limit):
            # Polling is the point: each second of trio time passes, and fires what is due then.
            while not (turn.stopping or turn.turn_id in self.record.settled):  # noqa: ASYNC110
                await trio.sleep(0.001 if real else 1)
        self._applied(park, f"time passed until its deadlines fired (stopping: {turn.stopping})")

    async def _pass_time(self, seconds: float) -> None:
        if self.state.world.processes:
            self.state.clock.jump(seconds)  # trio's clock runs at real speed: jump
        else:
            await trio.sleep(seconds)  # autojump: every deadline due meanwhile fires, in order


def _settling(park: Park) -> bool:
    """Whether the parked turn already settles: stopping for a reason that is final, or writing a
    success. A shutdown's suspension is not final: an interrupt then stops the turn for good (it must
    end interrupted, never resumed, which the intent check of invariant 1 verifies)."""
    reason = park.turn.handle.reason
    final = reason is not None and not reason.resumable
    return final or (reason is None and park.injection.checkpoint.startswith("settle."))
