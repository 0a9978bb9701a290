"""Every stop cause at every point a turn can be stopped: the exact events, the stored state, the claim.

Points: while the model streams, while a tool runs, while a permission waits. Causes: interrupt,
decline, the permission, turn and step deadlines, a model error, and shutdown (with its resume).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from coordinator import Coordinator
from coordinator.config import Config, PluginConfig, TimeoutsConfig
from coordinator.errors import ModelError
from coordinator.models.base import ModelReply, ModelRequest
from coordinator.models.scripted import ScriptedModel
from coordinator.records import Rule
from tests.conftest import Recorder, make_config, running

SLOW_PLUGIN = """
import trio

async def slow(seconds: float) -> str:
    \"\"\"Sleep, then say so.\"\"\"
    await trio.sleep(seconds)
    return "slept"
"""

RULES = (Rule(action="*", resource="*", effect="allow"), Rule(action="shell", resource="*", effect="ask"))
SHELL_CALL = {"tool_calls": [{"id": "call_1", "name": "shell", "input": {"command": "echo hi"}}]}
SLOW_CALL = {"tool_calls": [{"id": "call_1", "name": "slow", "input": {"seconds": 1000}}]}
SLOW_MODEL = {"text": "late", "delay": 1000}
DONE = {"text": "done"}

PREFIX = ["session.created", "session.turn.started", "session.step.started"]
STOP_IN_MODEL = [*PREFIX, "session.step.failed"]
STOP_IN_TOOL = [*PREFIX, "session.tool.started", "session.tool.failed", "session.step.failed"]
STOP_IN_PERMISSION = [
    *PREFIX,
    "session.tool.started",
    "permission.asked",
    "permission.revoked",
    "session.tool.failed",
    "session.step.failed",
]


def config_for(tmp_path: Path, **timeouts: float) -> Config:
    (tmp_path / "slowtools.py").write_text(SLOW_PLUGIN)
    config = make_config(tmp_path, rules=RULES, timeouts=TimeoutsConfig(**timeouts))
    return attrs.evolve(config, plugin=(PluginConfig(entry="slowtools:slow"),))


async def start_turn(coord: Coordinator, recorder: Recorder, point: str) -> str:
    session = await coord.create_session(title="matrix")
    await coord.prompt(session.id, "go")
    waits = {
        "model": "session.step.started",
        "tool": "session.tool.started",
        "permission": "permission.asked",
    }
    await recorder.wait_for(waits[point])
    await trio.testing.wait_all_tasks_blocked()
    return session.id


SCRIPTS = {"model": [SLOW_MODEL], "tool": [SLOW_CALL, DONE], "permission": [SHELL_CALL, DONE]}
EXPECTED = {"model": STOP_IN_MODEL, "tool": STOP_IN_TOOL, "permission": STOP_IN_PERMISSION}


@pytest.mark.parametrize("point", ["model", "tool", "permission"])
async def test_interrupt_stops_the_turn_as_interrupted(
    tmp_path: Path, point: str, autojump_clock: Any
) -> None:
    """An interrupt at any point settles every child, then ends the turn interrupted and releases the claim."""
    async with running(config_for(tmp_path), SCRIPTS[point]) as (coord, recorder):
        session_id = await start_turn(coord, recorder, point)
        assert await coord.interrupt(session_id) is True
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id) == [
            *EXPECTED[point],
            "session.execution.interrupted",
            "session.idle",
        ]
        reason = {"type": "interrupt", "by": "embedder"}
        assert recorder.of("session.execution.interrupted")[0].payload["reason"] == reason
        assert recorder.of("session.step.failed")[0].payload["reason"] == reason
        if point != "model":
            assert recorder.of("session.tool.failed")[0].payload["error"]["type"] == "interrupted"
        if point == "permission":
            assert recorder.of("permission.revoked")[0].payload["reason"] == reason
            assert await coord.pending_permissions(session_id) == []
        await assert_released(coord, session_id, "interrupted")


@pytest.mark.parametrize(
    ("point", "scope"),
    [
        ("model", "turn"),
        ("tool", "turn"),
        ("permission", "turn"),
        ("model", "step"),
        ("permission", "permission"),
    ],
)
async def test_deadline_stops_the_turn_as_timed_out(
    tmp_path: Path, point: str, scope: str, autojump_clock: Any
) -> None:
    """A turn, step or permission deadline ends the turn with reason timeout naming its scope."""
    async with running(config_for(tmp_path, **{scope: 30}), SCRIPTS[point]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        reason = {"type": "timeout", "scope": scope, "after": 30.0}
        assert recorder.types(session.id) == [
            *EXPECTED[point],
            "session.execution.interrupted",
            "session.idle",
        ]
        assert recorder.of("session.execution.interrupted")[0].payload["reason"] == reason
        if point != "model":
            assert recorder.of("session.tool.failed")[0].payload["error"]["type"] == "timeout"
        await assert_released(coord, session.id, "timed_out")
        assert trio.current_time() == pytest.approx(30, abs=1)


async def test_reject_while_another_call_waits_revokes_the_other_first(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """Declining one of two pending calls publishes the decision, then the other's revocation, then both failures."""
    two = {
        "tool_calls": [
            {"id": "call_a", "name": "shell", "input": {"command": "echo a"}},
            {"id": "call_b", "name": "shell", "input": {"command": "echo b"}},
        ]
    }
    async with running(config_for(tmp_path), [two, DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        first = await recorder.wait_for("permission.asked", 1)
        await recorder.wait_for("permission.asked", 2)
        await coord.reply_permission(session.id, first.payload["request"]["id"], "reject")
        await recorder.wait_for("session.idle")
        tail = recorder.types(session.id)[-7:]
        assert tail == [
            "permission.replied",
            "permission.revoked",
            "session.tool.failed",
            "session.tool.failed",
            "session.step.failed",
            "session.execution.interrupted",
            "session.idle",
        ]
        errors = {
            e.payload["call_id"]: e.payload["error"]["type"] for e in recorder.of("session.tool.failed")
        }
        assert errors == {"call_a": "declined", "call_b": "interrupted"}
        await assert_released(coord, session.id, "declined")


@attrs.define
class FailingModel:
    """A model that fails after its retries, as the OpenAI client reports it."""

    async def complete(self, request: ModelRequest) -> ModelReply:
        await trio.sleep(1)
        raise ModelError(message="HTTP 500 after 5 attempts")

    async def aclose(self) -> None:
        return None


async def test_model_error_fails_the_turn(tmp_path: Path, autojump_clock: Any) -> None:
    """A model that cannot answer ends the turn failed with reason error, and the claim is released."""
    async with running(config_for(tmp_path), model=FailingModel()) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        assert recorder.types(session.id) == [*STOP_IN_MODEL, "session.execution.failed", "session.idle"]
        reason = recorder.of("session.execution.failed")[0].payload["reason"]
        assert reason == {"type": "error", "message": "model error: HTTP 500 after 5 attempts"}
        await assert_released(coord, session.id, "failed")


@attrs.define
class CountingModel:
    """Wraps the scripted model and keeps every request it was sent."""

    inner: ScriptedModel
    requests: list[ModelRequest] = attrs.Factory(list)

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.requests.append(request)
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        return None


SHUTDOWN_EXPECTED = {
    "model": [*STOP_IN_MODEL, "session.execution.suspended"],
    "tool": [*STOP_IN_TOOL, "session.execution.suspended"],
    "permission": [
        *PREFIX,
        "session.tool.started",
        "permission.asked",
        "session.step.failed",
        "session.execution.suspended",
    ],
}


@pytest.mark.parametrize("point", ["model", "tool", "permission"])
async def test_shutdown_suspends_and_the_next_start_resumes_exactly_once(
    tmp_path: Path, point: str, autojump_clock: Any
) -> None:
    """Shutdown keeps the claim (suspended) and waits; the next start resumes the turn once, and only once."""
    config = config_for(tmp_path)
    first = CountingModel(ScriptedModel.from_json([*SCRIPTS[point]]))
    async with running(config, model=first) as (coord, recorder):
        session_id = await start_turn(coord, recorder, point)
    assert recorder.types(session_id) == SHUTDOWN_EXPECTED[point]
    assert recorder.of("session.execution.suspended")[0].payload["reason"] == {"type": "shutdown"}

    second = CountingModel(ScriptedModel.from_json([DONE]))
    async with running(config, model=second) as (coord, recorder):
        info = await coord.get_session(session_id)
        assert info.status in ("busy", "suspended")
        await recorder.wait_for("session.execution.resumed")
        if point == "permission":
            restored = await recorder.wait_for("permission.asked", 2)
            assert restored.payload["restored"] is True
            original = recorder.of("permission.asked")[0].payload["request"]["id"]
            assert restored.payload["request"]["id"] == original
            assert second.requests == []  # a restored wait asks the model nothing
            await coord.reply_permission(session_id, original, "once")
        await recorder.wait_for("session.idle")
        resumed = recorder.of("session.execution.resumed")
        assert [e.payload["after"] for e in resumed] == ["shutdown"]
        assert recorder.types(session_id)[-2:] == ["session.execution.succeeded", "session.idle"]
        assert len(second.requests) == 1
        assert "The server restarted" in (second.requests[0].messages[-1].content or "")
        await assert_released(coord, session_id, "succeeded")

    async with running(config, model=CountingModel(ScriptedModel.from_json([DONE]))) as (coord, recorder):
        await trio.testing.wait_all_tasks_blocked()
        assert [e.payload["after"] for e in recorder.of("session.execution.resumed")] == ["shutdown"]


async def assert_released(coord: Coordinator, session_id: str, outcome: str) -> None:
    info = await coord.get_session(session_id)
    assert (info.status, info.claim, info.last_outcome) == ("idle", None, outcome)
