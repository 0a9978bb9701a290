"""An OpenAI-compatible chat-completions endpoint on 127.0.0.1, served by hypercorn, for tests.

``serve_model(replies)`` answers request i with ``replies[min(i, len-1)]`` (as the scripted model
does) or with ``replies(i, body)``, streams real OpenAI SSE chunks, and records every
request it received. Any process that can reach the port may use it, including a coordinator subprocess.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]

TEXT_PIECE = 4
"""Characters of text per content delta: small, so every reply spans several chunks."""

ARGUMENT_FRAGMENTS = 3
"""How many deltas a tool call's JSON arguments are split over."""


@attrs.frozen(kw_only=True)
class Call:
    """A tool call the mock model asks for."""

    id: str
    name: str
    input: dict[str, Any] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class Text:
    """A text reply; ``delay`` seconds pass between the response headers and the first chunk, and
    ``chunk_delay`` between two chunks."""

    text: str
    delay: float = 0.0
    streamed: bool = True
    chunk_delay: float = 0.0


@attrs.frozen(kw_only=True)
class ToolCalls:
    """Tool calls (sent one after the other, arguments in fragments), optionally after some text."""

    calls: tuple[Call, ...]
    text: str = ""
    delay: float = 0.0
    streamed: bool = True


@attrs.frozen(kw_only=True)
class HttpError:
    """An error status with a JSON body, after ``delay``; ``retry_after`` becomes that header."""

    status: int
    message: str = "mock failure"
    retry_after: str | None = None
    delay: float = 0.0


@attrs.frozen(kw_only=True)
class Hang:
    """Streams ``text`` as one chunk, then never finishes (until the client or the server closes)."""

    text: str = "thinking"


@attrs.frozen(kw_only=True)
class Drop:
    """Streams ``text`` as one chunk, then closes the connection mid-body: a transport error."""

    text: str = "partial"


@attrs.frozen(kw_only=True)
class Cut:
    """Streams ``text`` in pieces, then ends the body cleanly (with ``[DONE]`` when ``done``) but
    without a ``finish_reason``: a stream cut short that looks whole to a careless client."""

    text: str = "half a sen"
    done: bool = True


@attrs.frozen(kw_only=True)
class RawEvents:
    """These ``data`` payloads verbatim (add ``"[DONE]"`` yourself): for malformed streams."""

    payloads: tuple[str, ...]


Reply = Text | ToolCalls | HttpError | Hang | Drop | Cut | RawEvents
Replies = Callable[[int, dict[str, Any]], Reply] | Sequence[Reply | dict[str, Any]]


def reply_from_script(item: dict[str, Any]) -> Reply:
    """A reply from a scripted model's item: ``{"text"}`` or ``{"tool_calls"}``, ``delay``."""
    delay = float(item.get("delay", 0))
    if "tool_calls" in item:
        calls = tuple(Call(id=c["id"], name=c["name"], input=c.get("input", {})) for c in item["tool_calls"])
        return ToolCalls(calls=calls, text=item.get("text", ""), delay=delay)
    return Text(text=item["text"], delay=delay)


@attrs.define(kw_only=True)
class MockModel:
    """The running mock: where it listens and what it has seen. Owned by the test's trio run."""

    base_url: str = ""
    replies: Replies
    requests: list[dict[str, Any]] = attrs.Factory(list)
    """Every chat-completions request body, parsed, in arrival order."""
    headers: list[dict[str, str]] = attrs.Factory(list)
    """The request headers of each entry of ``requests`` (lower-case names)."""
    hanging: int = 0
    """Hang replies whose first chunk has been sent."""
    aborted: int = 0
    """Responses the client closed before they were complete."""
    closing: trio.Event = attrs.Factory(trio.Event)
    _changed: trio.Event = attrs.Factory(trio.Event)

    def reply_for(self, index: int, body: dict[str, Any]) -> Reply:
        if callable(self.replies):
            return self.replies(index, body)
        item = self.replies[min(index, len(self.replies) - 1)]
        return reply_from_script(item) if isinstance(item, dict) else item

    def notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for_requests(self, count: int) -> None:
        """Wait until ``count`` requests have arrived."""
        await self._wait_until(lambda: len(self.requests) >= count)

    async def wait_for_hanging(self, count: int = 1) -> None:
        """Wait until ``count`` Hang replies have sent their first chunk."""
        await self._wait_until(lambda: self.hanging >= count)

    async def wait_for_aborted(self, count: int = 1) -> None:
        """Wait until clients have closed ``count`` responses before their end."""
        await self._wait_until(lambda: self.aborted >= count)

    async def _wait_until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._changed.wait()


@asynccontextmanager
async def serve_model(replies: Replies) -> AsyncIterator[MockModel]:
    """Serve a mock model on 127.0.0.1 (a free port) until the block exits.

    **Cancellation:** hanging responses are ended and hypercorn shuts down (graceful, then forced).
    """
    mock = MockModel(replies=replies)
    config = HypercornConfig()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 2.0
    config.loglevel = "WARNING"
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            partial(serve, partial(_app, mock), config, shutdown_trigger=shutdown.wait, mode="asgi")
        )
        mock.base_url = binds[0] + "/v1"
        try:
            yield mock
        finally:
            mock.closing.set()
            shutdown.set()


