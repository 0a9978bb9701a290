"""The embedding API (``open_coordinator``): leaving the block or cancelling its scope is a shutdown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from coordinator import open_coordinator
from coordinator.config import TimeoutsConfig
from coordinator.errors import CoordinatorClosed, SessionNotFound
from coordinator.models.scripted import ScriptedModel
from tests.conftest import ASK_SHELL, make_config

SHELL = {"tool_calls": [{"id": "c1", "name": "shell", "input": {"command": "echo hi"}}]}


async def test_cancelling_the_enclosing_scope_is_a_graceful_shutdown(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A host that cancels the scope around the coordinator suspends its turns, with reason shutdown."""
    config = make_config(tmp_path, rules=ASK_SHELL)
    session_id = ""
    with trio.CancelScope() as host:
        async with open_coordinator(
            config, model=ScriptedModel.from_json([SHELL]), synchronous="normal"
        ) as coord:
            session = await coord.create_session()
            session_id = session.id
            await coord.prompt(session.id, "go")
            async for event in coord.subscribe(after=0):
                if event.type == "permission.asked":
                    host.cancel()
                    await trio.sleep_forever()
    assert host.cancelled_caught
    async with open_coordinator(
        config, model=ScriptedModel.from_json([{"text": "ok"}]), synchronous="normal"
    ) as coord:
        types = [e.type async for e in _until(coord, "permission.asked", 2)]
        assert "session.execution.suspended" in types
        suspended = [t for t in types if t.startswith("session.execution.")]
        assert suspended == ["session.execution.suspended", "session.execution.resumed"]
        info = await coord.get_session(session_id)
        assert info.claim is not None


async def _until(coord: Any, type: str, count: int) -> Any:
    seen = 0
    async for event in coord.subscribe(after=0):
        yield event
        seen += event.type == type
        if seen == count:
            return


async def test_a_closed_coordinator_refuses_new_work(tmp_path: Path, autojump_clock: Any) -> None:
    config = make_config(tmp_path)
    async with open_coordinator(config, synchronous="normal") as coord:
        session = await coord.create_session()
        await coord.shutdown()
        with pytest.raises(CoordinatorClosed):
            await coord.prompt(session.id, "late")
        with pytest.raises(SessionNotFound):
            await coord.get_session("ses_missing")


async def test_the_demo_model_runs_shell_for_run_prompts(tmp_path: Path, autojump_clock: Any) -> None:
    """Without a script, the built-in model answers text, or calls shell for a prompt beginning run:."""
    # No tool deadline: the autojump clock would leap to it while the real shell process runs.
    config = make_config(tmp_path, timeouts=TimeoutsConfig(tool=0))
    async with open_coordinator(config, synchronous="normal") as coord:
        session = await coord.create_session()
        await coord.prompt(session.id, "run: echo embedded")
        types = [e.type async for e in _until(coord, "session.idle", 1)]
        assert "session.tool.succeeded" in types
        history = await coord.history(session.id)
        assert history[1].parts[0].output["stdout"] == "embedded\n"  # type: ignore[union-attr]


async def test_text_the_store_cannot_keep_is_an_invalid_request(tmp_path: Path, autojump_clock: Any) -> None:
    """A lone surrogate is refused with a named error, never a raw encoding error."""
    from coordinator.errors import InvalidRequest

    async with open_coordinator(make_config(tmp_path), synchronous="normal") as coord:
        with pytest.raises(InvalidRequest):
            await coord.create_session(title="bad \ud800")
        session = await coord.create_session()
        with pytest.raises(InvalidRequest):
            await coord.prompt(session.id, "bad \udfff")
        with pytest.raises(InvalidRequest):
            await coord.prompt(session.id, "")
        # The session is checked first: a prompt to no session is SessionNotFound, whatever its text.
        with pytest.raises(SessionNotFound):
            await coord.prompt("ses_missing", "")
        with pytest.raises(SessionNotFound):
            await coord.prompt("ses_missing", "go")
        assert await coord.store.read(lambda reader: reader.next_turn(session.id)) is None
