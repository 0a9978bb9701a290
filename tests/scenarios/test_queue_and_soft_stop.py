"""The prompt queue (listed, cancelled, jumped by an interrupting prompt) and the soft stop."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator import errors
from coordinator.config import Config
from tests.conftest import RecordingModel, running

SHELL_CALL = {"tool_calls": [{"id": "call_shell", "name": "shell", "input": {"command": "echo hi"}}]}


async def _waiting_for_permission(coord: Any, recorder: Any) -> tuple[str, str, str]:
    session = await coord.create_session(title="t")
    turn_id = await coord.prompt(session.id, "first")
    asked = await recorder.wait_for("permission.asked")
    return session.id, turn_id, asked.payload["request"]["id"]


def _started_prompts(recorder: Any) -> list[str]:
    return [e.payload["prompt"] for e in recorder.of("session.turn.started")]


async def test_the_queue_lists_and_cancels_queued_turns(config: Config, autojump_clock: object) -> None:
    model = RecordingModel.from_json([SHELL_CALL, {"text": "ok"}])
    async with running(config, model=model) as (coord, recorder):
        sid, first, _request_id = await _waiting_for_permission(coord, recorder)
        second = await coord.prompt(sid, "second")
        third = await coord.prompt(sid, "third")
        queued = await coord.queued_turns(sid)
        assert [(q.turn_id, q.text) for q in queued] == [(second, "second"), (third, "third")]
        await coord.cancel_turn(sid, second)
        assert [q.turn_id for q in await coord.queued_turns(sid)] == [third]
        with pytest.raises(errors.TurnNotQueued):
            await coord.cancel_turn(sid, second)
        with pytest.raises(errors.TurnNotQueued) as caught:
            await coord.cancel_turn(sid, first)
        assert caught.value.turn_status == "running"
        with pytest.raises(errors.TurnNotFound):
            await coord.cancel_turn(sid, "turn_nope")
        # An interrupt stops only the running turn: the queued one runs next.
        assert await coord.interrupt(sid)
        await recorder.wait_for("session.idle", 2)
        assert _started_prompts(recorder) == ["first", "third"]
        assert recorder.of("session.turn.cancelled")[0].payload == {"turn_id": second}


async def test_an_interrupt_can_cancel_the_queue(config: Config, autojump_clock: object) -> None:
    model = RecordingModel.from_json([SHELL_CALL, {"text": "ok"}])
    async with running(config, model=model) as (coord, recorder):
        sid, _first, _ = await _waiting_for_permission(coord, recorder)
        second = await coord.prompt(sid, "second")
        steered = await coord.steer(sid, "steer")
        assert await coord.interrupt(sid, queued="cancel")
        await recorder.wait_for("session.idle")
        cancelled = [e.payload["turn_id"] for e in recorder.of("session.turn.cancelled")]
        steer_turn = recorder.of("session.turn.queued")[0].payload
        assert steer_turn["from_steer"] == steered.steer_id
        assert cancelled == [second, steer_turn["turn_id"]]  # in queue order: the steer queued last
        assert await coord.queued_turns(sid) == []
        assert _started_prompts(recorder) == ["first"]
        info = await coord.get_session(sid)
        assert info.status == "idle" and info.last_outcome == "interrupted"


async def test_an_interrupting_prompt_runs_next(config: Config, autojump_clock: object) -> None:
    model = RecordingModel.from_json([SHELL_CALL, {"text": "ok"}])
    async with running(config, model=model) as (coord, recorder):
        sid, first, _ = await _waiting_for_permission(coord, recorder)
        await coord.prompt(sid, "second")
        urgent = await coord.prompt(sid, "urgent", mode="interrupt")
        await recorder.wait_for("session.idle", 3)
        assert _started_prompts(recorder) == ["first", "urgent", "second"]
        terminal = recorder.of("session.execution.interrupted")[0].payload
        assert terminal == {"turn_id": first, "reason": {"type": "interrupt", "by": "api"}}
        assert recorder.of("session.turn.started")[1].payload["turn_id"] == urgent


async def test_a_soft_stop_lets_the_step_finish_then_stops(config: Config) -> None:
    model = RecordingModel.from_json([SHELL_CALL, {"text": "never asked"}])
    async with running(config, model=model) as (coord, recorder):
        sid, _turn_id, request_id = await _waiting_for_permission(coord, recorder)
        assert await coord.interrupt(sid, when="after_step")
        assert not await coord.interrupt(sid, when="after_step")  # first wins
        # The wait stays open: the person still answers it, and the call runs.
        await coord.reply_permission(sid, request_id, "once")
        await recorder.wait_for("session.idle")
        types = recorder.types(sid)
        assert types[types.index("permission.replied") :] == [
            "permission.replied",
            "session.tool.succeeded",
            "session.step.succeeded",
            "session.execution.interrupted",
            "session.idle",
        ]
        reason = recorder.of("session.execution.interrupted")[0].payload["reason"]
        assert reason == {"type": "interrupt", "by": "embedder", "soft": True}
        assert len(model.requests) == 1  # stopped before its next model request
        info = await coord.get_session(sid)
        assert info.last_outcome == "interrupted"


async def test_a_plain_interrupt_after_a_soft_stop_stops_at_once(
    config: Config, autojump_clock: object
) -> None:
    model = RecordingModel.from_json([SHELL_CALL, {"text": "never asked"}])
    async with running(config, model=model) as (coord, recorder):
        sid, _turn_id, request_id = await _waiting_for_permission(coord, recorder)
        assert await coord.interrupt(sid, when="after_step")
        assert await coord.interrupt(sid)
        await recorder.wait_for("session.idle")
        reason = recorder.of("session.execution.interrupted")[0].payload["reason"]
        assert reason == {"type": "interrupt", "by": "embedder"}
        assert recorder.of("permission.revoked")[0].payload["request_id"] == request_id


async def test_a_soft_stop_on_the_last_step_lets_the_turn_succeed(
    config: Config, autojump_clock: object
) -> None:
    model = RecordingModel.from_json([{"chunks": ["a", "b"], "chunk_delay": 1.0}])
    async with running(config, model=model) as (coord, recorder):
        session = await coord.create_session(title="t")
        await coord.prompt(session.id, "hi")
        await recorder.wait_for("session.step.started")
        assert await coord.interrupt(session.id, when="after_step")
        idle = await recorder.wait_for("session.idle")
        assert idle.payload["outcome"] == "succeeded"
