"""A model client for any OpenAI-compatible ``/chat/completions`` endpoint, streamed over SSE."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import attrs
import httpx
import trio

from coordinator.config import ModelConfig
from coordinator.errors import ModelError
from coordinator.logs import get_logger
from coordinator.models.base import ChatMessage, ModelReply, ModelRequest, ModelToolCall, TextSink, ToolSpec
from coordinator.models.openai_stream import (
    SSEDecoder,
    StreamReader,
    Transient,
    assemble_reply,
    chunk_usage,
    chunks_from_payloads,
    completion_as_chunk,
    excerpt,
    loads_object,
)

# Re-exported: the pure reply parts are tested through this module too.
__all__ = [
    "OpenAIModel",
    "SSEDecoder",
    "StreamReader",
    "Transient",
    "assemble_reply",
    "build_request_body",
    "chunks_from_payloads",
    "parse_retry_after",
    "retry_delay",
]

log = get_logger(__name__)

DEFAULT_BACKOFF: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
"""Seconds before each retry; its length is the number of retries."""

RETRY_AFTER_CAP = 30.0
"""A server's ``Retry-After`` is honoured up to this many seconds, so one header cannot stall a step."""

DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=60.0, pool=None)
"""Per-operation limits; the whole request is bounded by the step deadline (``timeouts.step``). A
request never waits for the pool: ``OpenAIModel.streams`` lets no more requests in than it holds."""

DEFAULT_MAX_STREAMS = 1000
"""Requests streaming at once when no config says (``[model] max_streams``)."""

CLOSE_SECONDS = 2.0
"""How long closing an abandoned stream may take; it is a local socket close, so this is generous."""


# ---------------------------------------------------------------------------------------------------
# Pure parts: the request body and the retry delay (the reply's: ``openai_stream.py``).
# ---------------------------------------------------------------------------------------------------


def build_request_body(request: ModelRequest, model_name: str) -> dict[str, Any]:
    """The JSON body of a streamed chat-completions request.

    This is OpenAI's wire format, not the coordinator's, so it is built here rather than by the
    ``wire`` converter. ``tools`` is left out when empty: some servers reject an empty list.
    """
    body: dict[str, Any] = {
        "model": model_name,
        "stream": True,
        # The usage arrives in a last chunk with no choices; ``session.step.succeeded`` reports it.
        "stream_options": {"include_usage": True},
        "messages": [_message_json(message) for message in request.messages],
    }
    if request.tools:
        body["tools"] = [_tool_json(tool) for tool in request.tools]
    return body


def _message_json(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content or ""}
    if message.role == "assistant" and message.tool_calls:
        # OpenAI allows null content beside tool calls; an empty string is rejected by some servers.
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [_tool_call_json(call) for call in message.tool_calls],
        }
    return {"role": message.role, "content": message.content or ""}


def _tool_call_json(call: ModelToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.input)},
    }


