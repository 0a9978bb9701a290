"""The embedding scenarios again, from an asyncio program (``coordinator.aio``), on both backends.

Each test is a plain function running ``asyncio.run``: the coordinator runs on trio inside that loop.
A watchdog task measures how late the loop runs a timer while the coordinator works; no scenario may
leave the loop blocked past ``LOOP_BUDGET``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from coordinator._guest import EVENT_BATCH
from coordinator.aio import AioCoordinator, open_coordinator
from coordinator.config import Config
from coordinator.errors import CoordinatorClosed, SessionNotFound
from coordinator.events import Event
from coordinator.models.scripted import ScriptedModel
from tests.conftest import ASK_SHELL, make_config

SHELL_CALL = {"tool_calls": [{"id": "call_shell", "name": "shell", "input": {"command": "echo hi"}}]}
DONE = {"text": "done"}

LOOP_BUDGET = 0.25
"""Seconds the host loop may run late at most, in any scenario (a generous bound for a loaded CI
machine; the bench measures the p99, ``aio_loop_lag_ms_p99``)."""

SCENARIO_SECONDS = 60


@attrs.define
class Watchdog:
    """How late the loop ran a 2 ms timer, at worst, while it watched."""

    worst: float = 0.0

    async def watch(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(0.002)
            self.worst = max(self.worst, time.perf_counter() - asked - 0.002)


def run(scenario: Callable[[Watchdog], Awaitable[None]]) -> None:
    """Run ``scenario`` under ``asyncio.run`` with a watchdog, bounded in time."""

    async def main() -> None:
        watchdog = Watchdog()
        watching = asyncio.create_task(watchdog.watch())
        try:
            await asyncio.wait_for(scenario(watchdog), SCENARIO_SECONDS)
        finally:
            watching.cancel()
        assert watchdog.worst < LOOP_BUDGET, f"the loop ran {watchdog.worst * 1000:.0f} ms late"

    asyncio.run(main())


@attrs.define
class Events:
    """Every event of a subscription from seq 0, read by a task of the host's loop."""

    seen: list[Event] = attrs.Factory(list)
    changed: asyncio.Event = attrs.Factory(asyncio.Event)

    async def follow(self, coord: AioCoordinator) -> None:
        async for event in coord.subscribe(after=0):
            self.seen.append(event)
            self.changed.set()

    async def wait_for(self, type: str, count: int = 1) -> Event:
        while len(self.of(type)) < count:
            self.changed.clear()
            await self.changed.wait()
        return self.of(type)[count - 1]

    def of(self, type: str) -> list[Event]:
        return [e for e in self.seen if e.type == type]

    def types(self) -> list[str]:
        return [e.type for e in self.seen]


@contextlib.asynccontextmanager
async def opened(
    config: Config, script: list[dict[str, Any]]
) -> AsyncIterator[tuple[AioCoordinator, Events]]:
    model = ScriptedModel.from_json(script)
    async with open_coordinator(config, model=model, synchronous="normal") as coord:
        events = Events()
        following = asyncio.create_task(events.follow(coord))
        try:
            yield coord, events
        finally:
            await coord.shutdown()
            await asyncio.wait_for(following, 10)  # the subscription ends with the shutdown


def ask_config(tmp_path: Path) -> Config:
    return make_config(tmp_path, rules=ASK_SHELL)


def test_a_turn_runs_and_its_events_and_history_read_back(tmp_path: Path) -> None:
    async def scenario(watchdog: Watchdog) -> None:
        async with opened(make_config(tmp_path), [{"text": "hi there"}]) as (coord, events):
            session = await coord.create_session(title="x")
            turn_id = await coord.prompt(session.id, "hello")
            await events.wait_for("session.idle")
            assert events.types() == [
                "session.created",
                "session.turn.started",
                "session.step.started",
                "session.step.succeeded",
                "session.execution.succeeded",
                "session.idle",
            ]
            assert events.of("session.turn.started")[0].payload["turn_id"] == turn_id
            history = await coord.history(session.id)
            assert [m.role for m in history] == ["user", "assistant"]
            assert (await coord.get_session(session.id)).last_outcome == "succeeded"

    run(scenario)


def test_a_decline_releases_the_claim_and_never_resumes(tmp_path: Path) -> None:
    async def scenario(watchdog: Watchdog) -> None:
        config = ask_config(tmp_path)
        async with opened(config, [SHELL_CALL, DONE]) as (coord, events):
            session = await coord.create_session()
            await coord.prompt(session.id, "say hi")
            asked = await events.wait_for("permission.asked")
            await coord.reply_permission(session.id, asked.payload["request"]["id"], "reject")
            await events.wait_for("session.idle")
            terminal = events.of("session.execution.interrupted")[0]
            assert terminal.payload["reason"] == {
                "type": "declined",
                "via": "permission",
                "call_id": "call_shell",
            }
            info = await coord.get_session(session.id)
            assert info.claim is None and info.last_outcome == "declined"
        async with opened(config, [{"text": "never"}]) as (coord, events):
            assert (await coord.get_session(session.id)).status == "idle"
            assert "session.execution.resumed" not in events.types()

    run(scenario)


