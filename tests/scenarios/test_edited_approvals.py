"""An approval with an edited input, and what the model is told about a call a stop cut off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from coordinator import errors
from coordinator.config import Config
from coordinator.models.history import EDITED_NOTE, STOPPED_BEFORE_RUNNING, STOPPED_WHILE_RUNNING
from coordinator.records import Rule
from tests.conftest import RecordingModel, make_config, running

SHELL_CALL = {"tool_calls": [{"id": "call_shell", "name": "shell", "input": {"command": "echo hi"}}]}


async def test_an_approval_with_an_edited_input_runs_it_and_tells_the_model(config: Config) -> None:
    model = RecordingModel.from_json([SHELL_CALL, {"text": "done"}])
    async with running(config, model=model) as (coord, recorder):
        session = await coord.create_session(title="t")
        await coord.prompt(session.id, "say hi")
        asked = await recorder.wait_for("permission.asked")
        request_id = asked.payload["request"]["id"]
        with pytest.raises(errors.InvalidInput) as caught:
            await coord.reply_permission(session.id, request_id, "once", input={"command": 5})
        assert caught.value.problems == ["input.command: 5 is not of type 'string'"]
        with pytest.raises(errors.InvalidInput):
            await coord.reply_permission(session.id, request_id, "once", input=["echo"])
        edited = {"command": "echo edited"}
        replied = await coord.reply_permission(session.id, request_id, "once", input=edited)
        assert replied.input == edited
        await recorder.wait_for("session.idle")
        assert recorder.of("permission.replied")[0].payload == {
            "request_id": request_id,
            "session_id": session.id,
            "decision": "once",
            "input": edited,
        }
        succeeded = recorder.of("session.tool.succeeded")[0].payload
        assert "edited" in json.dumps(succeeded["output"])
        # The model's next request: its call as it asked it, the result with the note.
        messages = model.requests[1].messages
        assistant = next(m for m in messages if m.role == "assistant")
        assert assistant.tool_calls[0].input == {"command": "echo hi"}
        tool = next(m for m in messages if m.role == "tool")
        assert tool.content is not None and tool.content.endswith(EDITED_NOTE + '{"command":"echo edited"}')
        history = await coord.history(session.id)
        part = history[1].parts[0]
        assert part.input == {"command": "echo hi"} and part.edited_input == edited


async def test_a_call_stopped_before_its_tool_began_did_not_run(
    config: Config, autojump_clock: object
) -> None:
    model = RecordingModel.from_json([SHELL_CALL, {"text": "ok"}])
    async with running(config, model=model) as (coord, recorder):
        session = await coord.create_session(title="t")
        await coord.prompt(session.id, "say hi")
        await recorder.wait_for("permission.asked")
        assert await coord.interrupt(session.id)
        await recorder.wait_for("session.idle")
        error = recorder.of("session.tool.failed")[0].payload["error"]
        assert error == {
            "type": "interrupted",
            "message": "interrupted by the embedding program",
            "started": False,
        }
        await coord.prompt(session.id, "again")
        await recorder.wait_for("session.idle", 2)
        tool = next(m for m in model.requests[1].messages if m.role == "tool")
        assert json.loads(tool.content or "")["note"] == STOPPED_BEFORE_RUNNING


async def test_a_call_stopped_while_its_tool_ran_may_have_taken_effect(tmp_path: Path) -> None:
    config = make_config(tmp_path, rules=(Rule(action="*", resource="*", effect="allow"),))
    sleeping = {"tool_calls": [{"id": "call_shell", "name": "shell", "input": {"command": "exec sleep 60"}}]}
    model = RecordingModel.from_json([sleeping, {"text": "ok"}])
    async with running(config, model=model) as (coord, recorder):
        session = await coord.create_session(title="t")
        await coord.prompt(session.id, "sleep")
        with trio.fail_after(10):
            while await coord.store.read(lambda r: r.process_group_of(session.id, "call_shell")) is None:  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert await coord.interrupt(session.id)
        await recorder.wait_for("session.idle")
        error = recorder.of("session.tool.failed")[0].payload["error"]
        assert error["type"] == "interrupted" and error["started"] is True
        await coord.prompt(session.id, "again")
        await recorder.wait_for("session.idle", 2)
        tool = next(m for m in model.requests[1].messages if m.role == "tool")
        assert json.loads(tool.content or "")["note"] == STOPPED_WHILE_RUNNING
