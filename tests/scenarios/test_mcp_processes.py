"""A stdio MCP server's processes never outlive the coordinator that started them: a graceful
shutdown ends its whole group, and after a kill -9 the next start kills what was left."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import trio

from coordinator.client import CoordinatorClient
from coordinator.records import Form
from tests.backends import db_for
from tests.mcp import eventually
from tests.mcp.servers import FIXTURE
from tests.scenarios.test_mcp_calls import recorded
from tests.servers import start_server, write_config

pytestmark = pytest.mark.slow


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


async def ready_servers(url: str) -> list[dict[str, object]]:
    with trio.fail_after(20):
        async with httpx.AsyncClient() as http:
            while True:
                servers = (await http.get(f"{url}/api/mcp")).json()
                if servers and servers[0]["status"] == "ready":
                    return list(servers)
                await trio.sleep(0.05)


async def children(record: Path, count: int) -> list[int]:
    def found() -> list[int]:
        return [r["child"] for r in recorded(record) if r["kind"] == "child"]

    await eventually(lambda: len(found()) >= count, 20)
    return found()


async def test_no_server_process_outlives_its_coordinator_killed_or_shut_down(tmp_path: Path) -> None:
    record = tmp_path / "fixture.jsonl"
    mcp = (
        f'[[mcp]]\nname = "fx"\ncommand = {json.dumps([sys.executable, str(FIXTURE), "stdio"])}\n'
        f'env = {{ FIXTURE_RECORD = {json.dumps(str(record))}, FIXTURE_CHILD = "1" }}\n'
    )
    config = write_config(tmp_path / "coordinator.toml", model_url="http://127.0.0.1:9/v1", extra=mcp)
    db = db_for(tmp_path)
    first = await start_server(config, db, cwd=tmp_path)
    try:
        await ready_servers(first.url)
        (child,) = await children(record, 1)
        await first.kill()
        # The server itself exits once its stdin closes; the child of its group would live on.
        assert alive(child)
        second = await start_server(config, db, cwd=tmp_path)
        await eventually(lambda: not alive(child))
        assert second.logged("orphaned_process_group_killed")
        await ready_servers(second.url)
        _, child_of_second = await children(record, 2)
        assert await second.terminate() == 0
        assert not alive(child_of_second)
    finally:
        await first.kill()


async def test_a_2026_question_survives_a_kill_9_with_its_id_and_its_answer_runs_the_call_once(
    tmp_path: Path,
) -> None:
    record = tmp_path / "fixture.jsonl"
    script = [{"tool_calls": [{"id": "c0", "name": "fx__ask_state", "input": {}}]}, {"text": "thanks"}]
    (tmp_path / "script.json").write_text(json.dumps(script))
    config = tmp_path / "coordinator.toml"
    config.write_text(
        '[server]\nshutdown_grace = 5\n[model]\nprovider = "scripted"\nscript = "script.json"\n'
        '[[permission]]\naction = "*"\nresource = "*"\neffect = "allow"\n'
        f'[[mcp]]\nname = "fx"\ncommand = {json.dumps([sys.executable, str(FIXTURE), "stdio"])}\n'
        f"env = {{ FIXTURE_RECORD = {json.dumps(str(record))} }}\n"
    )
    db = db_for(tmp_path)
    first = await start_server(config, db, cwd=tmp_path)
    try:
        await ready_servers(first.url)
        async with CoordinatorClient(first.url) as client:
            session = await client.create_session("durable")
            await client.prompt(session.id, "go")
            forms: list[Form] = []

            async def asked() -> bool:
                forms[:] = await client.pending_forms(session.id)
                return bool(forms)

            await eventually_async(asked)
        await first.kill()
        second = await start_server(config, db, cwd=tmp_path)
        async with CoordinatorClient(second.url) as client:
            # The same form, pending again once the crashed turn resumes.
            again: list[Form] = []

            async def restored() -> bool:
                again[:] = await client.pending_forms(session.id)
                return bool(again)

            await eventually_async(restored, 30)
            assert again[0].id == forms[0].id
            await client.submit_form(session.id, again[0].id, {"color": "green"})

            async def finished() -> bool:
                return (await client.get_session(session.id)).status == "idle"

            await eventually_async(finished, 30)
            assert (await client.get_session(session.id)).last_outcome == "succeeded"
        assert [r["answered"] for r in recorded(record) if r["kind"] == "ask_state"] == [[], ["pick"]]
        assert await second.terminate() == 0
    finally:
        await first.kill()


async def eventually_async(holds: Callable[[], Awaitable[bool]], seconds: float = 20) -> None:
    with trio.fail_after(seconds):
        while not await holds():  # noqa: ASYNC110 (another process changes it)
            await trio.sleep(0.05)
