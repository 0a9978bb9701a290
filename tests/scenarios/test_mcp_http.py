"""An MCP server over Streamable HTTP: its tools called, a stop sent to it, and a server that goes
away and comes back."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from coordinator.config import McpConfig
from tests.conftest import ASK_SHELL, make_config, running
from tests.mcp import eventually
from tests.mcp.servers import free_port, http_fixture
from tests.scenarios.test_mcp_calls import calls, recorded, until_ready, until_recorded

pytestmark = [
    pytest.mark.slow,
    # The MCP SDK's HTTP client (httpx2, httpcore2) leaves the byte streams of the SSE responses it
    # aborts (a cancelled call, a closed session) to the collector: its own, not a resource of ours.
    pytest.mark.filterwarnings(
        r"ignore:Exception ignored in. <async_generator object:pytest.PytestUnraisableExceptionWarning"
    ),
]


async def test_a_call_over_http_succeeds_and_an_interrupt_reaches_the_server(tmp_path: Path) -> None:
    record = tmp_path / "fixture.jsonl"
    async with http_fixture(record) as url:
        server = McpConfig(name="web", url=url, headers={"X-Test": "yes"})
        config = attrs.evolve(make_config(tmp_path, rules=ASK_SHELL), mcp=(server,))
        script = [
            calls(("web__echo", {"text": "over http"})),
            {"text": "ok"},
            calls(("web__slow", {"seconds": 30})),
        ]
        async with running(config, script) as (coord, recorder):
            await until_ready(coord)
            session = await coord.create_session(title="t")
            await coord.prompt(session.id, "go")
            await recorder.wait_for("session.idle")
            output = recorder.of("session.tool.succeeded")[0].payload["output"]
            assert output["structured"] == {"said": "over http"}
            await coord.prompt(session.id, "slow")
            await until_recorded(record, "start")
            assert await coord.interrupt(session.id)
            await recorder.wait_for("session.idle", 2)
            assert recorder.of("session.tool.failed")[0].payload["error"]["type"] == "interrupted"
            # The 2026-07-28 way over HTTP: the call's request stream is closed, and the server
            # cancels the call.
            assert coord.mcp_servers()[0].protocol == "2026-07-28"
            await until_recorded(record, "call_cancelled")


async def test_a_server_that_is_down_is_failed_named_and_connected_once_it_is_up(tmp_path: Path) -> None:
    record = tmp_path / "fixture.jsonl"
    port = free_port()
    server = McpConfig(name="web", url=f"http://127.0.0.1:{port}/mcp")
    config = attrs.evolve(make_config(tmp_path, rules=ASK_SHELL), mcp=(server,))
    script = [calls(("web__echo", {"text": "a"})), {"text": "ok"}]
    async with running(config, script) as (coord, recorder):
        await eventually(lambda: coord.mcp_servers()[0].status == "failed")
        state = coord.mcp_servers()[0]
        assert state.tools == [] and state.error
        session = await coord.create_session(title="t")
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        error = recorder.of("session.tool.failed")[0].payload["error"]
        assert error["type"] == "error" and "'web' is not ready" in error["message"]
        async with http_fixture(record, port=port):
            await until_ready(coord)
            assert "web__echo" in coord.mcp_servers()[0].tools
    assert recorded(record) == []


async def test_a_question_over_http_is_a_form_and_its_answer_retries_the_call(tmp_path: Path) -> None:
    record = tmp_path / "fixture.jsonl"
    async with http_fixture(record) as url:
        server = McpConfig(name="web", url=url)
        config = attrs.evolve(make_config(tmp_path, rules=ASK_SHELL), mcp=(server,))
        script = [calls(("web__ask_state", {})), {"text": "ok"}]
        async with running(config, script) as (coord, recorder):
            await until_ready(coord)
            session = await coord.create_session(title="t")
            await coord.prompt(session.id, "go")
            form = (await recorder.wait_for("form.asked")).payload["form"]
            assert form["source"] == {"mcp": "web"}
            await coord.submit_form(session.id, form["id"], {"color": "red", "n": 2})
            await recorder.wait_for("session.idle")
            output = recorder.of("session.tool.succeeded")[0].payload["output"]
            assert output["content"][0]["text"] == "accept: {'color': 'red', 'n': 2} (fixed-state)"
    assert [r["answered"] for r in recorded(record) if r["kind"] == "ask_state"] == [[], ["pick"]]
