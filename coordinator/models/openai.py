"""A model client for any OpenAI-compatible ``/chat/completions`` endpoint, streamed over SSE."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import httpx
import structlog
import trio

from coordinator.config import ModelConfig
from coordinator.errors import ModelError
from coordinator.models.base import ChatMessage, ModelReply, ModelRequest, ModelToolCall, ToolSpec

log = structlog.get_logger()

DEFAULT_BACKOFF: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
"""Seconds before each retry; its length is the number of retries."""

RETRY_AFTER_CAP = 30.0
"""A server's ``Retry-After`` is honoured up to this many seconds, so one header cannot stall a step."""

DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=60.0, pool=60.0)
"""Per-operation limits; the whole request is bounded by the step deadline (``timeouts.step``)."""

CLOSE_SECONDS = 2.0
"""How long closing an abandoned stream may take; it is a local socket close, so this is generous."""

EXCERPT_CHARS = 200


@attrs.frozen(kw_only=True)
class Transient:
    """A failed attempt worth retrying: an HTTP 429/5xx or a transport error."""

    detail: str
    status: int | None = None
    retry_after: float | None = None


# ---------------------------------------------------------------------------------------------------
# Pure parts: the request body, SSE lines, the reply, the retry delay.
# ---------------------------------------------------------------------------------------------------