def test_an_interrupt_revokes_the_pending_wait_with_its_reason(tmp_path: Path) -> None:
    async def scenario(watchdog: Watchdog) -> None:
        async with opened(ask_config(tmp_path), [SHELL_CALL, DONE]) as (coord, events):
            session = await coord.create_session()
            await coord.prompt(session.id, "say hi")
            await events.wait_for("permission.asked")
            assert await coord.interrupt(session.id, by="api")
            await events.wait_for("session.idle")
            revoked = events.of("permission.revoked")[0]
            assert revoked.payload["reason"] == {"type": "interrupt", "by": "api"}
            assert await coord.pending_permissions(session.id) == []

    run(scenario)


async def shut_down_while_asked(
    tmp_path: Path, leave: Callable[[AioCoordinator, str], Awaitable[None]]
) -> None:
    """A permission pending when ``leave`` ends the block; the next start restores it with its id,
    and an answer runs the tool once and the turn succeeds."""
    config = ask_config(tmp_path)
    async with opened(config, [SHELL_CALL, DONE]) as (coord, events):
        session = await coord.create_session()
        await coord.prompt(session.id, "say hi")
        asked = await events.wait_for("permission.asked")
        request_id = asked.payload["request"]["id"]
        await leave(coord, session.id)
    assert events.types()[-2:] == ["session.step.failed", "session.execution.suspended"]
    assert events.of("session.execution.suspended")[0].payload["reason"] == {"type": "shutdown"}
    async with opened(config, [DONE]) as (coord, events):
        pending = await coord.pending_permissions(session.id)
        assert [p.id for p in pending] == [request_id]
        await coord.reply_permission(session.id, request_id, "once")
        await events.wait_for("session.idle")
        assert events.types().count("session.execution.resumed") == 1
        assert events.of("session.tool.succeeded")[0].payload["call_id"] == "call_shell"
        assert (await coord.get_session(session.id)).last_outcome == "succeeded"


def test_leaving_the_block_keeps_a_pending_permission_for_the_next_start(tmp_path: Path) -> None:
    async def leave(coord: AioCoordinator, session_id: str) -> None:
        return None

    run(lambda watchdog: shut_down_while_asked(tmp_path, leave))


def test_an_exception_in_the_block_is_a_graceful_shutdown_then_raised(tmp_path: Path) -> None:
    async def leave(coord: AioCoordinator, session_id: str) -> None:
        raise LookupError("the host's own failure")

    async def scenario(watchdog: Watchdog) -> None:
        with pytest.raises(LookupError):
            await shut_down_while_asked(tmp_path, leave)
        await shut_down_while_asked(tmp_path / "again", lambda coord, session_id: asyncio.sleep(0))

    (tmp_path / "again").mkdir()
    run(scenario)


def test_cancelling_the_task_that_holds_the_block_is_a_shutdown(tmp_path: Path) -> None:
    async def scenario(watchdog: Watchdog) -> None:
        config = ask_config(tmp_path)
        asked = asyncio.Event()
        seen: list[str] = []

        async def host() -> None:
            async with opened(config, [SHELL_CALL, DONE]) as (coord, events):
                session = await coord.create_session()
                seen.append(session.id)
                await coord.prompt(session.id, "say hi")
                await events.wait_for("permission.asked")
                asked.set()
                await asyncio.sleep(3600)

        holder = asyncio.create_task(host())
        await asked.wait()
        holder.cancel()
        with pytest.raises(asyncio.CancelledError):
            await holder
        async with opened(config, [DONE]) as (coord, events):
            [pending] = await coord.pending_permissions(seen[0])
            await coord.reply_permission(seen[0], pending.id, "once")
            await events.wait_for("session.idle")
            assert events.types().count("session.execution.resumed") == 1
            suspended = [e for e in events.seen if e.type == "session.execution.suspended"]
            assert [e.payload["reason"] for e in suspended] == [{"type": "shutdown"}]

    run(scenario)


def test_named_errors_reach_the_caller_and_calls_after_the_shutdown_are_refused(tmp_path: Path) -> None:
    async def scenario(watchdog: Watchdog) -> None:
        async with open_coordinator(make_config(tmp_path), model=ScriptedModel.from_json([DONE])) as coord:
            with pytest.raises(SessionNotFound):
                await coord.get_session("ses_nobody")
            with pytest.raises(SessionNotFound):
                async for _ in coord.subscribe(session_id="ses_nobody"):
                    pass
            await coord.shutdown()
            with pytest.raises(CoordinatorClosed):
                await coord.create_session()

    run(scenario)


