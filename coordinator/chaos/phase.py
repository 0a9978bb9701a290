"""One phase of a run: a coordinator opened on the run's database, driven until it ends, then the store read.

The first phase creates the sessions and prompts (or runs the user's scenario); ``Driver`` applies the
faults and decides when the phase is over.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import trio

from coordinator import Coordinator, errors, open_coordinator
from coordinator.chaos.driver import TICK, Driver, RunState
from coordinator.chaos.injector import MAX_FAULTS, Job, Phase
from coordinator.chaos.person import respond
from coordinator.chaos.record import PhaseRecord, read_view
from coordinator.chaos.scenario import ScenarioRun, run_scenario
from coordinator.chaos.watch import CommitWatch, check_bus, check_tasks, subscribe_all
from coordinator.events import Event
from coordinator.store import Reader, open_read_view


async def run_phase(state: RunState, number: int) -> PhaseRecord:
    """Open a coordinator on the run's database and drive it until the phase ends; then read the store."""
    outcome = PhaseOutcome()
    try:
        await _drive_coordinator(state, number, outcome)
    except Exception as exc:  # the coordinator itself failed: a store failure it did not survive, a bug
        state.record.violate(6, f"phase {number}: the coordinator failed: {exc!r}")
    finally:
        if state.injector.phase is not None:
            state.injector.phase.open = False
        state.injector.phase = None
    check_tasks(state.record, number)
    with open_read_view(state.world.config.server.db) as reader:
        view = read_view(reader, state.record.sessions, list(state.record.turns))
    # The driver shuts a wedged coordinator down (turns still running are suspended), and leaving
    # ``open_coordinator`` after the coordinator failed does the same. A phase that is done has
    # nothing left to suspend.
    shutdown = outcome.end in ("wedged", "failed") or any(
        a.phase == number and a.injection.fault.kind == "shutdown" for a in state.record.applied
    )
    return PhaseRecord(
        number=number,
        end=outcome.end,
        instance_id=outcome.instance_id,
        first_seq=outcome.first_seq,
        shutdown=shutdown,
        store_failed=outcome.store_failed,
        view=view,
    )


@attrs.define
class PhaseOutcome:
    """How a phase ended, filled in as it goes (a coordinator that fails leaves ``end`` as it is)."""

    end: str = "failed"
    instance_id: str = ""
    first_seq: int = 0
    store_failed: bool = False


async def _drive_coordinator(state: RunState, number: int, outcome: PhaseOutcome) -> None:
    config = state.world.config
    async with open_coordinator(
        config, model=state.model, synchronous="normal", injector=state.injector
    ) as coord:
        # The checks read the store with no await (so the run's schedule is the same with them or
        # without): on a read connection of their own, which sees every commit once it is made.
        with open_read_view(config.server.db) as view:
            await _drive_open_coordinator(state, number, outcome, coord, view)


async def _drive_open_coordinator(
    state: RunState, number: int, outcome: PhaseOutcome, coord: Coordinator, view: Reader
) -> None:
    send, receive = trio.open_memory_channel[Any](math.inf)
    jobs_send, jobs_receive = trio.open_memory_channel[Job](math.inf)
    watch = CommitWatch(
        state.record, coord.store, view, number, lambda: send.send_nowait(TICK), ledger=state.ledger
    )
    state.injector.phase = Phase(
        number=number,
        park=send.send_nowait,
        job=jobs_send.send_nowait,
        fail_next_commit=watch.arm_failure,
        before_commit=watch.before_commit,
        view=view,
    )
    outcome.instance_id, outcome.first_seq = coord.instance_id, view.last_seq()
    seen: list[Event] = []
    async with trio.open_nursery() as nursery:
        responder, subscriber = trio.CancelScope(), trio.CancelScope()
        nursery.start_soon(respond, coord, jobs_receive, responder)
        nursery.start_soon(subscribe_all, coord, outcome.first_seq, seen, subscriber)
        scenario = None
        if number == 0 and state.world.scenario is not None:
            scenario = ScenarioRun()
            user = state.world.scenario
            nursery.start_soon(run_scenario, user, coord, scenario, state.record, watch.tick)
        elif number == 0:
            await _servers_ready(coord)
            await _start_sessions(state, coord)
        outcome.end = await Driver(state, coord, number, receive, watch, scenario).drive()
        outcome.store_failed = watch.fired
        if scenario is not None:
            scenario.scope.cancel()
        responder.cancel()
        if outcome.end == "stuck":
            subscriber.cancel()
    if outcome.end != "stuck":
        check_bus(state.record, view, outcome.first_seq, seen)


# Seconds the first phase waits for its MCP servers before its first prompt (a server's process
# starts in about a second); later phases resume at once, with their servers still connecting.
MCP_READY_SECONDS = 15.0


async def _servers_ready(coord: Coordinator) -> None:
    with trio.move_on_after(MCP_READY_SECONDS):
        while any(server.status != "ready" for server in coord.mcp_servers()):  # noqa: ASYNC110
            await trio.sleep(0.02)


async def _start_sessions(state: RunState, coord: Coordinator) -> None:
    for script, prompts in zip(state.world.scripts, state.world.prompts, strict=True):
        session = await _retrying(coord.create_session, "chaos")
        if session.id not in state.record.sessions:  # discovered already when sub-agents run
            state.record.sessions.append(session.id)
        state.model.assign(session.id, script)
        for number in range(prompts):
            turn_id = await _retrying(coord.prompt, session.id, f"prompt {number}")
            state.record.turns[turn_id] = session.id


async def _retrying(function: Any, *args: Any) -> Any:
    """Call a coordinator method again after an injected store failure (each fails one commit)."""
    for _ in range(MAX_FAULTS):
        try:
            return await function(*args)
        except errors.StoreError:
            continue
    return await function(*args)
