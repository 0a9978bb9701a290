"""Offline models: a JSON script replayed request by request, and the built-in demo."""

from __future__ import annotations

import json
import math
import operator
from pathlib import Path
from typing import Any

import attrs
import trio

from coordinator.errors import ConfigError, ModelError
from coordinator.models.base import ChatMessage, ModelReply, ModelRequest, ModelToolCall, Usage

_ITEM_KEYS = frozenset({"text", "chunks", "chunk_delay", "cut", "tool_calls", "delay"})
CUT_MESSAGE = "the model stream was cut short: it ended without a finish_reason"
_CALL_KEYS = frozenset({"id", "name", "input"})

# How much of a tool result the demo model quotes back.
DEMO_QUOTE_CHARS = 200
DEMO_RUN_PREFIX = "run:"


@attrs.frozen(kw_only=True)
class ScriptItem:
    """One scripted answer: its text (streamed as ``chunks``) and tool calls, after ``delay`` seconds.

    ``chunk_delay`` seconds pass between two chunks; ``cut`` ends the stream without a finish, which
    fails the request, as a real model's stream cut short does.
    """

    chunks: tuple[str, ...] = ()
    tool_calls: tuple[ModelToolCall, ...] = ()
    delay: float = 0
    chunk_delay: float = 0
    cut: bool = False

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    @classmethod
    def from_json(cls, item: Any, where: str) -> ScriptItem:
        """Check one script item; ``where`` names it (``script.json: item 2``) in a ConfigError."""
        if not isinstance(item, dict):
            raise ConfigError(f"expected an object, got {_kind(item)}", where)
        unknown = sorted(set(item) - _ITEM_KEYS)
        if unknown:
            expected = "text, chunks, chunk_delay, cut, tool_calls, delay"
            raise ConfigError(f'unknown key "{unknown[0]}" (expected {expected})', where)
        if not {"text", "chunks", "tool_calls"} & set(item):
            raise ConfigError('expected "text", "chunks" or "tool_calls"', where)
        calls = item.get("tool_calls", [])
        if not isinstance(calls, list):
            raise ConfigError(f"expected a list, got {_kind(calls)}", f"{where}.tool_calls")
        cut = item.get("cut", False)
        if not isinstance(cut, bool):
            raise ConfigError(f"expected true or false, got {_kind(cut)}", f"{where}.cut")
        return cls(
            chunks=_chunks(item, where),
            tool_calls=tuple(_tool_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)),
            delay=_seconds(item, "delay", where),
            chunk_delay=_seconds(item, "chunk_delay", where),
            cut=cut,
        )


def _chunks(item: dict[str, Any], where: str) -> tuple[str, ...]:
    """The item's text as the chunks it streams in: ``chunks``, or ``text`` as one chunk."""
    if "text" in item and "chunks" in item:
        raise ConfigError('expected "text" or "chunks", not both', where)
    if "chunks" in item:
        chunks = item["chunks"]
        if not isinstance(chunks, list):
            raise ConfigError(f"expected a list of strings, got {_kind(chunks)}", f"{where}.chunks")
        for i, chunk in enumerate(chunks):
            if not isinstance(chunk, str):
                raise ConfigError(f"expected a string, got {_kind(chunk)}", f"{where}.chunks[{i}]")
        return tuple(chunks)
    text = item.get("text", "")
    if not isinstance(text, str):
        raise ConfigError(f"expected a string, got {_kind(text)}", f"{where}.text")
    return (text,) if text else ()


def _seconds(item: dict[str, Any], key: str, where: str) -> float:
    value = item.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ConfigError(f"expected a number of seconds >= 0, got {_kind(value)}", f"{where}.{key}")
    return float(value)