def test_a_cancelled_call_cancels_its_trio_task(tmp_path: Path) -> None:
    """A host task cancelled while its call waits (here, a subscription's next event) leaves the
    coordinator serving others."""

    async def scenario(watchdog: Watchdog) -> None:
        async with opened(make_config(tmp_path), [DONE]) as (coord, events):
            session = await coord.create_session()
            waiting = coord.subscribe(after=10**6)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(waiting.__anext__(), 0.2)
            await waiting.aclose()
            await coord.prompt(session.id, "go")
            await events.wait_for("session.idle")

    run(scenario)


def test_a_reader_that_falls_behind_still_gets_every_event_once_in_order(tmp_path: Path) -> None:
    """More events than the hand-over holds arrive while a subscription is not read: the trio side
    stops reading and falls back on the store; the reader then gets every event, in seq order."""
    turns = EVENT_BATCH // 6 + 20  # a turn is six events

    async def scenario(watchdog: Watchdog) -> None:
        async with opened(make_config(tmp_path), [DONE] * turns) as (coord, events):
            session = await coord.create_session()
            behind = coord.subscribe(after=0)
            first = await behind.__anext__()  # started, then left unread
            for count in range(1, turns + 1):
                await coord.prompt(session.id, "go")
                await events.wait_for("session.idle", count)
            read = [first]
            while len(read) < len(events.seen):
                read.append(await asyncio.wait_for(behind.__anext__(), 10))
            await behind.aclose()
            assert len(events.seen) > EVENT_BATCH
            assert [e.seq for e in read] == [e.seq for e in events.seen]
            assert [e.seq for e in read] == list(range(1, len(read) + 1))

    run(scenario)


def test_a_dropped_subscription_ends_its_trio_side(tmp_path: Path) -> None:
    async def scenario(watchdog: Watchdog) -> None:
        async with opened(make_config(tmp_path), [DONE]) as (coord, events):
            await coord.create_session()
            await events.wait_for("session.created")
            dropped = coord.subscribe(after=0)
            await dropped.__anext__()
            assert _subscribers(coord) == 2
            del dropped  # no cycle holds it: it is finalized now (no gc.collect: it would block the loop)
            for _ in range(200):
                if _subscribers(coord) == 1:
                    break
                await asyncio.sleep(0.01)
            assert _subscribers(coord) == 1

    run(scenario)


def _subscribers(coord: AioCoordinator) -> int:
    for line in coord.metrics_text().splitlines():
        if line.startswith("coordinator_event_subscribers "):
            return int(float(line.split()[1]))
    raise AssertionError("no coordinator_event_subscribers in the metrics")


def test_the_asyncio_coordinator_has_every_method_of_the_trio_one() -> None:
    """Same names, same parameters: a method added to ``Coordinator`` must be added here too."""
    import inspect

    from coordinator import Coordinator

    public = {name for name in dir(Coordinator) if not name.startswith("_") and name != "store"}
    assert public <= set(dir(AioCoordinator))
    for name in public:
        ours, theirs = getattr(AioCoordinator, name), getattr(Coordinator, name)
        if callable(theirs):
            assert inspect.signature(ours).parameters.keys() == inspect.signature(theirs).parameters.keys(), (
                name
            )


def test_a_steer_the_queue_a_soft_stop_and_an_edited_approval_from_asyncio(tmp_path: Path) -> None:
    async def scenario(watchdog: Watchdog) -> None:
        async with opened(ask_config(tmp_path), [SHELL_CALL, DONE]) as (coord, events):
            session = await coord.create_session()
            turn_id = await coord.prompt(session.id, "say hi")
            asked = await events.wait_for("permission.asked")
            steered = await coord.steer(session.id, "then this", expected_turn_id=turn_id)
            queued = await coord.prompt(session.id, "later")
            assert [q.turn_id for q in await coord.queued_turns(session.id)] == [queued]
            await coord.cancel_turn(session.id, queued)
            assert await coord.interrupt(session.id, when="after_step")
            edited = {"command": "echo edited"}
            request_id = asked.payload["request"]["id"]
            replied = await coord.reply_permission(session.id, request_id, "once", input=edited)
            assert replied.input == edited
            await events.wait_for("session.idle")
            reason = events.of("session.execution.interrupted")[0].payload["reason"]
            assert reason == {"type": "interrupt", "by": "embedder", "soft": True}
            assert events.of("session.turn.cancelled")[0].payload["turn_id"] == queued
            await events.wait_for("session.idle", 2)  # the steer, queued by the soft stop, ran
            assert events.of("session.turn.queued")[0].payload["from_steer"] == steered.steer_id

    run(scenario)
