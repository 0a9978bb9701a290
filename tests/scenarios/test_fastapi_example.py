"""``examples/fastapi_app.py`` as a real uvicorn process, on both backends.

A chat is created and prompted over the app's own routes; the model (an OpenAI-compatible endpoint
served by this test) asks for ``shell``, which asks permission. The event stream is read from the
app's SSE route. Then SIGTERM to uvicorn while the permission is pending: its lifespan's exit is the
coordinator's graceful shutdown. A second uvicorn on the same database resumes the turn once: the
permission is pending again with the same id, the answer runs the tool, and the model was asked
exactly twice in all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.backends import db_for
from tests.model_server import serve_model
from tests.servers import REPO, server_env, write_config

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

SHELL_CALL = {"tool_calls": [{"id": "call_shell", "name": "shell", "input": {"command": "echo hi"}}]}


@asynccontextmanager
async def uvicorn(config: Path, db: str, folder: Path) -> AsyncIterator[str]:
    """The example app under uvicorn on a free port, until the block ends (then SIGTERM, reaped)."""
    with trio.socket.socket() as probe:
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "uvicorn", "examples.fastapi_app:app", "--port", str(port)]
    argv += ["--timeout-graceful-shutdown", "2", "--log-level", "warning"]
    env = server_env(COORDINATOR_CONFIG=str(config), COORDINATOR_DB=db)
    with (folder / "uvicorn.log").open("ab") as log:
        process = await trio.lowlevel.open_process(
            argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        await until_up(url, process)
        yield url
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            # uvicorn raises the signal it caught again once its shutdown is over: -SIGTERM.
            assert await process.wait() in (0, -signal.SIGTERM), (folder / "uvicorn.log").read_text()
    finally:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
            with trio.move_on_after(5, shield=True):
                await process.wait()


async def until_up(url: str, process: trio.Process) -> None:
    async with httpx.AsyncClient() as client:
        with trio.fail_after(30):
            while True:
                assert process.returncode is None, "uvicorn exited while starting"
                try:
                    if (await client.get(url + "/docs")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await trio.sleep(0.05)


async def events_until(client: httpx.AsyncClient, url: str, last_type: str) -> list[dict[str, Any]]:
    """The chat's events from its SSE route, up to the first of ``last_type``.

    The stream is left by a cancellation: breaking out would leave httpx's iterators unclosed.
    """
    seen: list[dict[str, Any]] = []
    with trio.CancelScope() as reading:
        async with client.stream("GET", url) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    seen.append(json.loads(line.removeprefix("data: ")))
                    if seen[-1]["type"] == last_type:
                        reading.cancel()
    assert seen and seen[-1]["type"] == last_type, f"the stream ended before {last_type}"
    return seen


@pytest.mark.wall_clock_limit(120)
async def test_the_fastapi_example_suspends_on_sigterm_and_resumes_once(tmp_path: Path) -> None:
    async with serve_model([SHELL_CALL, {"text": "done"}]) as model:
        config = write_config(tmp_path / "coordinator.toml", model_url=model.base_url)
        db = db_for(tmp_path)
        async with uvicorn(config, db, tmp_path) as url, httpx.AsyncClient(base_url=url) as client:
            created = await client.post("/chats", json={"text": "say hi"})
            assert created.status_code == 201
            session_id = created.json()["session_id"]
            seen = await events_until(client, f"/chats/{session_id}/events", "permission.asked")
            assert [e["type"] for e in seen] == [
                "session.created",
                "session.turn.started",
                "session.step.started",
                "session.tool.started",
                "permission.asked",
            ]
            request_id = seen[-1]["request"]["id"]
            assert (await client.get("/chats/ses_nobody/permissions")).status_code == 404
        async with uvicorn(config, db, tmp_path) as url, httpx.AsyncClient(base_url=url) as client:
            pending = (await client.get(f"/chats/{session_id}/permissions")).json()
            assert [p["id"] for p in pending] == [request_id]
            answered = await client.post(
                f"/chats/{session_id}/permissions/{request_id}", json={"decision": "once"}
            )
            assert answered.json() == {"id": request_id, "status": "replied"}
            events = await events_until(client, f"/chats/{session_id}/events?after=5", "session.idle")
            types = [e["type"] for e in events]
            assert types.count("session.execution.resumed") == 1
            assert types[-4:] == [
                "session.step.started",
                "session.step.succeeded",
                "session.execution.succeeded",
                "session.idle",
            ]
            assert "session.execution.suspended" in types
        assert len(model.requests) == 2
