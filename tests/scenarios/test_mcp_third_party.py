"""MCP servers written by others: npm's ``server-everything`` (its long-running tool ignores a
cancellation and keeps sending progress; its question is not withdrawn when its call is cancelled)
and PyPI's ``mcp-server-time``, each over stdio with no network.

Without npm's server installed (``make unit`` installs it where npm exists) these skip with one
line, except with ``CI=true``, where that fails them."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import attrs
import pytest
import trio

from coordinator import Coordinator
from coordinator.config import McpConfig
from tests.conftest import ASK_SHELL, make_config, running
from tests.mcp import eventually

pytestmark = pytest.mark.slow

EVERYTHING = (
    Path(__file__).parent.parent / "mcp" / "node_modules" / "@modelcontextprotocol" / "server-everything"
)
MISSING = None
if shutil.which("node") is None:
    MISSING = "node is not installed"
elif not (EVERYTHING / "dist" / "index.js").exists():
    MISSING = "npm's server-everything is not installed (cd tests/mcp && npm ci)"
IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture
def everything() -> McpConfig:
    if MISSING is not None:
        if IN_CI:
            pytest.fail(f"CI=true and npm's MCP server cannot run: {MISSING}")
        pytest.skip(MISSING)
    command = (shutil.which("node") or "node", str(EVERYTHING / "dist" / "index.js"), "stdio")
    return McpConfig(name="ev", command=command)


def calls(name: str, args: dict[str, object]) -> dict[str, object]:
    return {"tool_calls": [{"id": "c0", "name": name, "input": args}]}


async def has_tool(coord: Coordinator, name: str) -> None:
    await eventually(lambda: name in coord.mcp_servers()[0].tools, 30)


async def test_server_everything_ignores_the_cancel_and_the_turn_is_never_held(
    tmp_path: Path, everything: McpConfig
) -> None:
    config = attrs.evolve(make_config(tmp_path, rules=ASK_SHELL), mcp=(everything,))
    script = [
        calls("ev__echo", {"message": "hello"}),
        {"text": "ok"},
        calls("ev__trigger-long-running-operation", {"duration": 60, "steps": 120}),
        {"text": "never"},
    ]
    async with running(config, script) as (coord, recorder):
        await has_tool(coord, "ev__trigger-long-running-operation")
        session = await coord.create_session(title="t")
        await coord.prompt(session.id, "echo")
        await recorder.wait_for("session.idle")
        echoed = recorder.of("session.tool.succeeded")[0].payload["output"]["content"][0]["text"]
        assert "hello" in echoed
        await coord.prompt(session.id, "long")
        first = await recorder.wait_for("session.tool.progress")
        assert first.payload["progress"]["total"] == 120
        with trio.fail_after(2):
            assert await coord.interrupt(session.id)
            await recorder.wait_for("session.idle", 2)
        failed = recorder.of("session.tool.failed")[0]
        assert failed.payload["error"]["type"] == "interrupted"
        # It goes on sending progress for the cancelled call: none of it becomes an event.
        await trio.sleep(1.5)
        late = [e for e in recorder.of("session.tool.progress") if e.seq > failed.seq]
        assert late == []
        assert coord.mcp_servers()[0].status == "ready"


async def test_server_everythings_question_is_a_typed_form_and_revoked_by_an_interrupt(
    tmp_path: Path, everything: McpConfig
) -> None:
    config = attrs.evolve(make_config(tmp_path, rules=ASK_SHELL), mcp=(everything,))
    ask = calls("ev__trigger-elicitation-request", {})
    async with running(config, [ask, ask, {"text": "thanks"}]) as (coord, recorder):
        await has_tool(coord, "ev__trigger-elicitation-request")
        session = await coord.create_session(title="t")
        await coord.prompt(session.id, "ask")
        form = (await recorder.wait_for("form.asked")).payload["form"]
        assert form["source"] == {"mcp": "ev"}
        options = {q["id"]: q.get("options") for q in form["questions"]}
        assert options["untitledMultipleSelectEnum"] == ["Guitar", "Piano", "Violin", "Drums", "Bass"]
        assert options["titledSingleSelectEnum"] == ["hero-1", "hero-2", "hero-3"]
        assert await coord.interrupt(session.id)
        await recorder.wait_for("session.idle")
        assert recorder.of("form.revoked")[0].payload["reason"]["type"] == "interrupt"
        await coord.prompt(session.id, "ask again")
        form = (await recorder.wait_for("form.asked", 2)).payload["form"]
        required = form["schema"].get("required", [])
        answers = {
            "name": "Ada Lovelace",
            "check": "true",
            "integer": "7",
            "untitledMultipleSelectEnum": ["Piano"],
        }
        answers = {k: v for k, v in answers.items() if k in form["schema"]["properties"]}
        for name in required:
            answers.setdefault(name, form["schema"]["properties"][name].get("default", "x"))
        submitted = await coord.submit_form(session.id, form["id"], answers)
        assert submitted.answers is not None and submitted.answers.get("integer") == 7
        await recorder.wait_for("session.idle", 2)
        output = recorder.of("session.tool.succeeded")[0].payload["output"]
        assert "Ada Lovelace" in str(output)


async def test_mcp_server_time_from_pypi_answers_a_call(tmp_path: Path) -> None:
    server = McpConfig(
        name="time", command=(sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC")
    )
    config = attrs.evolve(make_config(tmp_path, rules=ASK_SHELL), mcp=(server,))
    script = [calls("time__get_current_time", {"timezone": "Europe/Paris"}), {"text": "ok"}]
    async with running(config, script) as (coord, recorder):
        await has_tool(coord, "time__get_current_time")
        assert coord.mcp_servers()[0].protocol is not None
        session = await coord.create_session(title="t")
        await coord.prompt(session.id, "time")
        await recorder.wait_for("session.idle")
        output = recorder.of("session.tool.succeeded")[0].payload["output"]
        assert "Europe/Paris" in str(output)
