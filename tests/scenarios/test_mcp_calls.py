"""MCP servers' tools called through whole turns: results, progress, failures, and stops that reach
the server (a fixture server of the SDK's own, over stdio, recording what it received)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from coordinator import Coordinator
from coordinator.config import Config, McpConfig
from tests.conftest import ASK_SHELL, RecordingModel, make_config, running
from tests.mcp import eventually

FIXTURE = Path(__file__).parent.parent / "mcp" / "fixture_server.py"

pytestmark = pytest.mark.slow


def mcp_config(tmp_path: Path, *, revision: str = "2025", **overrides: Any) -> tuple[Config, Path]:
    """The fixture server over stdio, speaking the 2025 handshake only (``revision="2025"``), or
    2026-07-28 too (``revision=""``), and the file it records in."""
    record = tmp_path / "fixture.jsonl"
    env = {"FIXTURE_RECORD": str(record), "FIXTURE_REVISION": revision}
    server = McpConfig(name="fx", command=(sys.executable, str(FIXTURE), "stdio"), env=env)
    config = attrs.evolve(make_config(tmp_path, rules=ASK_SHELL, **overrides), mcp=(server,))
    return config, record


def recorded(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    # The server may be writing its last line: only whole lines are read.
    lines = record.read_text().split("\n")[:-1]
    return [json.loads(line) for line in lines]


async def until_ready(coord: Coordinator) -> None:
    await eventually(lambda: coord.mcp_servers()[0].status == "ready", 20)


async def prompted(coord: Coordinator) -> str:
    """Once the fixture server is ready: a new session, prompted; its id."""
    await until_ready(coord)
    session = await coord.create_session(title="t")
    await coord.prompt(session.id, "go")
    return session.id


def calls(*items: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "tool_calls": [{"id": f"c{i}", "name": name, "input": args} for i, (name, args) in enumerate(items)]
    }


async def test_a_call_returns_the_servers_content_and_the_model_sees_it(tmp_path: Path) -> None:
    config, record = mcp_config(tmp_path)
    model = RecordingModel.from_json([calls(("fx__echo", {"text": "hi"})), {"text": "done"}])
    async with running(config, model=model) as (coord, recorder):
        await until_ready(coord)
        state = coord.mcp_servers()[0]
        assert state.protocol == "2025-11-25" and "fx__echo" in state.tools
        await prompted(coord)
        await recorder.wait_for("session.idle")
        succeeded = recorder.of("session.tool.succeeded")[0].payload
        assert succeeded["output"]["structured"] == {"said": "hi"}
        offered = {tool.name for tool in model.requests[0].tools}
        assert {"fx__echo", "fx__slow", "fx__ask"} <= offered
    assert [r["kind"] for r in recorded(record)] == ["echo"]


async def until_recorded(record: Path, kind: str, count: int = 1) -> list[dict[str, Any]]:
    def of_kind() -> list[dict[str, Any]]:
        return [r for r in recorded(record) if r["kind"] == kind]

    await eventually(lambda: len(of_kind()) >= count)
    return of_kind()


async def test_progress_notifications_are_published_each_in_order(tmp_path: Path) -> None:
    config, _ = mcp_config(tmp_path)
    async with running(config, [calls(("fx__steps", {"count": 3})), {"text": "done"}]) as (coord, recorder):
        session_id = await prompted(coord)
        await recorder.wait_for("session.idle")
        progress = [e.payload for e in recorder.of("session.tool.progress")]
        assert progress == [
            {"call_id": "c0", "progress": {"progress": step, "total": 3, "message": f"step {step}"}}
            for step in (1, 2, 3)
        ]
        types = recorder.types(session_id)
        assert types.index("session.tool.started") < types.index("session.tool.progress")
        assert types.index("session.tool.progress") < types.index("session.tool.succeeded")


async def test_a_result_with_is_error_fails_the_call_and_the_turn_goes_on(tmp_path: Path) -> None:
    config, _ = mcp_config(tmp_path)
    model = RecordingModel.from_json([calls(("fx__fail", {})), {"text": "saw it"}])
    async with running(config, model=model) as (coord, recorder):
        await prompted(coord)
        await recorder.wait_for("session.idle")
        error = recorder.of("session.tool.failed")[0].payload["error"]
        assert error["type"] == "error" and "the fixture failed on purpose" in error["message"]
        assert recorder.of("session.execution.succeeded")
        tool = next(m for m in model.requests[1].messages if m.role == "tool")
        assert "the fixture failed on purpose" in (tool.content or "")


async def test_an_interrupt_reaches_the_server_and_settles_the_call_at_once(tmp_path: Path) -> None:
    config, record = mcp_config(tmp_path)
    async with running(config, [calls(("fx__slow", {"seconds": 30})), {"text": "x"}]) as (coord, recorder):
        session_id = await prompted(coord)
        await until_recorded(record, "start")
        assert await coord.interrupt(session_id)
        await recorder.wait_for("session.idle")
        failed = recorder.of("session.tool.failed")[0].payload["error"]
        assert failed["type"] == "interrupted" and failed["started"] is True
        assert recorder.of("session.execution.interrupted")[0].payload["reason"]["type"] == "interrupt"
        (cancelled,) = await until_recorded(record, "cancelled_notification")
        start = next(r for r in recorded(record) if r["kind"] == "start")
        assert cancelled["params"]["requestId"] == int(start["request_id"])
        await until_recorded(record, "call_cancelled")


async def test_a_server_that_ignores_the_cancellation_never_holds_the_turn(tmp_path: Path) -> None:
    config, record = mcp_config(tmp_path)
    script = [calls(("fx__stubborn", {"seconds": 30})), {"text": "x"}]
    async with running(config, script) as (coord, recorder):
        session_id = await prompted(coord)
        await until_recorded(record, "start")
        with trio.fail_after(3):
            assert await coord.interrupt(session_id)
            await recorder.wait_for("session.idle")
        await until_recorded(record, "cancelled_notification")
        assert not [r for r in recorded(record) if r["kind"] == "done"]


async def test_the_servers_timeout_is_the_calls_deadline_and_the_server_is_told(tmp_path: Path) -> None:
    config, record = mcp_config(tmp_path)
    config = attrs.evolve(config, mcp=(attrs.evolve(config.mcp[0], timeout=0.3),))
    model = RecordingModel.from_json([calls(("fx__slow", {"seconds": 30})), {"text": "late"}])
    async with running(config, model=model) as (coord, recorder):
        await prompted(coord)
        await recorder.wait_for("session.idle")
        error = recorder.of("session.tool.failed")[0].payload["error"]
        assert error["type"] == "timeout" and "0.3s" in error["message"]
        assert recorder.of("session.execution.succeeded")  # a tool's deadline: the turn goes on
        await until_recorded(record, "cancelled_notification")


async def test_a_server_that_dies_mid_call_fails_the_call_and_is_connected_again(tmp_path: Path) -> None:
    config, record = mcp_config(tmp_path)
    script = [
        calls(("fx__crash", {})),
        {"text": "ok"},
        calls(("fx__echo", {"text": "back"})),
        {"text": "fine"},
    ]
    async with running(config, script) as (coord, recorder):
        session_id = await prompted(coord)
        await recorder.wait_for("session.idle")
        error = recorder.of("session.tool.failed")[0].payload["error"]
        assert error["type"] == "error" and "'fx'" in error["message"]
        await eventually(lambda: coord.mcp_servers()[0].status != "ready")
        assert coord.mcp_servers()[0].status in ("failed", "connecting")
        await until_ready(coord)
        await coord.prompt(session_id, "again")
        await recorder.wait_for("session.idle", 2)
        assert recorder.of("session.tool.succeeded")[0].payload["output"]["structured"] == {"said": "back"}
    pids = {r["pid"] for r in recorded(record)}
    assert len(pids) == 2


async def test_a_server_that_cannot_start_is_failed_with_why_and_the_coordinator_serves(
    tmp_path: Path,
) -> None:
    missing = McpConfig(name="gone", command=(str(tmp_path / "no-such-server"),))
    config = attrs.evolve(make_config(tmp_path, rules=ASK_SHELL), mcp=(missing,))
    async with running(config, [calls(("gone__read", {})), {"text": "ok"}]) as (coord, recorder):
        await eventually(lambda: coord.mcp_servers()[0].status == "failed")
        state = coord.mcp_servers()[0]
        assert (
            state.error is not None and "cannot start it" in state.error and "no-such-server" in state.error
        )
        session = await coord.create_session(title="t")
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        error = recorder.of("session.tool.failed")[0].payload["error"]
        assert error["type"] == "error" and "'gone' is not ready (failed" in error["message"]