def scripted_usage(request: ModelRequest, text: str) -> Usage:
    """The scripted models' usage, a rough token count: characters sent and answered, over 4."""
    # Built-ins only (no Python frame a message): a long session's request has thousands.
    sent = sum(map(len, filter(None, map(_CONTENT, request.messages))))
    return Usage(input_tokens=sent // 4, output_tokens=len(text) // 4)


_CONTENT = operator.attrgetter("content")


def _tool_call(call: Any, where: str) -> ModelToolCall:
    if not isinstance(call, dict):
        raise ConfigError(f"expected an object, got {_kind(call)}", where)
    unknown = sorted(set(call) - _CALL_KEYS)
    if unknown:
        raise ConfigError(f'unknown key "{unknown[0]}" (expected id, name, input)', where)
    for key in ("id", "name"):
        if not isinstance(call.get(key), str) or not call[key]:
            raise ConfigError(f"expected a non-empty string, got {_kind(call.get(key))}", f"{where}.{key}")
    # A tool without parameters is called with {}; writing it out in every script is noise.
    tool_input = call.get("input", {})
    if not isinstance(tool_input, dict):
        raise ConfigError(f"expected an object, got {_kind(tool_input)}", f"{where}.input")
    return ModelToolCall(id=call["id"], name=call["name"], input=tool_input)


def _kind(value: Any) -> str:
    """A JSON value as an error message shows it."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return json.dumps(value)


@attrs.frozen
class ScriptedModel:
    """Answers request ``i`` of a session with item ``min(i, len - 1)`` of its script.

    ``items`` is the script of every session; ``by_title`` holds scripts for sessions by their title
    (a script object ``{"TITLE": [...], "*": [...]}``, for sub-agents), ``items`` then being
    the ``"*"`` list (empty when the object has none: a session of another title fails its request).
    """

    items: tuple[ScriptItem, ...] = attrs.field()
    by_title: tuple[tuple[str, tuple[ScriptItem, ...]], ...] = ()

    @items.validator
    def _check_items(self, attribute: Any, value: tuple[ScriptItem, ...]) -> None:
        if not value and not self.by_title:
            raise ValueError("a script needs at least one item")

    def script_of(self, title: str) -> tuple[ScriptItem, ...]:
        """The items a session titled ``title`` is answered with. **Raises:** ``ModelError``."""
        for named, items in self.by_title:
            if named == title:
                return items
        if not self.items:
            raise ModelError(f'the script has no list for the title {title!r} and no "*" list')
        return self.items

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Load and check a script file: a non-empty JSON list of items.

        Raises:
            ConfigError: the file is unreadable or not JSON, is not a non-empty list, or an item is
                malformed; ``where`` names the file and the item's 0-based index.
        """
        label = str(path)
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read the script: {exc.strerror or exc}", label) from exc
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"invalid JSON: {exc}", label) from exc
        return cls.from_json(data, label)

    @classmethod
    def from_json(cls, data: Any, label: str = "<script>") -> ScriptedModel:
        """Check a parsed script (a list, or an object of lists by session title); ``label`` names its
        source in a ConfigError."""
        if isinstance(data, dict) and not all(isinstance(items, list) for items in data.values()):
            message = "expected a list of items, got an object (an object maps session titles to lists)"
            raise ConfigError(message, label)
        if isinstance(data, dict):
            lists = {title: _items(items, f"{label}: {json.dumps(title)}") for title, items in data.items()}
            if not lists:
                raise ConfigError("expected at least one list of items, got an empty object", label)
            default = lists.pop("*", ())
            return cls(default, tuple(lists.items()))
        return cls(_items(data, label))

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Wait for the item's ``delay`` (on trio's clock), then stream its chunks to ``request.text``,
        ``chunk_delay`` apart, and answer with the item.

        **Cancellation:** the answer is abandoned; what was streamed is in ``request.text``.

        **Raises:** ``ModelError`` for an item with ``cut`` (its chunks streamed first).
        """
        items = self.script_of(request.title)
        item = items[min(max(request.index, 0), len(items) - 1)]
        await trio.sleep(item.delay)  # a cancel point even when the delay is 0
        for i, chunk in enumerate(item.chunks):
            if i:
                await trio.sleep(item.chunk_delay)
                await request.text.between_chunks()
            request.text.append(chunk)
        if item.cut:
            raise ModelError(CUT_MESSAGE)
        return ModelReply(
            text=item.text, tool_calls=item.tool_calls, usage=scripted_usage(request, item.text)
        )

    async def aclose(self) -> None:
        """Nothing to release."""
        await trio.lowlevel.checkpoint()


def _items(data: Any, label: str) -> tuple[ScriptItem, ...]:
    if not isinstance(data, list):
        raise ConfigError(f"expected a list of items, got {_kind(data)}", label)
    if not data:
        raise ConfigError("expected at least one item, got an empty list", label)
    return tuple(ScriptItem.from_json(item, f"{label}: item {i}") for i, item in enumerate(data))


@attrs.frozen
class DemoModel:
    """The built-in model of a scripted config without a script: deterministic, offline.

    It runs ``shell`` for a prompt that begins with ``run:``, summarises a tool result, and
    echoes anything else.
    """

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Answer at once from the last message that is not a system note.

        **Cancellation:** the answer is abandoned; nothing is kept.

        **Raises:** nothing.
        """
        await trio.lowlevel.checkpoint()
        reply = demo_reply(request)
        return attrs.evolve(reply, usage=scripted_usage(request, reply.text))

    async def aclose(self) -> None:
        """Nothing to release."""
        await trio.lowlevel.checkpoint()


def demo_reply(request: ModelRequest) -> ModelReply:
    """The demo model's answer to ``request``: a pure function of its messages and index."""
    # A system note (a restart notice, say) does not change what the conversation is waiting for.
    last = next((m for m in reversed(request.messages) if m.role != "system"), None)
    if last is not None and last.role == "tool":
        return ModelReply(text=_summarise_tool_result(last))
    prompt = ""
    if last is not None and last.role == "user":
        prompt = last.content or ""
    if prompt.startswith(DEMO_RUN_PREFIX):
        command = prompt[len(DEMO_RUN_PREFIX) :].strip()
        if not command:
            return ModelReply(text=f"Nothing to run: write a command after {DEMO_RUN_PREFIX!r}.")
        call = ModelToolCall(id=f"call_{request.index}", name="shell", input={"command": command})
        return ModelReply(tool_calls=(call,))
    return ModelReply(text=f"You said: {prompt}")


def _summarise_tool_result(message: ChatMessage) -> str:
    content = message.content or ""
    quote = content[:DEMO_QUOTE_CHARS]
    if _says_failed(content):
        return f"The tool call failed: {quote}"
    return f"The command finished: {quote}"


def _says_failed(content: str) -> bool:
    """Whether a tool message reports a failure: an ``error`` object, or text that says so."""
    try:
        parsed = json.loads(content)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return "error" in parsed
    lowered = content.lstrip().lower()
    return lowered.startswith(("error", "failed", "the tool call failed", "tool call failed"))
