"""Two coordinators on one database (as two processes would be): a session runs in exactly one of
them, decisions reach the one that runs it, and the survivor takes over when the other dies."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import trio

from coordinator.chaos import crash
from tests.conftest import ASK_SHELL, make_config, running
from tests.scenarios.test_stop_matrix import DONE, SHELL_CALL


async def test_a_reply_made_elsewhere_reaches_the_running_turn(tmp_path: Path, autojump_clock: Any) -> None:
    """The reply is committed by B; A, which runs the turn, applies it; B's subscribers see A's events."""
    config = make_config(tmp_path, rules=ASK_SHELL)
    async with running(config, [SHELL_CALL, DONE]) as (a, a_events), running(config, [DONE]) as (b, b_events):
        session = await a.create_session()
        await a.prompt(session.id, "go")
        asked = await b_events.wait_for("permission.asked")
        await b.reply_permission(session.id, asked.payload["request"]["id"], "once")
        await a_events.wait_for("session.idle")
        await b_events.wait_for("session.idle")
        assert a_events.types() == b_events.types()
        assert [e.seq for e in b_events.events] == list(range(1, len(b_events.events) + 1))
        assert len(a_events.of("session.turn.started")) == 1


async def test_an_interrupt_made_elsewhere_stops_the_turn(tmp_path: Path, autojump_clock: Any) -> None:
    config = make_config(tmp_path, rules=ASK_SHELL)
    async with running(config, [SHELL_CALL, DONE]) as (a, a_events), running(config, [DONE]) as (b, b_events):
        session = await a.create_session()
        await a.prompt(session.id, "go")
        await b_events.wait_for("permission.asked")
        assert await b.interrupt(session.id, by="api") is True
        assert await b.interrupt(session.id, by="api") is False
        await a_events.wait_for("session.idle")
        assert a_events.of("session.execution.interrupted")[0].payload["reason"] == {
            "type": "interrupt",
            "by": "api",
        }


async def test_the_survivor_takes_over_a_dead_coordinators_turn(tmp_path: Path, autojump_clock: Any) -> None:
    """When A dies, B resumes A's turn as a crash, once, with the same permission request id."""
    config = make_config(tmp_path, rules=ASK_SHELL)
    async with running(config, [DONE]) as (b, b_events):
        async with running(config, [SHELL_CALL, DONE]) as (a, a_events):
            session = await a.create_session()
            await a.prompt(session.id, "go")
            asked = await a_events.wait_for("permission.asked")
            await trio.testing.wait_all_tasks_blocked()
            await crash(a)
        resumed = await b_events.wait_for("session.execution.resumed")
        assert resumed.payload["after"] == "crash"
        restored = await b_events.wait_for("permission.asked", 2)
        assert restored.payload["request"]["id"] == asked.payload["request"]["id"]
        info = await b.get_session(session.id)
        assert info.claim is not None and info.claim.owner == b.instance_id
        await b.reply_permission(session.id, restored.payload["request"]["id"], "once")
        await b_events.wait_for("session.idle")
        assert len(b_events.of("session.execution.resumed")) == 1


async def test_a_zombie_owner_never_starts_a_tool_after_a_takeover(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A's call waits for permission; B takes the claim over; a reply then reaches A: A must not run
    the tool (B, which restores the same call, may), so no tool ever starts twice (model finding 1)."""
    config = make_config(tmp_path, rules=ASK_SHELL)
    marker = tmp_path / "started"
    call = {"tool_calls": [{"id": "call_1", "name": "shell", "input": {"command": f"echo hi > {marker}"}}]}
    async with running(config, [call, DONE]) as (a, a_events), running(config, [DONE]) as (b, _):
        session = await a.create_session()
        await a.prompt(session.id, "go")
        asked = await a_events.wait_for("permission.asked")
        await trio.testing.wait_all_tasks_blocked()
        # B takes the claim over, as it does once A's lease has run out (A is frozen, then thaws).
        epoch = await b.store.write(
            lambda tx: tx.acquire_claim(session.id, b.instance_id, "now", takeover_from=a.instance_id)
        )
        assert epoch > 1
        await a.reply_permission(session.id, asked.payload["request"]["id"], "once")
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(50):  # real time: a started shell writes its file within milliseconds
            if marker.exists():
                break
            await trio.to_thread.run_sync(time.sleep, 0.02)
        assert not marker.exists()
        assert a_events.types()[-2:] == ["permission.asked", "permission.replied"]


async def test_a_turn_being_resumed_is_not_taken_from_its_live_owner(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """C has claimed a suspended turn and not yet counted its resume: D's watch must leave it to C,
    or the two could take it from each other for ever (model finding 4)."""
    config = make_config(tmp_path, rules=ASK_SHELL)
    async with running(config, [SHELL_CALL, DONE]) as (a, a_events):
        session = await a.create_session()
        turn_id = await a.prompt(session.id, "go")
        await a_events.wait_for("permission.asked")
    async with running(config, [DONE]) as (c, c_events):
        await c_events.wait_for("session.execution.resumed")
        await c_events.wait_for("permission.asked", 2)
        # C between its claim and its resume: the turn still reads suspended, the claim is C's.
        await c.store.write(lambda tx: tx.set_turn_status(turn_id, "suspended"))
        claim = await c.store.read(lambda reader: reader.get_claim(session.id))
        assert claim is not None and claim.owner == c.instance_id and claim.state == "held"
        async with running(config, [DONE]):
            await trio.sleep(5)  # D's start and several watch ticks of both
            now = await c.store.read(lambda reader: reader.get_claim(session.id))
            assert now is not None and (now.owner, now.epoch) == (c.instance_id, claim.epoch)
