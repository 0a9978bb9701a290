"""An MCP server for the tests, written with the SDK's ``MCPServer``: run as
``python tests/mcp/fixture_server.py stdio`` or ``... http PORT``.

It records what it lived through, one JSON line each, in the file ``FIXTURE_RECORD`` names: a call's
start, its cancellation, its end, every ``notifications/cancelled`` it received, and each answer to
its questions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Literal

import anyio
from mcp.server.elicitation import AcceptedElicitation
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import (
    METHOD_NOT_FOUND,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ErrorData,
    InputRequiredResult,
    JSONRPCError,
    TextContent,
)
from pydantic import BaseModel, Field

RECORD = os.environ.get("FIXTURE_RECORD", "")


def record(**fields: Any) -> None:
    if RECORD:
        fields["at"] = time.time()
        fields["pid"] = os.getpid()
        with open(RECORD, "a") as file:
            file.write(json.dumps(fields, default=str) + "\n")


REVISION = os.environ.get("FIXTURE_REVISION", "")


async def notifications(ctx: Any, call_next: Any) -> Any:
    if ctx.method == "notifications/cancelled":
        record(kind="cancelled_notification", params=ctx.params)
    return await call_next(ctx)


# The key that seals a 2026-07-28 question's requestState: the same across restarts unless a test
# changes it (a server that refuses the state of its earlier life).
STATE_KEY = os.environ.get("FIXTURE_STATE_KEY", "fixture-state-key-of-32-bytes!!!")

server = MCPServer(
    "fixture",
    middleware=[notifications],
    request_state_security=RequestStateSecurity(keys=[STATE_KEY]),
)


@server.tool()
async def echo(text: str) -> dict[str, str]:
    """Say the text back."""
    record(kind="echo", text=text)
    return {"said": text}


@server.tool()
async def slow(seconds: float, ctx: Context) -> str:
    """Sleep for a while; a cancellation stops it."""
    record(kind="start", tool="slow", request_id=ctx.request_id)
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        record(kind="call_cancelled", tool="slow", request_id=ctx.request_id)
        raise
    record(kind="done", tool="slow")
    return "slept"


@server.tool()
async def stubborn(seconds: float, ctx: Context) -> str:
    """Sleep for a while, and ignore any cancellation."""
    record(kind="start", tool="stubborn", request_id=ctx.request_id)
    with anyio.CancelScope(shield=True):
        await anyio.sleep(seconds)
    record(kind="done", tool="stubborn")
    return "finished anyway"


@server.tool()
async def steps(count: int, ctx: Context) -> str:
    """Report progress ``count`` times, then finish."""
    for step in range(1, count + 1):
        await ctx.report_progress(step, count, f"step {step}")
        await anyio.sleep(0.02)
    return f"{count} steps"


@server.tool()
async def working(seconds: float, ctx: Context) -> str:
    """Say it is working, then work for a while; a cancellation stops it."""
    record(kind="start", tool="working", request_id=ctx.request_id)
    await ctx.report_progress(1, None, "working")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        record(kind="call_cancelled", tool="working", request_id=ctx.request_id)
        raise
    return "worked"


@server.tool()
async def fail() -> CallToolResult:
    """Always fails, saying why in its result."""
    return CallToolResult(
        content=[TextContent(type="text", text="the fixture failed on purpose")], is_error=True
    )


@server.tool()
async def crash() -> str:
    """The server process dies in the middle of the call."""
    record(kind="start", tool="crash")
    await anyio.sleep(0.05)
    os._exit(3)


class Profile(BaseModel):
    name: str = Field(title="Your name")
    age: int = Field(description="Age in years", ge=0)
    subscribe: bool = Field(title="Subscribe?")
    color: Literal["red", "green", "blue"]


@server.tool()
async def ask(ctx: Context) -> str:
    """Ask the person for a profile, and say what they answered."""
    record(kind="start", tool="ask", request_id=ctx.request_id)
    try:
        answer = await ctx.elicit("Tell me about you", Profile)
    except anyio.get_cancelled_exc_class():
        record(kind="call_cancelled", tool="ask")
        raise
    record(
        kind="answer", action=answer.action, data=getattr(answer, "data", None) and answer.data.model_dump()
    )
    if isinstance(answer, AcceptedElicitation):
        data = answer.data
        return f"{data.name} is {data.age}, subscribe={data.subscribe}, likes {data.color}"
    return f"no profile: {answer.action}"


class Pick(BaseModel):
    color: Literal["red", "green", "blue"]


@server.tool()
async def ask_twice(ctx: Context) -> str:
    """Ask two questions in one call."""
    first = await ctx.elicit("First question", Pick)
    second = await ctx.elicit("Second question", Pick)
    record(kind="answers", first=first.action, second=second.action)
    colors = [a.data.color if isinstance(a, AcceptedElicitation) else a.action for a in (first, second)]
    return " then ".join(colors)


@server.tool()
async def ask_state(ctx: Context) -> CallToolResult | InputRequiredResult:
    """Ask the 2026-07-28 way: the question is the call's result, and the answer comes with a retry."""
    responses = ctx.input_responses or {}
    record(kind="ask_state", state=ctx.request_state, answered=sorted(responses))
    if "pick" not in responses:
        question = ElicitRequest(
            params=ElicitRequestFormParams(
                message="Pick a color",
                requested_schema={
                    "type": "object",
                    "properties": {
                        "color": {"type": "string", "enum": ["red", "green"]},
                        "n": {"type": "integer"},
                    },
                    "required": ["color"],
                },
            )
        )
        return InputRequiredResult(input_requests={"pick": question}, request_state="fixed-state")
    answer = responses["pick"]
    record(kind="answer", action=answer.action, data=answer.content, state=ctx.request_state)
    text = f"{answer.action}: {answer.content} ({ctx.request_state})"
    return CallToolResult(content=[TextContent(type="text", text=text)])


async def serve_2025_only() -> None:
    """Over stdio as a server of the 2025 revisions: ``server/discover`` is not a method it knows,
    so a client falls back to the initialize handshake (this SDK's server would answer it)."""
    lowlevel = server._lowlevel_server
    async with stdio_server() as (read, write):
        inner_in, inner_out = anyio.create_memory_object_stream[Any](0)

        async def unknown_discover() -> None:
            async with inner_in:
                async for item in read:
                    message = getattr(item, "message", None)
                    if getattr(message, "method", None) == "server/discover":
                        error = ErrorData(code=METHOD_NOT_FOUND, message="Method not found")
                        await write.send(
                            SessionMessage(JSONRPCError(jsonrpc="2.0", id=message.id, error=error))
                        )
                        continue
                    await inner_in.send(item)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(unknown_discover)
            await lowlevel.run(inner_out, write, lowlevel.create_initialization_options())
            tasks.cancel_scope.cancel()


if __name__ == "__main__":
    if os.environ.get("FIXTURE_CHILD"):
        # A child in the server's own group, as an npx-wrapped server has: it outlives a server that
        # exits unless the whole group is killed.
        child = subprocess.Popen(["sleep", "600"])
        record(kind="child", child=child.pid)
    if sys.argv[1] == "stdio" and REVISION == "2025":
        anyio.run(serve_2025_only)
    elif sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
