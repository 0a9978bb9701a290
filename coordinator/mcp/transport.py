"""How the coordinator reaches an MCP server: a process of its own speaking on stdin and stdout, or a
Streamable HTTP endpoint. Either yields the pair of message streams an SDK session runs over.

The SDK's own stdio client is not used: it kills the server's process group only when the server
does not exit on its own, so a server that exits at once leaves its children running; and it records
nothing a later start could kill. Here the process runs through the one process-group helper
(``open_process_group``): its group is recorded in the store while it runs, and the whole group is
killed on leaving, whatever the leader did.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
import mcp.types as types
import trio
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage

from coordinator.config import McpConfig
from coordinator.logs import get_logger
from coordinator.tools.process_group import GroupRecords, open_process_group

log = get_logger(__name__)

Streams = tuple[Any, Any]
"""What an SDK ``ClientSession`` reads from and writes to."""

STDIN_GRACE = 0.5
"""Seconds a server gets to exit after its stdin closes, before its group gets SIGTERM."""

_BASE_ENV = ("PATH", "HOME", "LANG")
_ENV_REFERENCE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


@attrs.define
class ServerOutput:
    """The last lines a server wrote on its stderr: what a failure to start names."""

    lines: list[str] = attrs.Factory(list)

    def add(self, line: str) -> None:
        self.lines = [*self.lines[-4:], line]

    def last(self) -> str | None:
        return self.lines[-1] if self.lines else None


@contextlib.asynccontextmanager
async def open_stdio(
    config: McpConfig,
    *,
    base_dir: Path,
    records: GroupRecords | None,
    grace: float,
    output: ServerOutput,
    ended: Callable[[], None],
) -> AsyncIterator[Streams]:
    """Start the server's process in a group of its own, recorded in ``records``, and yield its
    message streams; ``ended`` is called when its output ends (it exited). On leaving, close its stdin, then SIGTERM and SIGKILL its whole group within
    ``grace`` seconds, and reap it. **Raises:** ``OSError`` when it cannot start."""
    env = {name: os.environ[name] for name in _BASE_ENV if name in os.environ}
    env.update(config.env)
    async with (
        open_process_group(
            list(config.command),
            records=records,
            cwd=base_dir / config.cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            term_grace=max(grace - STDIN_GRACE, 0.1),
        ) as proc,
        trio.open_nursery() as nursery,
    ):
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        read_in, read_out = anyio.create_memory_object_stream[SessionMessage | Exception](16)
        write_in, write_out = anyio.create_memory_object_stream[SessionMessage](16)
        nursery.start_soon(_read_messages, proc.stdout, read_in, ended)
        nursery.start_soon(_write_messages, proc.stdin, write_out)
        nursery.start_soon(_read_stderr, proc.stderr, output, config.name)
        try:
            yield read_out, write_in
        finally:
            # Its stdin closed first: a server that exits on its own is never signalled.
            with trio.move_on_after(STDIN_GRACE, shield=True):
                await proc.stdin.aclose()
                await proc.wait()
            nursery.cancel_scope.cancel(reason="the server's streams are closed")


async def _read_messages(stdout: trio.abc.ReceiveStream, messages: Any, ended: Callable[[], None]) -> None:
    """Each line the server writes, as a message (or the error of a line that is not one); then,
    at the end of its output, ``ended``."""
    buffer = b""
    async with messages:
        while chunk := await stdout.receive_some(65536):
            *lines, buffer = (buffer + chunk).split(b"\n")
            for line in lines:
                if line.strip():
                    await messages.send(_message(line))
    ended()


def _message(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:  # not a JSON-RPC message: the session logs it and goes on
        return exc


async def _write_messages(stdin: trio.abc.SendStream, messages: Any) -> None:
    async with messages:
        async for message in messages:
            data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
            try:
                await stdin.send_all(data.encode())
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the server is gone: its reader sees the end of its output


async def _read_stderr(stderr: trio.abc.ReceiveStream, output: ServerOutput, name: str) -> None:
    buffer = b""
    while chunk := await stderr.receive_some(65536):
        *lines, buffer = (buffer + chunk).split(b"\n")
        for line in lines:
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                output.add(text)
                log.debug("mcp_server_stderr", server=name, line=text)


@contextlib.asynccontextmanager
async def open_http(config: McpConfig) -> AsyncIterator[Streams]:
    """The message streams of a Streamable HTTP server, with its headers (``${env:NAME}`` read now).

    **Raises:** ``KeyError`` naming a header's environment variable that is not set.
    """
    headers = {name: _expand(value) for name, value in config.headers.items()}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(config.url, http_client=http) as (read, write),
    ):
        yield read, write


def _expand(value: str) -> str:
    def variable(match: re.Match[str]) -> str:
        name = match[1]
        if name not in os.environ:
            raise KeyError(f"the environment variable {name} is not set")
        return os.environ[name]

    return _ENV_REFERENCE.sub(variable, value)


class Outbox:
    """A session's write stream that tells when its answer to one of the server's requests has been
    handed to the transport (``answered``): a stop answers the server's question before it cancels
    the call, in that order on the wire."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._waiting: dict[Any, trio.Event] = {}

    def answered(self, request_id: Any) -> trio.Event:
        """Set once the answer to the server's request ``request_id`` is sent."""
        return self._waiting.setdefault(request_id, trio.Event())

    async def send(self, item: SessionMessage) -> None:
        await self._inner.send(item)
        message = item.message
        if hasattr(message, "method"):
            return  # a request or notification of ours, not an answer
        waiting = self._waiting.pop(getattr(message, "id", None), None)
        if waiting is not None:
            waiting.set()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Outbox:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        # Closing a memory stream does not wait; bounded anyway, as every cleanup is.
        with trio.move_on_after(STDIN_GRACE, shield=True):
            return await self._inner.__aexit__(*exc_info)
        return None
