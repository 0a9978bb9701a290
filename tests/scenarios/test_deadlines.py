"""Deadlines: a tool's fails the call and the turn goes on; a restored wait keeps its original deadline."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import trio

from coordinator import clock
from coordinator.config import TimeoutsConfig
from tests.conftest import ASK_SHELL, make_config, running
from tests.processes import wait_gone
from tests.scenarios.test_stop_matrix import DONE, SHELL_CALL, SLOW_CALL, config_for


async def test_a_tool_deadline_fails_the_call_and_the_turn_goes_on(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """``[timeouts] tool`` fails the call with type timeout; the model sees it and the turn succeeds."""
    async with running(config_for(tmp_path, tool=20), [SLOW_CALL, DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        error = recorder.of("session.tool.failed")[0].payload["error"]
        assert error == {"type": "timeout", "message": "the tool deadline of 20s passed", "started": True}
        assert recorder.of("session.idle")[0].payload["outcome"] == "succeeded"
        assert trio.current_time() == pytest.approx(20, abs=1)


@pytest.mark.parametrize(("down_for", "waits_for"), [(60, 40), (150, 0)])
async def test_a_restored_wait_keeps_its_original_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, down_for: float, waits_for: float, autojump_clock: Any
) -> None:
    """The deadline is measured from when the request was asked, not from the restart."""
    config = make_config(tmp_path, rules=ASK_SHELL, timeouts=TimeoutsConfig(permission=100))
    asked_at = time.time()
    monkeypatch.setattr(clock, "wall", lambda: asked_at)
    async with running(config, [SHELL_CALL, DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("permission.asked")
    monkeypatch.setattr(clock, "wall", lambda: asked_at + down_for)
    async with running(config, [DONE]) as (coord, recorder):
        restarted_at = trio.current_time()
        await recorder.wait_for("permission.asked", 2)
        await recorder.wait_for("session.idle")
        assert trio.current_time() - restarted_at == pytest.approx(waits_for, abs=1)
        revoked = recorder.of("permission.revoked")[0].payload["reason"]
        assert revoked == {"type": "timeout", "scope": "permission", "after": 100.0}
        assert recorder.of("session.idle")[0].payload["outcome"] == "timed_out"


async def test_a_tool_deadline_kills_the_whole_process_group(tmp_path: Path) -> None:
    """On a shell call's deadline nothing it started keeps running: child and grandchild are gone."""
    from coordinator.records import Rule

    pids = tmp_path / "pids"
    command = f"sleep 30 & echo $! >> {pids}; echo $$ >> {pids}; sleep 30"
    call = {"tool_calls": [{"id": "c1", "name": "shell", "input": {"command": command}}]}
    config = make_config(tmp_path, rules=(Rule(effect="allow"),), timeouts=TimeoutsConfig(tool=0.5))
    async with running(config, [call, DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        with trio.fail_after(10):
            await recorder.wait_for("session.idle")
        assert recorder.of("session.tool.failed")[0].payload["error"]["type"] == "timeout"
    for pid in map(int, pids.read_text().split()):
        assert await wait_gone(pid), f"process {pid} outlived its tool call"
