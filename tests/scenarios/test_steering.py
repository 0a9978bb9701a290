"""Steering a running turn: a steer reaches the model once, at the turn's next step boundary, as a user
message; when the turn ends or stops first, it becomes a queued turn of its own. Never lost, never twice."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from coordinator import errors
from coordinator.config import Config
from tests.conftest import RecordingModel, running

SHELL_CALL = {"tool_calls": [{"id": "call_shell", "name": "shell", "input": {"command": "echo hi"}}]}


def _user_texts(model: RecordingModel, request: int) -> list[str]:
    return [m.content or "" for m in model.requests[request].messages if m.role == "user"]


async def _waiting_for_permission(coord: Any, recorder: Any, text: str = "say hi") -> tuple[str, str, str]:
    session = await coord.create_session(title="t")
    turn_id = await coord.prompt(session.id, text)
    asked = await recorder.wait_for("permission.asked")
    return session.id, turn_id, asked.payload["request"]["id"]


async def test_a_steer_while_a_permission_waits_reaches_the_next_request(config: Config) -> None:
    model = RecordingModel.from_json([SHELL_CALL, {"text": "done"}])
    async with running(config, model=model) as (coord, recorder):
        sid, turn_id, request_id = await _waiting_for_permission(coord, recorder)
        steered = await coord.steer(sid, "also say bye", expected_turn_id=turn_id)
        assert steered.turn_id == turn_id and steered.steer_id.startswith("steer")
        await coord.reply_permission(sid, request_id, "once")
        await recorder.wait_for("session.idle")
        assert recorder.types(sid) == [
            "session.created",
            "session.turn.started",
            "session.step.started",
            "session.tool.started",
            "permission.asked",
            "permission.replied",
            "session.tool.succeeded",
            "session.step.succeeded",
            "session.turn.steered",
            "session.step.started",
            "session.step.succeeded",
            "session.execution.succeeded",
            "session.idle",
        ]
        event = recorder.of("session.turn.steered")[0]
        assert event.payload == {"turn_id": turn_id, "steer_id": steered.steer_id, "text": "also say bye"}
        # The steer is the last message of the second request, after the tool's result; the first
        # request did not have it.
        assert _user_texts(model, 0) == ["say hi"]
        second = model.requests[1].messages
        assert [m.role for m in second] == ["user", "assistant", "tool", "user"]
        assert second[-1].content == "also say bye"
        assert await coord.queued_turns(sid) == []


async def test_a_steer_with_no_running_turn_is_a_queued_turn(config: Config, autojump_clock: object) -> None:
    model = RecordingModel.from_json([{"text": "ok"}])
    async with running(config, model=model) as (coord, recorder):
        session = await coord.create_session(title="t")
        steered = await coord.steer(session.id, "hello")
        await recorder.wait_for("session.idle")
        queued = recorder.of("session.turn.queued")[0]
        assert queued.payload == {"turn_id": steered.turn_id, "text": "hello", "from_steer": steered.steer_id}
        assert recorder.types(session.id)[:3] == [
            "session.created",
            "session.turn.queued",
            "session.turn.started",
        ]
        assert recorder.of("session.turn.started")[0].payload["turn_id"] == steered.turn_id
        assert _user_texts(model, 0) == ["hello"]


async def test_a_steer_then_an_interrupt_becomes_the_next_turn(
    config: Config, autojump_clock: object
) -> None:
    model = RecordingModel.from_json([SHELL_CALL, {"text": "ok"}])
    async with running(config, model=model) as (coord, recorder):
        sid, turn_id, _ = await _waiting_for_permission(coord, recorder)
        steered = await coord.steer(sid, "change of plan")
        assert await coord.interrupt(sid)
        with trio.fail_after(60):  # the clock jumps: a steer the stop dropped fails this at once
            await recorder.wait_for("session.turn.queued")
        await recorder.wait_for("session.idle", 2)
        types = recorder.types(sid)
        interrupted = types.index("session.execution.interrupted")
        assert types[interrupted : interrupted + 4] == [
            "session.execution.interrupted",
            "session.idle",
            "session.turn.queued",
            "session.turn.started",
        ]
        assert "session.turn.steered" not in types
        queued = recorder.of("session.turn.queued")[0].payload
        assert queued["from_steer"] == steered.steer_id and queued["turn_id"] != turn_id
        # The new turn's prompt is the steer's text: the model sees it once, as that turn's prompt.
        texts = _user_texts(model, 1)
        assert texts.count("change of plan") == 1 and texts[-1] == "change of plan"


async def test_an_interrupt_then_a_steer_is_queued_at_once(config: Config, autojump_clock: object) -> None:
    model = RecordingModel.from_json([SHELL_CALL, {"text": "ok"}])
    async with running(config, model=model) as (coord, recorder):
        sid, turn_id, _ = await _waiting_for_permission(coord, recorder)
        assert await coord.interrupt(sid)
        steered = await coord.steer(sid, "after all")
        assert steered.turn_id != turn_id
        await recorder.wait_for("session.idle", 2)
        assert "session.turn.steered" not in recorder.types(sid)
        assert recorder.of("session.turn.queued")[0].payload["turn_id"] == steered.turn_id


async def test_a_steer_naming_another_turn_is_refused(config: Config, autojump_clock: object) -> None:
    model = RecordingModel.from_json([SHELL_CALL, {"text": "ok"}])
    async with running(config, model=model) as (coord, recorder):
        sid, turn_id, request_id = await _waiting_for_permission(coord, recorder)
        with pytest.raises(errors.TurnMismatch) as caught:
            await coord.steer(sid, "x", expected_turn_id="turn_other")
        assert caught.value.running_turn_id == turn_id
        await coord.reply_permission(sid, request_id, "reject")
        await recorder.wait_for("session.idle")
        with pytest.raises(errors.TurnMismatch) as caught:
            await coord.steer(sid, "x", expected_turn_id=turn_id)
        assert caught.value.running_turn_id is None
        assert await coord.store.read(lambda r: r.steers_of_session(sid)) == []
