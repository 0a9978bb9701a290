"""The seeded injector: at each named checkpoint, decides whether to inject a fault, and injects it.

It implements ``coordinator.checkpoints.Injector``, the campaign's one way into the core. Decisions
come from a ``random.Random`` (a run of the campaign) or from an explicit schedule (a replay, a
shrinking step); either way they are recorded as ``Injection`` s, so that every run can be replayed
exactly.

How a fault is injected depends on its kind:

- a model or tool error is raised right at the checkpoint when the component is in use there
  (``model.request``, ``tool.start``...); scheduled elsewhere, it fails that session's next use of it;
- a store failure makes the next commit (whoever makes it) raise;
- the others (interrupt, decline, deadline, shutdown, crash) come from elsewhere in real life, so a
  driver task applies them while the actor that reached the checkpoint waits there (``Park``). A
  shutdown or a crash must come from outside: they wait for every actor, this one included.

The injector also asks the campaign's responder to answer each permission request and form that
opens, unless the fault at that checkpoint takes the place of the answer.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import attrs
import trio

from coordinator.actors.context import TurnScope
from coordinator.chaos.faults import (
    DRIVEN,
    FAULT_KINDS,
    RAISED_AT,
    USED_AT,
    VARIANTS,
    Fault,
    Injection,
    raised_here,
)
from coordinator.chaos.record import Applied, RunRecord
from coordinator.checkpoints import PLUGIN_AWAIT
from coordinator.errors import ModelError
from coordinator.store import Reader
from coordinator.tools.base import Tool

WAITS = {"permission.wait": "permission.asked", "form.wait": "form.asked"}

# The chance of injecting at each checkpoint an actor reaches, while the run's budget lasts. Rare
# checkpoints, and those reached only during a stop's settlement, get more.
RATES = {
    "turn.start": 0.07,
    "model.request": 0.07,
    "model.chunk": 0.4,  # late in a turn (its last answer), so budgets are often spent by then
    "model.reply": 0.07,
    "tool.start": 0.09,
    "tool.end": 0.09,
    "nested.call": 0.35,
    "permission.wait": 0.35,
    "form.wait": 0.35,
    "settle.tool": 0.3,
    "settle.step": 0.3,
    "settle.turn": 0.08,
}
# A plugin's awaits are many (each trio operation it awaits), the points it declares few.
PLUGIN_AWAIT_RATE = 0.12
DECLARED_RATE = 0.35


def rate_of(name: str) -> float:
    if name in RATES:
        return RATES[name]
    return PLUGIN_AWAIT_RATE if name.endswith(f".{PLUGIN_AWAIT}") else DECLARED_RATE


# Faults a run may inject (drawn from BUDGETS); a schedule given by hand may have more.
BUDGETS = (1, 1, 2, 2, 3)
MAX_FAULTS = max(BUDGETS)
# A wait that opens while another of the turn is pending: a stop now must revoke them all before any
# call fails, and such moments are rare; inject there more often.
CROWDED_WAIT_RATE = 0.7
CROWDED_FAULTS = ("interrupt", "decline", "deadline")  # drawn more often, beside every kind


def _pending_waits(read: Reader, turn: TurnScope) -> int:
    return len(read.pending_permissions(turn_id=turn.turn_id)) + len(read.pending_forms(turn_id=turn.turn_id))


@attrs.define(eq=False)
class Park:
    """An actor held at a checkpoint until the driver has applied the fault scheduled there."""

    injection: Injection
    turn: TurnScope
    wait_id: str | None
    released: trio.Event = attrs.Factory(trio.Event)
    answer: bool = False  # set by the driver: the wait opened here still wants its answer


@attrs.frozen(kw_only=True)
class Job:
    """Answer a permission request or a form, after a person's thinking time."""

    kind: str  # permission | form
    session_id: str
    wait_id: str
    think: float
    choice: str  # once | always | feedback (permission); submit | feedback (form)


@attrs.define(eq=False)
class Phase:
    """One coordinator's life: where parks and jobs go, and its store's commits (``CommitWatch``)."""

    number: int
    park: Callable[[Park], None]
    job: Callable[[Job], None]
    fail_next_commit: Callable[[Injection, TurnScope], bool]
    before_commit: Callable[[Reader], None]
    view: Reader  # the store as committed, read with no await
    open: bool = True


