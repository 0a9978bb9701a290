"""Seed 000: a declined tool call ends the turn as declined, releases the claim, and never resumes."""

from __future__ import annotations

from coordinator.config import Config
from tests.conftest import running

SHELL_CALL = {"tool_calls": [{"id": "call_shell", "name": "shell", "input": {"command": "echo hi"}}]}


async def test_reject_is_a_declined_stop_not_a_shutdown(config: Config, autojump_clock: object) -> None:
    """The decline must be recorded as declined, with the claim released, so a restart cannot resume it."""
    async with running(config, [SHELL_CALL, {"text": "done"}]) as (coord, recorder):
        session = await coord.create_session(title="t")
        await coord.prompt(session.id, "say hi")
        asked = await recorder.wait_for("permission.asked")
        request_id = asked.payload["request"]["id"]
        await coord.reply_permission(session.id, request_id, "reject")
        await recorder.wait_for("session.idle")
        assert recorder.types(session.id) == [
            "session.created",
            "session.turn.started",
            "session.step.started",
            "session.tool.started",
            "permission.asked",
            "permission.replied",
            "session.tool.failed",
            "session.step.failed",
            "session.execution.interrupted",
            "session.idle",
        ]
        terminal = recorder.of("session.execution.interrupted")[0]
        assert terminal.payload["reason"] == {
            "type": "declined",
            "via": "permission",
            "call_id": "call_shell",
        }
        failed = recorder.of("session.tool.failed")[0]
        assert failed.payload["error"]["type"] == "declined"
        info = await coord.get_session(session.id)
        assert info.status == "idle" and info.claim is None and info.last_outcome == "declined"
    async with running(config, [{"text": "never"}]) as (coord, recorder):
        info = await coord.get_session(session.id)
        assert info.status == "idle"
        assert "session.execution.resumed" not in recorder.types()
