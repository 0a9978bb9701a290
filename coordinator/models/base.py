"""The provider-neutral shape of a model request and its reply."""

from __future__ import annotations

from typing import Any, Literal, Protocol

import attrs


@attrs.frozen(kw_only=True)
class ToolSpec:
    """A tool as the model sees it: name, description and a JSON schema of its input."""

    name: str
    description: str
    parameters: dict[str, Any]


@attrs.frozen(kw_only=True)
class ModelToolCall:
    """A tool call the model asked for; ``id`` is the model's own id, echoed back with the result."""

    id: str
    name: str
    input: dict[str, Any]


@attrs.frozen(kw_only=True)
class ChatMessage:
    """One message of the conversation in OpenAI's roles.

    ``assistant`` messages may carry ``tool_calls``; each is answered by a ``tool`` message whose
    ``tool_call_id`` names it and whose ``content`` is the result (or the failure) as text.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: tuple[ModelToolCall, ...] = ()
    tool_call_id: str | None = None


@attrs.frozen(kw_only=True)
class ModelRequest:
    """What a step sends: the session, this request's 0-based index in the session, history, tools."""

    session_id: str
    index: int
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...]


@attrs.frozen(kw_only=True)
class ModelReply:
    """What the model answered: text, tool calls, or both."""

    text: str = ""
    tool_calls: tuple[ModelToolCall, ...] = ()


class Model(Protocol):
    """A model provider. One instance serves every session of a coordinator."""

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Send ``request`` and wait for the whole reply (streamed where the provider streams).

        **Cancellation:** the request is abandoned at once (an HTTP stream is closed); nothing is kept.

        **Raises:** ``ModelError`` when the model cannot answer after the provider's retries.
        """
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...
