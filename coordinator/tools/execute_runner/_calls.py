"""Nested tool calls: ``tools`` in the script, each call a request its reply is matched to."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine
from typing import Any

from ._channel import Channel, encode


class ToolError(Exception):
    """A nested tool call failed: ``type`` is the contract's error type, ``message`` says why."""

    # A script's traceback names it as the script does, ``ToolError``: Python leaves the module out
    # of the exception line only for ``__main__`` and ``builtins``.
    __module__ = "__main__"

    def __init__(self, type: str, message: str) -> None:
        super().__init__(f"{type}: {message}")
        self.type = type
        self.message = message


class Client:
    """The script's side of nested calls: one request id per call, answered by the reader thread."""

    def __init__(self, channel: Channel, loop: asyncio.AbstractEventLoop, max_message: int) -> None:
        self._channel = channel
        self._loop = loop
        self._max_message = max_message
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}

    async def call(self, name: str, input: dict[str, Any]) -> Any:
        if not isinstance(name, str) or not name:
            raise TypeError("a tool name must be a non-empty string")
        if not isinstance(input, dict):
            raise TypeError(f"the input of tool {name} must be a dict, not {type(input).__name__}")
        request_id = next(self._ids)
        # Encoded before it is registered: input that is not JSON raises here, in the script.
        data = encode({"type": "call", "id": request_id, "name": name, "input": input})
        if len(data) > self._max_message:
            raise ValueError(
                f"the input of tool {name} is {len(data)} bytes of JSON; at most {self._max_message}"
            )
        future: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._pending[request_id] = future
        try:
            self._channel.send(data)
            reply = await future
        finally:
            self._pending.pop(request_id, None)
        if reply.get("ok"):
            return reply.get("output")
        error = reply.get("error") or {}
        raise ToolError(str(error.get("type", "error")), str(error.get("message", "")))

    def deliver(self, reply: dict[str, Any]) -> None:
        future = self._pending.get(reply.get("id"))  # type: ignore[arg-type]
        # A call the script stopped awaiting (asyncio.wait_for) has a cancelled future: drop its reply.
        if future is not None and not future.done():
            future.set_result(reply)


class Tools:
    """``tools`` in the script: ``await tools.NAME(**input)`` or ``await tools.call("NAME", {...})``."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def call(self, name: str, input: dict[str, Any] | None = None) -> Coroutine[Any, Any, Any]:
        return self._client.call(name, {} if input is None else input)

    def __getattr__(self, name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
        if name.startswith("_"):
            raise AttributeError(name)

        def call_tool(*args: Any, **input: Any) -> Coroutine[Any, Any, Any]:
            if args:
                raise TypeError(f"tools.{name} takes keyword arguments only: tools.{name}(**input)")
            return self._client.call(name, input)

        call_tool.__name__ = name
        return call_tool
