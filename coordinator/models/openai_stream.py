"""Reading an OpenAI-compatible streamed reply: SSE lines, chunks, the assembled reply (pure parts)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import attrs

from coordinator.errors import ModelError
from coordinator.models.base import DiscardText, ModelReply, ModelToolCall, TextSink, Usage

EXCERPT_CHARS = 200

CUT_SHORT = "the stream was cut short: it ended without a finish_reason"


@attrs.frozen(kw_only=True)
class Transient:
    """A failed attempt worth retrying: an HTTP 429/5xx, a transport error, a stream cut short."""

    detail: str
    status: int | None = None
    retry_after: float | None = None


@attrs.define
class SSEDecoder:
    """Turns the bytes of a ``text/event-stream``, as they arrive, into the ``data`` payload of each event.

    Owned by the one task reading a response. Every event complete in what has arrived is decoded at
    once, so a read that brings many chunks costs one pass, not one wake-up each. Lines may end in
    ``\\n``, ``\\r\\n`` or ``\\r`` and may be split anywhere between reads (a multi-byte character
    too). Multi-line ``data`` fields are joined with newlines as the SSE spec says; comments (``:``)
    and other fields (``event``, ``id``) are ignored.
    """

    _tail: bytes = b""
    _data: list[str] = attrs.Factory(list)

    def feed(self, data: bytes) -> list[str]:
        """Take the bytes that just arrived; return the payloads of the events they complete."""
        buffer = self._tail + data
        # A trailing CR may be the first half of a CRLF: it waits for the next read.
        cut = len(buffer) - 1 if buffer.endswith(b"\r") else len(buffer)
        whole, held = buffer[:cut], buffer[cut:]
        if b"\r" in whole:
            whole = whole.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = whole.split(b"\n")
        self._tail = lines.pop() + held
        payloads: list[str] = []
        for line in lines:
            self._line(line, payloads)
        return payloads

    def close(self) -> list[str]:
        """The body ended: the payload of an event it ended without a blank line after, if any."""
        payloads: list[str] = []
        tail, self._tail = self._tail.rstrip(b"\r"), b""
        if tail:
            self._line(tail, payloads)
        self._line(b"", payloads)
        return payloads

    def _line(self, line: bytes, payloads: list[str]) -> None:
        if not line:
            if self._data:
                payloads.append("\n".join(self._data))
                self._data = []
        elif line.startswith(b"data:"):
            # A line break is one byte in UTF-8, so a line never splits a character.
            value = line[5:].decode("utf-8", errors="replace")
            self._data.append(value[1:] if value.startswith(" ") else value)


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
            f"{excerpt(arguments)}"
        ) from exc
    if not isinstance(parsed, dict):
        raise ModelError(f"model sent non-object arguments for tool call {call['id']} ({call['name']})")
    return ModelToolCall(id=call["id"], name=call["name"], input=parsed)


def chunks_from_payloads(payloads: Iterable[str]) -> list[dict[str, Any]]:
    """The chunks of a stream's ``data`` payloads, up to ``[DONE]`` (tests and a whole body).

    **Raises:** ``ModelError`` for a payload that is not a JSON object, or an error object in the stream.
    """
    reader = StreamReader(sink=DiscardText())
    for payload in payloads:
        reader.feed(payload)
    reader.raise_failure()
    return reader.chunks


@attrs.define
class StreamReader:
    """Reads a streamed reply's payloads as they arrive: text goes to ``sink`` at once.

    Owned by the task reading one response. A failure found mid-stream (a malformed payload, an error
    object) is kept, not raised, so the caller's read loop never leaves early; ``raise_failure``
    raises it once the body ended. A stream is whole only with a ``finish_reason``.
    """

    sink: TextSink
    chunks: list[dict[str, Any]] = attrs.Factory(list)
    finished: bool = False
    done: bool = False
    usage: Usage | None = None
    failure: ModelError | None = None

    def feed(self, payload: str) -> None:
        if self.done or self.failure is not None:
            return
        if payload.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = _chunk(payload)
        except ModelError as exc:
            self.failure = exc
            return
        self.chunks.append(chunk)
        self.usage = chunk_usage(chunk) or self.usage
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason"):
                self.finished = True
            content = (choice.get("delta") or {}).get("content")
            if isinstance(content, str) and content:
                self.sink.append(content)

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure

    def reply(self) -> ModelReply | Transient:
        """The whole reply; a ``Transient`` for a stream cut short. **Raises:** ``ModelError``."""
        self.raise_failure()
        if not self.finished:
            return Transient(detail=CUT_SHORT)
        return attrs.evolve(assemble_reply(self.chunks), usage=self.usage)


def chunk_usage(chunk: dict[str, Any]) -> Usage | None:
    usage = chunk.get("usage")
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return Usage(input_tokens=prompt, output_tokens=completion)


def completion_as_chunk(completion: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed completion rewritten as one streamed chunk, so one assembler serves both."""
    choices = completion.get("choices") or []
    message = (choices[0].get("message") or {}) if choices else {}
    delta = {
        "content": message.get("content"),
        "tool_calls": [{"index": i, **call} for i, call in enumerate(message.get("tool_calls") or ())],
    }
    finish = choices[0].get("finish_reason") if choices else None
    return {
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        "usage": completion.get("usage"),
    }


def _chunk(payload: str) -> dict[str, Any]:
    chunk = loads_object(payload, "stream chunk")
    if "error" in chunk:
        # Servers report a failure that began after the 200 status as an error object in the stream.
        raise ModelError(f"model stream reported an error: {excerpt(json.dumps(chunk['error']))}")
    return chunk


def loads_object(data: str | bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError as exc:
        text = data if isinstance(data, str) else data.decode(errors="replace")
        raise ModelError(f"model sent a malformed {what}: {excerpt(text)}") from exc
    if not isinstance(value, dict):
        raise ModelError(f"model sent a {what} that is not a JSON object: {excerpt(str(value))}")
    return value


def excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[:EXCERPT_CHARS] + "..."
