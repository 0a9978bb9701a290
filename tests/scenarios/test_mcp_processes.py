"""A stdio MCP server's processes never outlive the coordinator that started them: a graceful
shutdown ends its whole group, and after a kill -9 the next start kills what was left."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx
import pytest
import trio

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