class ChaosInjector:
    """Decides and injects faults for one run, across its restarts."""

    def __init__(
        self,
        record: RunRecord,
        *,
        rng: random.Random,
        responder_rng: random.Random,
        schedule: tuple[Injection, ...] | None = None,
        thinking: bool = True,
        patience: float = 0.0,
        kinds: tuple[str, ...] = FAULT_KINDS,
    ) -> None:
        self.record = record
        self._kinds = kinds
        self._thinking = thinking
        self._patience = patience  # with a scenario: how long the person lets it answer first
        self._rng = rng
        self._responder_rng = responder_rng
        self._schedule = None if schedule is None else {i.occurrence: i for i in schedule}
        self.budget = rng.choice(BUDGETS) if schedule is None else len(schedule)
        self.occurrence = 0
        self.phase: Phase | None = None
        self.armed: dict[tuple[str, str], Injection] = {}
        self.armed_at: dict[str, float] = {}  # turn id -> when its turn deadline was armed

    async def at(self, name: str, turn: Any) -> None:
        """Maybe inject a fault at checkpoint ``name`` of ``turn``; see the module docstring.

        **Cancellation:** a parked actor is released by the stop the driver applies, if it cancels it.

        **Raises:** ``ModelError`` or ``RuntimeError`` for component faults injected here.
        """
        phase = self.phase
        if phase is None or not phase.open:
            return  # a dropped coordinator's actors unwinding: nothing to inject into
        self._count(name)
        if name == "turn.start":
            self.armed_at.pop(turn.turn_id, None)
        wait_id = self._wait_id(name, turn)
        armed = self._take_armed(name, turn)
        if armed is not None:
            self._raise(armed, phase, turn, "raised where it was armed")
        injection = self._decide(name, turn)
        answer = True
        if injection is not None:
            answer = await self._inject(injection, phase, name, turn, wait_id)
        if wait_id is not None and answer and phase.open:
            phase.job(self._job(name, turn, wait_id))
        if name == "turn.start":
            self.armed_at[turn.turn_id] = trio.current_time()

    def notice(self, name: str, turn: Any) -> None:
        """Maybe inject at a plugin's await (``coordinator/checkpoints.py``), without holding it there.

        A fault a driver applies is handed over, and lands while the plugin awaits; a component fault
        is armed for the session's next use of the component; a store failure fails the next commit.
        """
        phase = self.phase
        if phase is None or not phase.open:
            return
        self._count(name)
        injection = self._decide(name, turn)
        if injection is None:
            return
        kind = injection.fault.kind
        if kind in RAISED_AT:
            self.armed[(turn.session_id, kind)] = injection
        elif kind == "store_failure":
            if phase.fail_next_commit(injection, turn):
                self.applied(injection, turn, "the next commit fails")
        else:
            phase.park(Park(injection=injection, turn=turn, wait_id=None))

    def observes(self, tool: Tool) -> bool:
        """A user's plugin: its awaits and declared checkpoints are checkpoints. The campaign's own
        (``coordinator.chaos.tools``) are not, so the built-in campaign's checkpoints, and the
        schedules recorded for it, stay as they were."""
        module = tool.plugin_module
        return module is not None and not module.startswith("coordinator.")

    def before_commit(self, read: Reader) -> None:
        """Inside each transaction of the phase's store, right before its commit: the watch's (an
        injected store failure, the intents it records). Nothing outside a phase: a coordinator
        opening (its recovery) or one left after its phase."""
        if self.phase is not None:
            self.phase.before_commit(read)

    def _count(self, name: str) -> None:
        self.occurrence += 1
        self.record.checkpoints.append(name)

    def _decide(self, name: str, turn: TurnScope) -> Injection | None:
        if self._schedule is not None:
            found = self._schedule.get(self.occurrence)
            return found if found is not None and found.checkpoint == name else None
        crowded = name in WAITS and self.phase is not None and _pending_waits(self.phase.view, turn) > 1
        if self.budget <= 0 or self._rng.random() >= (CROWDED_WAIT_RATE if crowded else rate_of(name)):
            return None
        self.budget -= 1
        kind = self._rng.choice((*CROWDED_FAULTS, *self._kinds) if crowded else self._kinds)
        variants = VARIANTS.get(kind)
        injection = Injection(
            self.occurrence, name, Fault(kind, self._rng.choice(variants) if variants else "")
        )
        self.record.decided.append(injection)
        return injection

    async def _inject(
        self, injection: Injection, phase: Phase, name: str, turn: TurnScope, wait_id: str | None
    ) -> bool:
        """Inject; returns whether a wait opened here should still be answered."""
        kind = injection.fault.kind
        if kind in RAISED_AT:
            if raised_here(kind, name):
                self._raise(injection, phase, turn, "raised")
            self.armed[(turn.session_id, kind)] = injection
            return True
        if kind == "store_failure":
            if phase.fail_next_commit(injection, turn):
                self.applied(injection, turn, "the next commit fails")
            return True
        assert kind in DRIVEN
        park = Park(injection=injection, turn=turn, wait_id=wait_id)
        phase.park(park)
        await park.released.wait()
        return park.answer

    def _take_armed(self, name: str, turn: TurnScope) -> Injection | None:
        for kind, used_at in USED_AT.items():
            if name == used_at:
                found = self.armed.pop((turn.session_id, kind), None)
                if found is not None:
                    return found
        return None

    def _raise(self, injection: Injection, phase: Phase, turn: TurnScope, effect: str) -> None:
        self.applied(injection, turn, effect)
        if injection.fault.kind == "model_error":
            self.record.failed_turns.add(turn.turn_id)
            if injection.fault.variant == "malformed":
                raise ModelError("chaos: malformed model stream (a chunk that is not JSON)")
            raise ModelError("chaos: the model failed after its retries")
        raise RuntimeError("chaos: the tool raised")

    def applied(self, injection: Injection, turn: TurnScope, effect: str) -> None:
        phase = self.phase.number if self.phase is not None else -1
        self.record.applied.append(
            Applied(
                injection=injection,
                phase=phase,
                session_id=turn.session_id,
                turn_id=turn.turn_id,
                effect=effect,
            )
        )

    def _wait_id(self, name: str, turn: TurnScope) -> str | None:
        """The request or form the actor at a wait checkpoint just opened: the last committed event."""
        if name not in WAITS:
            return None
        assert self.phase is not None
        read = self.phase.view
        last = read.events_after(read.last_seq() - 1)
        if not last or last[0].type != WAITS[name]:
            return None
        payload = last[0].payload
        return str(payload["request"]["id"] if name == "permission.wait" else payload["form"]["id"])

    def _job(self, name: str, turn: TurnScope, wait_id: str) -> Job:
        rng = self._responder_rng
        if name == "permission.wait":
            kind, choice = "permission", rng.choice(("once", "once", "once", "always", "feedback"))
        else:
            kind, choice = "form", rng.choice(("submit", "submit", "submit", "feedback"))
        think = rng.choice((0.0, 0.5, 1.0, 2.0, 3.0)) if self._thinking else self._patience
        return Job(kind=kind, session_id=turn.session_id, wait_id=wait_id, think=think, choice=choice)
