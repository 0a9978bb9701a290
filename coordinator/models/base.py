"""The provider-neutral shape of a model request and its reply."""

from __future__ import annotations

from typing import Any, Literal, Protocol

import attrs
import trio

from coordinator.records import Usage as Usage  # re-exported: providers build it


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


class TextSink(Protocol):
    """Where a provider hands the text it streams, piece by piece, as it arrives.

    The step actor owns the one a request carries (``coordinator/actors/step_text.py``): it keeps the text so far
    in memory and publishes it as coalesced ``session.text.delta`` events.
    """

    def append(self, piece: str) -> None:
        """Text that just arrived (whole characters: providers hand decoded ``str``)."""
        ...

    def restart(self) -> None:
        """A retry starts the answer over: the text so far is dropped, the next delta has offset 0."""
        ...

    async def between_chunks(self) -> None:
        """An await point between two chunks, where a stop (or an injected fault) may land."""
        ...


class DiscardText:
    """A ``TextSink`` that keeps nothing: a request made outside a step (tools, tests)."""

    def append(self, piece: str) -> None:
        pass

    def restart(self) -> None:
        pass

    async def between_chunks(self) -> None:
        await trio.lowlevel.checkpoint()


@attrs.frozen(kw_only=True)
class ModelRequest:
    """What a step sends: the session, this request's 0-based index in the session, history, tools.

    ``text`` receives the reply's text while it streams; a provider that does not stream may ignore
    it (the step then sees the text only in the reply).
    """

    session_id: str
    index: int
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...]
    # The session's title: the scripted model picks a sub-agent's script by it.
    title: str = ""
    text: TextSink = attrs.field(factory=DiscardText, eq=False, repr=False)


@attrs.frozen(kw_only=True)
class ModelReply:
    """What the model answered: text, tool calls, or both, and the usage it reported, if any."""

    text: str = ""
    tool_calls: tuple[ModelToolCall, ...] = ()
    usage: Usage | None = None


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
