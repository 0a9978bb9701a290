"""The stored history as the model sees it: every tool call answered, partial results included."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from coordinator import wire
from coordinator.models.base import ChatMessage, ModelToolCall
from coordinator.records import Message, TextPart, ToolPart

NO_RESULT = {"error": {"type": "interrupted", "message": "the tool call ended without a recorded result"}}


def tool_result_text(part: ToolPart) -> str:
    """What the model receives for a call: its output, or its error with the partial result."""
    if part.state == "succeeded":
        return part.output if isinstance(part.output, str) else _json(part.output)
    if part.state == "failed" and part.error is not None:
        body: dict[str, Any] = {"error": wire.unstructure(part.error)}
        if part.partial is not None:
            body["partial"] = wire.unstructure(part.partial)
        return _json(body)
    return _json(NO_RESULT)


def to_chat(messages: Sequence[Message], model_call_ids: Mapping[str, str | None]) -> tuple[ChatMessage, ...]:
    """Convert the stored messages to the model's conversation.

    An assistant message's tool calls are followed by one ``tool`` message each, so the history is
    valid even after a stop: a call without a settlement is answered as interrupted.
    """
    chat: list[ChatMessage] = []
    for message in messages:
        text = "".join(p.text for p in message.parts if isinstance(p, TextPart))
        if message.role == "user":
            chat.append(ChatMessage(role="user", content=text))
            continue
        tools = [p for p in message.parts if isinstance(p, ToolPart)]
        calls = tuple(
            ModelToolCall(id=model_call_ids.get(p.call_id) or p.call_id, name=p.name, input=p.input)
            for p in tools
        )
        chat.append(ChatMessage(role="assistant", content=text or None, tool_calls=calls))
        for part, model_call in zip(tools, calls, strict=True):
            chat.append(ChatMessage(role="tool", tool_call_id=model_call.id, content=tool_result_text(part)))
    return tuple(chat)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
