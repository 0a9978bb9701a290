"""An OpenAI-compatible chat-completions endpoint on 127.0.0.1 for the HTTP benchmarks.

The coordinator under test asks it over a real loopback socket, as it would ask a model provider. It
answers at once, streamed as real ``chat.completion.chunk`` server-sent events ending with ``[DONE]``:
a prompt ``fanout:N`` gets N no-op tool calls (events to fan out), ``stream:N`` the text in N chunks,
each written as it would arrive from a provider (one write a chunk), anything else the text ``done``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

REPLY_TEXT = "done"

Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "mock",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


FANOUT_PREFIX = "fanout:"
STREAM_PREFIX = "stream:"
STREAM_WORD = "word "


def stream_chunks(count: int) -> list[bytes]:
    """The SSE events of a text reply in ``count`` chunks of ``STREAM_WORD``, with finish and [DONE]."""
    return [
        _chunk({"role": "assistant", "content": ""}),
        *(_chunk({"content": STREAM_WORD}) for _ in range(count)),
        _chunk({}, finish_reason="stop") + b"data: [DONE]\n\n",
    ]


# The text reply, built once: role, the text, the finish, then [DONE].
_TEXT_STREAM = (
    _chunk({"role": "assistant", "content": ""})
    + _chunk({"content": REPLY_TEXT})
    + _chunk({}, finish_reason="stop")
    + b"data: [DONE]\n\n"
)


def _tool_calls_stream(count: int) -> bytes:
    """``count`` calls of the no-op plugin tool, each in one delta."""
    calls = [
        {"index": i, "id": f"call_{i}", "type": "function", "function": {"name": "noop", "arguments": "{}"}}
        for i in range(count)
    ]
    return (
        _chunk({"role": "assistant", "content": ""})
        + _chunk({"tool_calls": calls})
        + _chunk({}, finish_reason="tool_calls")
        + b"data: [DONE]\n\n"
    )


def _reply(body: bytes) -> list[bytes]:
    """Tool calls for a ``fanout:N`` prompt not answered yet, N chunks for ``stream:N``; else the text."""
    messages = json.loads(body).get("messages") or [{}]
    last = messages[-1]
    content = last.get("content") or ""
    if last.get("role") == "user" and content.startswith(FANOUT_PREFIX):
        return [_tool_calls_stream(int(content[len(FANOUT_PREFIX) :]))]
    if last.get("role") == "user" and content.startswith(STREAM_PREFIX):
        return stream_chunks(int(content[len(STREAM_PREFIX) :]))
    return [_TEXT_STREAM]


async def _app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    if not scope["path"].endswith("/chat/completions"):
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for piece in _reply(body):
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


@asynccontextmanager
async def serve_mock_model() -> AsyncIterator[str]:
    """Serve the mock on a free loopback port until the block ends; yields its ``/v1`` base URL."""
    config = HypercornConfig()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 1.0
    config.accesslog = None
    config.loglevel = "WARNING"
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        app: Any = _app  # hypercorn's ASGI types are narrower than this plain dict-based app
        binds = await nursery.start(partial(serve, app, config, shutdown_trigger=shutdown.wait, mode="asgi"))
        try:
            yield binds[0] + "/v1"
        finally:
            shutdown.set()
