"""Offline models: a JSON script replayed request by request, and the built-in demo (contract section 8)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import attrs
import trio

from coordinator.errors import ConfigError
from coordinator.models.base import ChatMessage, ModelReply, ModelRequest, ModelToolCall

_ITEM_KEYS = frozenset({"text", "tool_calls", "delay"})
_CALL_KEYS = frozenset({"id", "name", "input"})

# How much of a tool result the demo model quotes back.
DEMO_QUOTE_CHARS = 200
DEMO_RUN_PREFIX = "run:"


@attrs.frozen(kw_only=True)
class ScriptItem:
    """One scripted answer: its text and tool calls, after ``delay`` seconds."""

    text: str = ""
    tool_calls: tuple[ModelToolCall, ...] = ()
    delay: float = 0

    @classmethod
    def from_json(cls, item: Any, where: str) -> ScriptItem:
        """Check one script item; ``where`` names it (``script.json: item 2``) in a ConfigError."""
        if not isinstance(item, dict):
            raise ConfigError(f"expected an object, got {_kind(item)}", where)
        unknown = sorted(set(item) - _ITEM_KEYS)
        if unknown:
            raise ConfigError(f'unknown key "{unknown[0]}" (expected text, tool_calls, delay)', where)
        if "text" not in item and "tool_calls" not in item:
            raise ConfigError('expected "text" or "tool_calls"', where)
        text = item.get("text", "")
        if not isinstance(text, str):
            raise ConfigError(f"expected a string, got {_kind(text)}", f"{where}.text")
        calls = item.get("tool_calls", [])
        if not isinstance(calls, list):
            raise ConfigError(f"expected a list, got {_kind(calls)}", f"{where}.tool_calls")
        delay = item.get("delay", 0)
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay < math.inf:
            raise ConfigError(f"expected a number of seconds >= 0, got {_kind(delay)}", f"{where}.delay")
        return cls(
            text=text,
            tool_calls=tuple(_tool_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)),
            delay=float(delay),
        )


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
    """Answers request ``i`` of a session with item ``min(i, len - 1)`` of its script."""

    items: tuple[ScriptItem, ...] = attrs.field(validator=attrs.validators.min_len(1))

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
        """Check a parsed script; ``label`` names its source in a ConfigError."""
        if not isinstance(data, list):
            raise ConfigError(f"expected a list of items, got {_kind(data)}", label)
        if not data:
            raise ConfigError("expected at least one item, got an empty list", label)
        return cls(tuple(ScriptItem.from_json(item, f"{label}: item {i}") for i, item in enumerate(data)))

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Wait for the item's ``delay`` (on trio's clock), then answer with the item.

        **Cancellation:** the answer is abandoned; nothing is kept.

        **Raises:** nothing; the script was checked when loaded.
        """
        item = self.items[min(max(request.index, 0), len(self.items) - 1)]
        await trio.sleep(item.delay)  # a checkpoint even when the delay is 0
        return ModelReply(text=item.text, tool_calls=item.tool_calls)

    async def aclose(self) -> None:
        """Nothing to release."""
        await trio.lowlevel.checkpoint()


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
        return demo_reply(request)

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