def build_request_body(request: ModelRequest, model_name: str) -> dict[str, Any]:
    """The JSON body of a streamed chat-completions request.

    This is OpenAI's wire format, not the coordinator's, so it is built here rather than by the
    ``wire`` converter. ``tools`` is left out when empty: some servers reject an empty list.
    """
    body: dict[str, Any] = {
        "model": model_name,
        "stream": True,
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


@attrs.define
class SSEDecoder:
    """Turns the lines of a ``text/event-stream`` into the ``data`` payload of each event.

    Owned by the one task reading a response. Multi-line ``data`` fields are joined with newlines as
    the SSE spec says; comments (``:``) and other fields (``event``, ``id``) are ignored.
    """

    _data: list[str] = attrs.Factory(list)

    def feed(self, line: str) -> str | None:
        """Take one line (without its newline); return an event's payload when the line ends one."""
        if line == "":
            return self.flush()
        if line.startswith("data:"):
            value = line[len("data:") :]
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None

    def flush(self) -> str | None:
        """The payload of an event the stream ended without a blank line after, if any."""
        if not self._data:
            return None
        payload, self._data = "\n".join(self._data), []
        return payload


def assemble_reply(chunks: Iterable[dict[str, Any]]) -> ModelReply:
    """Join streamed chunks into one reply: text deltas in order, tool calls by their ``index``.

    A tool call's ``id`` and ``name`` arrive in its first delta and its ``arguments`` in fragments,
    possibly interleaved with other calls' fragments.

    **Raises:** ``ModelError`` when a call lacks an id or a name, or its arguments are not a JSON object.
    """
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                text.append(delta["content"])
            for fragment in delta.get("tool_calls") or ():
                _merge_call_fragment(calls, fragment)
    tool_calls = tuple(_finish_call(calls[index]) for index in sorted(calls))
    return ModelReply(text="".join(text), tool_calls=tool_calls)


def _merge_call_fragment(calls: dict[int, dict[str, Any]], fragment: dict[str, Any]) -> None:
    call = calls.setdefault(fragment.get("index", len(calls)), {"id": "", "name": "", "arguments": []})
    function = fragment.get("function") or {}
    # Only the first delta of a call carries id and name; later ones must not overwrite them.
    if fragment.get("id") and not call["id"]:
        call["id"] = fragment["id"]
    if function.get("name") and not call["name"]:
        call["name"] = function["name"]
    if function.get("arguments"):
        call["arguments"].append(function["arguments"])


def _finish_call(call: dict[str, Any]) -> ModelToolCall:
    if not call["id"] or not call["name"]:
        raise ModelError(f"model sent a tool call without id or name: {call['id']!r} {call['name']!r}")
    arguments = "".join(call["arguments"]).strip() or "{}"
    try:
        parsed = json.loads(arguments)
    except ValueError as exc:
        raise ModelError(
            f"model sent invalid JSON arguments for tool call {call['id']} ({call['name']}): "
            f"{_excerpt(arguments)}"
        ) from exc
    if not isinstance(parsed, dict):
        raise ModelError(f"model sent non-object arguments for tool call {call['id']} ({call['name']})")
    return ModelToolCall(id=call["id"], name=call["name"], input=parsed)


def chunks_from_payloads(payloads: Iterable[str]) -> list[dict[str, Any]]:
    """The chunks of a stream's ``data`` payloads, up to ``[DONE]``.

    A stream that ends without ``[DONE]`` (some servers omit it) is still whole: its body ended cleanly.

    **Raises:** ``ModelError`` for a payload that is not a JSON object, or an error object in the stream.
    """
    chunks = []
    for payload in payloads:
        if payload.strip() == "[DONE]":
            break
        chunks.append(_chunk(payload))
    return chunks


def completion_as_chunk(completion: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed completion rewritten as one streamed chunk, so one assembler serves both."""
    choices = completion.get("choices") or []
    message = (choices[0].get("message") or {}) if choices else {}
    delta = {
        "content": message.get("content"),
        "tool_calls": [{"index": i, **call} for i, call in enumerate(message.get("tool_calls") or ())],
    }
    return {"choices": [{"index": 0, "delta": delta}]}


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


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[:EXCERPT_CHARS] + "..."


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
            config: the ``[model]`` section (``base_url``, ``name``, ``api_key_env``).
            transport: an httpx transport to use instead of the network (tests, proxies).
            backoff: seconds before each retry; its length is the number of retries.
            retry_after_cap: the longest ``Retry-After`` honoured, in seconds.
            timeout: httpx's per-operation timeouts.
        """
        api_key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""
        # An empty key is allowed (local servers): then no Authorization header at all.
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        client = httpx.AsyncClient(transport=transport, headers=headers, timeout=timeout)
        return cls(
            client=client,
            url=config.base_url.rstrip("/") + "/chat/completions",
            model_name=config.name,
            backoff=tuple(backoff),
            retry_after_cap=retry_after_cap,
        )

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Send ``request`` and wait for the whole streamed reply, retrying transient failures.

        HTTP 429, 5xx and transport errors are retried after each delay of ``backoff`` (or the
        server's ``Retry-After``, capped); any other HTTP error fails at once.

        **Cancellation:** the HTTP stream is closed at once (shielded, bounded by ``CLOSE_SECONDS``),
        which the server sees as a closed connection; nothing is kept, and a backoff sleep simply ends.

        **Raises:** ``ModelError`` naming the status and an excerpt of the body (or the transport
        error) once the retries are spent, at once for another 4xx, or for a malformed reply.
        """
        body = build_request_body(request, self.model_name)
        retry = 0
        while True:
            outcome = await self._attempt(body)
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

    async def _attempt(self, body: dict[str, Any]) -> ModelReply | Transient:
        """One request: a reply, a ``Transient`` failure, or ``ModelError`` for a permanent one."""
        try:
            response = await self.client.send(
                self.client.build_request("POST", self.url, json=body), stream=True
            )
        except httpx.TransportError as exc:
            return Transient(detail=f"{type(exc).__name__} on POST {self.url}: {exc}")
        except httpx.HTTPError as exc:
            raise ModelError(f"model request to {self.url} failed: {type(exc).__name__}: {exc}") from exc
        try:
            return await self._read(response)
        except httpx.TransportError as exc:
            # A stream cut mid-way is retried whole: nothing of it has been handed to the caller.
            return Transient(detail=f"{type(exc).__name__} reading {self.url}: {exc}")
        except httpx.HTTPError as exc:
            raise ModelError(f"model reply from {self.url} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            with trio.move_on_after(CLOSE_SECONDS, shield=True):
                await response.aclose()

    async def _read(self, response: httpx.Response) -> ModelReply | Transient:
        if response.status_code >= 400:
            return await _failed_status(response)
        content_type = response.headers.get("content-type", "")
        if content_type.startswith("application/json"):
            return assemble_reply([completion_as_chunk(_loads(await response.aread(), "reply"))])
        payloads: list[str] = []
        decoder = SSEDecoder()
        # The loop never leaves early (no return, no raise): httpx's line iterator is a chain of async
        # generators, and one abandoned half-way is finalised by garbage collection, which trio warns
        # about. A cancel lands inside the chain and unwinds all of it. [DONE] ends the body anyway.
        async for line in response.aiter_lines():
            payload = decoder.feed(line)
            if payload is not None:
                payloads.append(payload)
        last = decoder.flush()
        if last is not None:
            payloads.append(last)
        return assemble_reply(chunks_from_payloads(payloads))

    async def aclose(self) -> None:
        """Close the connection pool.

        **Cancellation:** connections are closed as far as httpx gets before the cancel lands.

        **Raises:** nothing of its own.
        """
        await self.client.aclose()


async def _failed_status(response: httpx.Response) -> Transient:
    """``Transient`` for a 429/5xx; raises ``ModelError`` at once for any other error status."""
    text = (await response.aread()).decode("utf-8", errors="replace")
    detail = f"HTTP {response.status_code} from {response.request.url}: {_excerpt(text)}"
    if response.status_code == 429 or response.status_code >= 500:
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        return Transient(detail=detail, status=response.status_code, retry_after=retry_after)
    raise ModelError(f"model request failed: {detail}")


def _chunk(payload: str) -> dict[str, Any]:
    chunk = _loads(payload.encode(), "stream chunk")
    if "error" in chunk:
        # Servers report a failure that began after the 200 status as an error object in the stream.
        raise ModelError(f"model stream reported an error: {_excerpt(json.dumps(chunk['error']))}")
    return chunk


def _loads(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise ModelError(f"model sent a malformed {what}: {_excerpt(data.decode(errors='replace'))}") from exc
    if not isinstance(value, dict):
        raise ModelError(f"model sent a {what} that is not a JSON object: {_excerpt(str(value))}")
    return value
