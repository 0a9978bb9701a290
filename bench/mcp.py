"""What the MCP client costs, and how soon a stop reaches the server.

Both against the tests' fixture server (``tests/mcp/fixture_server.py``), a process of its own
speaking over stdio, on this machine.

- ``mcp_call_overhead_ms``: the median of one ``echo`` call through the coordinator's MCP client
  (``run_call``, as a tool-call actor runs it: the connection's turn, the question and progress
  carriers, the stop's watcher) minus the median of the same call through the bare SDK
  (``ClientSession.call_tool`` on a connection of its own to a second process of the same server),
  the two interleaved in one run. ``mcp_tool_call_ms_p50`` is, for context, the whole tool call as a
  subscriber sees it (``session.tool.started`` to ``session.tool.succeeded``, its commit included).
- ``mcp_stop_to_cancel_ms``: from the moment ``interrupt()`` is called on a turn whose call the server
  is running to the moment the server's middleware receives ``notifications/cancelled`` (its own
  clock, the same machine's), p50 and p99.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import trio

from bench.harness import Sizes, bench_config, median, p99
from coordinator import Coordinator, open_coordinator
from coordinator.config import McpConfig
from coordinator.models.scripted import ScriptedModel

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "mcp" / "fixture_server.py"


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    # The server may be writing its last line: only whole lines are read.
    lines = path.read_text().split("\n")[:-1]
    return [json.loads(line) for line in lines]


async def _ready(coordinator: Coordinator) -> None:
    with trio.fail_after(30):
        while coordinator.mcp_servers()[0].status != "ready":  # noqa: ASYNC110 (a bench's own poll)
            await trio.sleep(0.01)


async def measure_mcp(workdir: Path, sizes: Sizes) -> dict[str, float]:
    figures = await _overhead(workdir, sizes)
    figures.update(await _stop_to_cancel(workdir, sizes))
    return figures


async def _overhead(workdir: Path, sizes: Sizes) -> dict[str, float]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    calls = max(20, sizes.stops)
    server = McpConfig(name="fx", command=(sys.executable, str(FIXTURE), "stdio"), env={"FIXTURE_RECORD": ""})
    config = attrs.evolve(bench_config(workdir, "mcp-overhead.sqlite"), mcp=(server,))
    script = {
        f"s{i}": [{"tool_calls": [{"id": "c", "name": "fx__echo", "input": {"text": "x"}}]}, {"text": "ok"}]
        for i in range(calls)
    }
    client_ms: list[float] = []
    bare_ms: list[float] = []
    whole_ms: list[float] = []
    bare = StdioServerParameters(command=sys.executable, args=[str(FIXTURE), "stdio"], env=dict(os.environ))
    async with (
        open_coordinator(config, model=ScriptedModel.from_json(script), synchronous="full") as coordinator,
        stdio_client(bare, errlog=open(os.devnull, "w")) as (read, write),  # noqa: ASYNC230
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await _ready(coordinator)
        assert coordinator._runtime.mcp is not None
        connection = coordinator._runtime.mcp._servers[0]
        timed = connection.run_call

        async def timing(*args: Any) -> Any:
            started = time.perf_counter()
            try:
                return await timed(*args)
            finally:
                client_ms.append((time.perf_counter() - started) * 1000)

        connection.run_call = timing
        for index in range(calls):
            started = time.perf_counter()
            await session.call_tool("echo", {"text": "x"})
            bare_ms.append((time.perf_counter() - started) * 1000)
            whole_ms.append(await _one_turn(coordinator, f"s{index}"))
    return {
        "mcp_call_bare_ms_p50": round(median(bare_ms), 3),
        "mcp_call_client_ms_p50": round(median(client_ms), 3),
        "mcp_call_overhead_ms": round(median(client_ms) - median(bare_ms), 3),
        "mcp_tool_call_ms_p50": round(median(whole_ms), 3),
        "mcp_calls": float(calls),
    }


async def _one_turn(coordinator: Coordinator, title: str) -> float:
    """One turn of one ``fx__echo`` call; the call's span from started to succeeded, in ms."""
    session = await coordinator.create_session(title=title)
    seen: dict[str, float] = {}
    subscription = coordinator.subscribe(after=coordinator.published_seq, session_id=session.id)
    await coordinator.prompt(session.id, "go")
    async for event in subscription:
        seen.setdefault(event.type, time.perf_counter())
        if event.type == "session.idle":
            break
    return (seen["session.tool.succeeded"] - seen["session.tool.started"]) * 1000


async def _stop_to_cancel(workdir: Path, sizes: Sizes) -> dict[str, float]:
    stops = max(20, sizes.stops // 3)
    record = workdir / "mcp-stops.jsonl"
    server = McpConfig(
        name="fx", command=(sys.executable, str(FIXTURE), "stdio"), env={"FIXTURE_RECORD": str(record)}
    )
    config = attrs.evolve(bench_config(workdir, "mcp-stops.sqlite"), mcp=(server,))
    slow = [{"tool_calls": [{"id": "c", "name": "fx__slow", "input": {"seconds": 60}}]}, {"text": "ok"}]
    script = {f"s{i}": slow for i in range(stops)}
    delays: list[float] = []
    answered: list[float] = []
    async with open_coordinator(
        config, model=ScriptedModel.from_json(script), synchronous="full"
    ) as coordinator:
        await _ready(coordinator)
        for index in range(stops):
            session = await coordinator.create_session(title=f"s{index}")
            subscription = coordinator.subscribe(after=coordinator.published_seq, session_id=session.id)
            await coordinator.prompt(session.id, "go")
            with trio.fail_after(10):
                while sum(r["kind"] == "start" for r in _records(record)) <= index:  # noqa: ASYNC110
                    await trio.sleep(0.001)
            decided = time.time()
            await coordinator.interrupt(session.id)
            answered.append((time.time() - decided) * 1000)
            async for event in subscription:
                if event.type == "session.idle":
                    break
            received = await _cancellations(record, index + 1)
            delays.append((received[-1]["at"] - decided) * 1000)
    return {
        "mcp_stop_to_cancel_ms_p50": round(median(delays), 2),
        "mcp_stop_to_cancel_ms_p99": round(p99(delays), 2),
        "mcp_interrupt_answered_ms_p50": round(median(answered), 2),
        "mcp_interrupt_answered_ms_p99": round(p99(answered), 2),
        "mcp_stops": float(stops),
    }


async def _cancellations(record: Path, count: int) -> list[dict[str, Any]]:
    """The server's records of ``notifications/cancelled``, once there are ``count``."""
    with trio.fail_after(10):
        while True:
            received = [r for r in _records(record) if r["kind"] == "cancelled_notification"]
            if len(received) >= count:
                return received
            await trio.sleep(0.001)