async def _app(mock: MockModel, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    if scope["type"] != "http":
        return
    body = await _read_body(receive)
    if scope["method"] != "POST" or not scope["path"].endswith("/chat/completions"):
        await _send_json(send, 404, {"error": {"message": f"no route {scope['path']}"}})
        return
    parsed = json.loads(body)
    index = len(mock.requests)
    mock.requests.append(parsed)
    mock.headers.append({k.decode("latin1"): v.decode("latin1") for k, v in scope["headers"]})
    mock.notify()
    reply = mock.reply_for(index, parsed)
    finished = False

    async def send_marking_end(message: dict[str, Any]) -> None:
        nonlocal finished
        # Marked before sending: hypercorn reports the stream closed from inside the last send.
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            finished = True
        await send(message)

    async with trio.open_nursery() as nursery:
        # The response runs beside a watcher of the connection, so a client that goes away is seen at
        # once even while the response itself is waiting (Hang, delay).
        nursery.start_soon(_watch_disconnect, mock, receive, nursery.cancel_scope, lambda: finished)
        await _respond(mock, send_marking_end, reply, parsed)
        finished = True
        nursery.cancel_scope.cancel()


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(parts)
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


async def _watch_disconnect(
    mock: MockModel, receive: Receive, scope: trio.CancelScope, finished: Callable[[], bool]
) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    if not finished():
        mock.aborted += 1
        mock.notify()
    scope.cancel()


async def _respond(mock: MockModel, send: Send, reply: Reply, body: dict[str, Any]) -> None:
    model = body.get("model", "mock")
    match reply:
        case HttpError():
            await trio.sleep(reply.delay)
            headers = [(b"retry-after", reply.retry_after.encode())] if reply.retry_after else []
            await _send_json(send, reply.status, {"error": {"message": reply.message}}, headers)
        case Text(streamed=False) | ToolCalls(streamed=False):
            await trio.sleep(reply.delay)
            await _send_json(send, 200, completion(reply, model))
        case Text() | ToolCalls():
            await _start_stream(send)
            await trio.sleep(reply.delay)
            chunk_delay = reply.chunk_delay if isinstance(reply, Text) else 0.0
            chunks = stream_chunks(reply, model) + _usage_chunks(body, reply.text, model)
            for i, payload in enumerate([*(json.dumps(c) for c in chunks), "[DONE]"]):
                if i and chunk_delay:
                    await trio.sleep(chunk_delay)
                await _send_event(send, payload)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        case Cut():
            await _start_stream(send)
            chunks = stream_chunks(Text(text=reply.text), model)[:-1]  # no finish_reason
            for payload in [*(json.dumps(c) for c in chunks), *(["[DONE]"] if reply.done else [])]:
                await _send_event(send, payload)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        case RawEvents():
            await _start_stream(send)
            for payload in reply.payloads:
                await _send_event(send, payload)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        case Hang() | Drop():
            await _start_stream(send)
            await _send_event(send, json.dumps(_chunk(model, {"role": "assistant", "content": reply.text})))
            if isinstance(reply, Hang):
                mock.hanging += 1
                mock.notify()
                await mock.closing.wait()
            # Returning without the final body message makes hypercorn close the connection mid-body.


async def _start_stream(send: Send) -> None:
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})


async def _send_event(send: Send, payload: str) -> None:
    await send({"type": "http.response.body", "body": f"data: {payload}\n\n".encode(), "more_body": True})


async def _send_json(
    send: Send, status: int, value: Any, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    data = json.dumps(value).encode()
    start_headers = [(b"content-type", b"application/json"), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": start_headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})


def stream_chunks(reply: Text | ToolCalls, model: str) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects OpenAI would stream for ``reply``."""
    chunks = [_chunk(model, {"role": "assistant", "content": ""})]
    chunks += [_chunk(model, {"content": piece}) for piece in _pieces(reply.text, TEXT_PIECE)]
    calls = reply.calls if isinstance(reply, ToolCalls) else ()
    for index, call in enumerate(calls):
        head = {"index": index, "id": call.id, "type": "function"}
        chunks.append(
            _chunk(model, {"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
        )
        arguments = json.dumps(call.input)
        size = max(1, -(-len(arguments) // ARGUMENT_FRAGMENTS))
        for fragment in _pieces(arguments, size):
            chunks.append(
                _chunk(model, {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
            )
    chunks.append(_chunk(model, {}, finish_reason="tool_calls" if calls else "stop"))
    return chunks


def usage_of(body: dict[str, Any], text: str) -> dict[str, int]:
    """The usage the mock reports: characters of the request's messages and of the answer, over 4."""
    sent = sum(len(m.get("content") or "") for m in body.get("messages", []))
    return {"prompt_tokens": sent // 4, "completion_tokens": len(text) // 4, "total_tokens": 0}


def _usage_chunks(body: dict[str, Any], text: str, model: str) -> list[dict[str, Any]]:
    """OpenAI's last chunk with no choices and the usage, when the request asked for it."""
    if not (body.get("stream_options") or {}).get("include_usage"):
        return []
    return [{"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": model,
             "choices": [], "usage": usage_of(body, text)}]  # fmt: skip


def completion(reply: Text | ToolCalls, model: str) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` object for ``reply``."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    calls = reply.calls if isinstance(reply, ToolCalls) else ()
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.input)}}
            for c in calls
        ]
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
    return {"id": "chatcmpl-mock", "object": "chat.completion", "model": model, "choices": [choice]}


def _chunk(model: str, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]