def _tool_json(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header; None when absent or an HTTP date (then backoff applies)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def retry_delay(retry: int, failure: Transient, backoff: Sequence[float], cap: float) -> float:
    """Seconds to wait before retry number ``retry`` (0-based): the server's wish, capped, else backoff."""
    if failure.retry_after is not None:
        return min(failure.retry_after, cap)
    return backoff[retry]


# ---------------------------------------------------------------------------------------------------
# The client.
# ---------------------------------------------------------------------------------------------------
@attrs.define(kw_only=True)
class OpenAIModel:
    """A ``Model`` served by an OpenAI-compatible endpoint. One instance serves every session."""

    client: httpx.AsyncClient
    url: str
    model_name: str
    backoff: tuple[float, ...] = DEFAULT_BACKOFF
    retry_after_cap: float = RETRY_AFTER_CAP
    max_streams: int = DEFAULT_MAX_STREAMS
    # A request waits here, parked at no CPU cost, for one of ``max_streams`` slots; the connection
    # pool holds as many connections, so no request ever queues inside it (where each waiting
    # request would cost bookkeeping at every turn of the pool, and time out on its own clock).
    streams: trio.Semaphore = attrs.field(init=False)
    _full_noted: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self.streams = trio.Semaphore(self.max_streams)

    @classmethod
    def from_config(
        cls,
        config: ModelConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        backoff: Sequence[float] = DEFAULT_BACKOFF,
        retry_after_cap: float = RETRY_AFTER_CAP,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
    ) -> OpenAIModel:
        """A client for ``config``; the API key is read now from the env var ``config.api_key_env``.

        Args:
            config: the ``[model]`` section (``base_url``, ``name``, ``api_key_env``, and
                ``max_streams``: the requests that may stream at once).
            transport: an httpx transport to use instead of the network (tests, proxies).
            backoff: seconds before each retry; its length is the number of retries.
            retry_after_cap: the longest ``Retry-After`` honoured, in seconds.
            timeout: httpx's per-operation timeouts.
        """
        api_key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""
        # An empty key is allowed (local servers): then no Authorization header at all.
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # Every slot may keep its connection alive: a busy server's next step reuses one.
        limits = httpx.Limits(
            max_connections=config.max_streams, max_keepalive_connections=config.max_streams
        )
        client = httpx.AsyncClient(transport=transport, headers=headers, timeout=timeout, limits=limits)
        return cls(
            client=client,
            url=config.base_url.rstrip("/") + "/chat/completions",
            model_name=config.name,
            backoff=tuple(backoff),
            retry_after_cap=retry_after_cap,
            max_streams=config.max_streams,
        )

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Send ``request`` and wait for the whole streamed reply, retrying transient failures.

        HTTP 429, 5xx, transport errors and a stream cut short (no ``finish_reason``) are retried
        after each delay of ``backoff`` (or the server's ``Retry-After``, capped); any other HTTP
        error fails at once. The text streams to ``request.text`` as it arrives; a retry restarts it.

        **Cancellation:** the HTTP stream is closed at once (shielded, bounded by ``CLOSE_SECONDS``),
        which the server sees as a closed connection; what streamed is in ``request.text``, and a
        backoff sleep simply ends.

        **Raises:** ``ModelError`` naming the status and an excerpt of the body (or the transport
        error, or the cut) once the retries are spent, at once for another 4xx, or for a malformed
        reply.
        """
        body = build_request_body(request, self.model_name)
        retry = 0
        while True:
            if retry:
                request.text.restart()
            outcome = await self._attempt(body, request.text)
            if isinstance(outcome, ModelReply):
                return outcome
            if retry >= len(self.backoff):
                raise ModelError(f"model request failed after {retry + 1} attempts: {outcome.detail}")
            delay = retry_delay(retry, outcome, self.backoff, self.retry_after_cap)
            log.warning(
                "model_retry",
                attempt=retry + 1,
                status=outcome.status,
                delay=delay,
                detail=outcome.detail,
                session_id=request.session_id,
            )
            await trio.sleep(delay)
            retry += 1

    async def _attempt(self, body: dict[str, Any], sink: TextSink) -> ModelReply | Transient:
        """One request, in one of the ``max_streams`` slots: a reply, a ``Transient`` failure, or
        ``ModelError`` for a permanent one."""
        self._note_slots()
        async with self.streams:
            return await self._request(body, sink)

    def _note_slots(self) -> None:
        """Say once, when every slot is taken, that steps now wait for one; and again next time."""
        if self.streams.value > 0:
            self._full_noted = False
        elif not self._full_noted:
            self._full_noted = True
            log.warning(
                "model_streams_full",
                max_streams=self.max_streams,
                detail="every model stream slot is taken: steps wait for one to end ([model] max_streams)",
            )

    async def _request(self, body: dict[str, Any], sink: TextSink) -> ModelReply | Transient:
        try:
            response = await self.client.send(
                self.client.build_request("POST", self.url, json=body), stream=True
            )
        except httpx.TransportError as exc:
            return Transient(detail=f"{type(exc).__name__} on POST {self.url}: {exc}")
        except httpx.HTTPError as exc:
            raise ModelError(f"model request to {self.url} failed: {type(exc).__name__}: {exc}") from exc
        try:
            return await self._read(response, sink)
        except httpx.TransportError as exc:
            # A stream cut mid-way is retried whole; the retry restarts the streamed text.
            return Transient(detail=f"{type(exc).__name__} reading {self.url}: {exc}")
        except httpx.HTTPError as exc:
            raise ModelError(f"model reply from {self.url} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            with trio.move_on_after(CLOSE_SECONDS, shield=True):
                await response.aclose()

    async def _read(self, response: httpx.Response, sink: TextSink) -> ModelReply | Transient:
        if response.status_code >= 400:
            return await _failed_status(response)
        content_type = response.headers.get("content-type", "")
        if content_type.startswith("application/json"):
            chunk = completion_as_chunk(loads_object(await response.aread(), "reply"))
            reply = assemble_reply([chunk])
            sink.append(reply.text)
            return attrs.evolve(reply, usage=chunk_usage(chunk))
        reader = StreamReader(sink=sink)
        decoder = SSEDecoder()
        # The loop never leaves early (no return, no raise): httpx's byte iterator is a chain of async
        # generators, and one abandoned half-way is finalised by garbage collection, which trio warns
        # about. A cancel lands inside the chain and unwinds all of it. [DONE] ends the body anyway.
        # Bytes, not lines: every event that one read completes is decoded in one pass.
        async for data in response.aiter_bytes():
            for payload in decoder.feed(data):
                reader.feed(payload)
        for payload in decoder.close():
            reader.feed(payload)
        return reader.reply()

    async def aclose(self) -> None:
        """Close the connection pool.

        **Cancellation:** connections are closed as far as httpx gets before the cancel lands.

        **Raises:** nothing of its own.
        """
        await self.client.aclose()


async def _failed_status(response: httpx.Response) -> Transient:
    """``Transient`` for a 429/5xx; raises ``ModelError`` at once for any other error status."""
    text = (await response.aread()).decode("utf-8", errors="replace")
    detail = f"HTTP {response.status_code} from {response.request.url}: {excerpt(text)}"
    if response.status_code == 429 or response.status_code >= 500:
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        return Transient(detail=detail, status=response.status_code, retry_after=retry_after)
    raise ModelError(f"model request failed: {detail}")
