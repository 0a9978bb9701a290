"""One ``[[mcp]]`` server's actor: connects, offers the server's tools while it is ready, follows its
tool list, and connects again with backoff whenever the server fails to start or goes away.

Its calls run in the tool-call actors that make them (``coordinator/mcp/call.py``); this actor owns
the connection they share, and routes the server's questions to the call that asked them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import mcp.types as types
import trio
from mcp import ClientSession, MCPError
from mcp.client.session import ClientRequestContext
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost, listen
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from coordinator.config import McpConfig
from coordinator.errors import ToolFailure
from coordinator.logs import get_logger
from coordinator.mcp.state import ServerState, ServerStatus
from coordinator.mcp.transport import Outbox, ServerOutput, Streams, open_http, open_stdio
from coordinator.models.base import ToolSpec
from coordinator.tools.base import Tool, ToolContext, any_resource
from coordinator.tools.process_group import GroupRecords
from coordinator.tools.table import ToolTable

log = get_logger(__name__)


CONNECT_SECONDS = 30.0
"""Seconds a server has to start and answer ``initialize`` and ``tools/list``."""

FIRST_RETRY = 1.0
LAST_RETRY = 60.0
"""A server that failed is connected again after 1 s, then twice as long each time, up to 60 s."""

CLIENT_INFO = types.Implementation(name="coordinator", version="0.1.0")

SEPARATOR = "__"
"""Between a server's name and its tool's in the name the model sees (``files__read``)."""


class ServerLost(Exception):
    """The server's connection ended (its process exited, its endpoint went away)."""


@attrs.define(eq=False)
class McpServer:
    """One configured server and its connection, owned by its ``serve`` task."""

    config: McpConfig
    tools: ToolTable
    records: GroupRecords | None
    base_dir: Path
    grace: float
    run_call: Callable[[McpServer, str, ToolContext, dict[str, Any]], Any]
    status: ServerStatus = "connecting"
    protocol: str | None = None
    error: str | None = None
    tool_names: tuple[str, ...] = ()
    session: ClientSession | None = None
    # The call whose questions the server's ``elicitation/create`` requests are: the one call running.
    asking: Any = None
    # Calls that could ask are serialised: a 2025 revision's question does not say which call it is
    # for. A 2026-07-28 server (``modern``) returns its question as the call's own result instead.
    calls: trio.Lock = attrs.Factory(trio.Lock)
    modern: bool = False
    outbox: Outbox | None = None
    _events: trio.MemorySendChannel[str] | None = None

    @property
    def name(self) -> str:
        return self.config.name

    def state(self) -> ServerState:
        return ServerState(
            name=self.name,
            status=self.status,
            protocol=self.protocol,
            tools=[f"{self.name}{SEPARATOR}{tool}" for tool in self.tool_names],
            error=self.error,
        )

    def why_missing(self, tool_name: str) -> str | None:
        """Why ``tool_name``, one of this server's names, is not offered now."""
        if not tool_name.startswith(self.name + SEPARATOR):
            return None
        if self.status == "ready":
            return f"the MCP server {self.name!r} has no tool {tool_name[len(self.name) + 2 :]!r}"
        detail = f": {self.error}" if self.error else ""
        return f"the MCP server {self.name!r} is not ready ({self.status}{detail})"

    def lost(self, why: str) -> None:
        """A call found the connection gone: connect again."""
        if self._events is not None:
            with contextlib.suppress(trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                self._events.send_nowait(f"lost:{why}")

    async def serve(self) -> None:
        """Connect, serve, and connect again after a failure, until cancelled (the coordinator closes).

        **Cancellation:** the connection is closed: a process gets its stdin closed, then SIGTERM and
        SIGKILL for its whole group within ``grace``, and is reaped (shielded, bounded).
        """
        self.tools.explain_absence(f"mcp:{self.name}", self.why_missing)
        delay = FIRST_RETRY
        while True:
            output = ServerOutput()
            # The transports are task groups: what ends a connection comes wrapped in a group, maybe
            # beside the cancellation of a coordinator that closes, which goes on up.
            try:
                await self._connect_and_serve(output)
            except* ServerLost as lost:
                self._failed(str(lost.exceptions[0]), output)
                delay = FIRST_RETRY
            except* Exception as failed:  # a server that cannot start, or breaks the protocol
                self._failed(_describe(failed), output)
            await trio.sleep(delay)
            delay = min(delay * 2, LAST_RETRY)

    def _failed(self, why: str, output: ServerOutput) -> None:
        said = output.last()
        self.status = "failed"
        self.protocol = None
        self.error = why if said is None else f"{why} (it said: {said})"
        log.warning("mcp_server_failed", server=self.name, error=self.error)

    async def _connect_and_serve(self, output: ServerOutput) -> None:
        self.status, self.error = "connecting", None
        events_in, events_out = trio.open_memory_channel[str](math.inf)
        self._events = events_in
        try:
            async with (
                self._transport(output) as (read, write),
                _Session(
                    read,
                    self._outbox(write),
                    elicitation_callback=self._elicit,
                    message_handler=self._on_message,
                    client_info=CLIENT_INFO,
                ) as session,
            ):
                with trio.fail_after(CONNECT_SECONDS):
                    self.protocol = await _negotiate(session)
                    listed = await _list_tools(session)
                self.session = session
                self.modern = self.protocol in MODERN_PROTOCOL_VERSIONS
                self._offer(listed)
                self.status = "ready"
                log.info("mcp_server_ready", server=self.name, protocol=self.protocol, tools=len(listed))
                async with trio.open_nursery() as nursery:
                    if self.modern:
                        nursery.start_soon(self._listen, session)
                    why = await self._follow(session, events_out)
                    nursery.cancel_scope.cancel(reason="the connection ended")
                raise ServerLost(why)
        finally:
            self._events = None
            self.session = None
            self.modern = False
            self.tool_names = ()
            self.tools.withdraw(f"mcp:{self.name}")

    @contextlib.asynccontextmanager
    async def _transport(self, output: ServerOutput) -> AsyncIterator[Streams]:
        if self.config.transport == "http":
            async with open_http(self.config) as streams:
                yield streams
            return
        async with open_stdio(
            self.config,
            base_dir=self.base_dir,
            records=self.records,
            grace=self.grace,
            output=output,
            ended=lambda: self.lost("the server's process exited"),
        ) as streams:
            yield streams

    async def _listen(self, session: ClientSession) -> None:
        """A 2026-07-28 server tells its tool list changed only to a client that listens: the
        notification itself reaches ``_on_message``."""
        try:
            async with listen(session, tools_list_changed=True) as changes:
                async for _ in changes:
                    await trio.lowlevel.checkpoint()
        except (MCPError, ListenNotSupportedError) as exc:
            log.info("mcp_server_offers_no_listen", server=self.name, error=str(exc))
        except SubscriptionLost:
            self.lost("the server ended its subscription")

    async def _follow(self, session: ClientSession, events: trio.MemoryReceiveChannel[str]) -> str:
        """While the connection lasts: the tool list again at each change. Returns why the
        connection ended."""
        async for event in events:
            if event.startswith("lost:"):
                return event.removeprefix("lost:")
            self._offer(await _list_tools(session))
            log.info("mcp_tools_changed", server=self.name, tools=len(self.tool_names))
        raise AssertionError("the connection's events never end while it is open")

    def _outbox(self, write: Any) -> Outbox:
        self.outbox = Outbox(write)
        return self.outbox

    def _offer(self, listed: list[types.Tool]) -> None:
        self.tool_names = tuple(tool.name for tool in listed)
        self.tools.provide(f"mcp:{self.name}", [self._tool(tool) for tool in listed])

    def _tool(self, tool: types.Tool) -> Tool:
        name = tool.name

        async def run(context: ToolContext, arguments: dict[str, Any]) -> Any:
            return await self.run_call(self, name, context, arguments)

        spec = ToolSpec(
            name=f"{self.name}{SEPARATOR}{name}",
            description=tool.description or "",
            parameters=dict(tool.input_schema or {"type": "object"}),
        )
        deadline = self.config.timeout if self.config.timeout > 0 else None
        return Tool(
            spec=spec, resource=any_resource, run=run, deadline_scope="tool", deadline_seconds=deadline
        )

    def ready_session(self) -> ClientSession:
        """The live session. **Raises:** ``ToolFailure`` naming the server when it is not ready."""
        if self.session is None or self.status != "ready":
            why = self.why_missing(self.name + SEPARATOR)
            raise ToolFailure(type="error", message=why or f"the MCP server {self.name!r} is not ready")
        return self.session

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification) and self._events is not None:
            with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
                self._events.send_nowait("tools")
        elif isinstance(message, Exception):
            log.info("mcp_server_message_refused", server=self.name, error=str(message))
            if self.config.transport == "http":
                self.lost(f"the connection failed: {message}")
        await trio.lowlevel.checkpoint()

    async def _elicit(
        self, context: ClientRequestContext, params: Any
    ) -> types.ElicitResult | types.ErrorData:
        if getattr(params, "mode", "form") != "form":
            return types.ErrorData(code=types.INVALID_PARAMS, message="only form-mode elicitation is offered")
        asking = self.asking
        if asking is None:
            return types.ErrorData(code=types.INVALID_REQUEST, message="no tool call is running to ask for")
        answer: types.ElicitResult = await asking.ask(
            context.request_id, params.message, params.requested_schema
        )
        return answer


class _Session(ClientSession):
    """The SDK's session, declaring what this client offers: form-mode elicitation only (no URL
    mode, no sampling, no roots)."""

    def _build_capabilities(self, version: str) -> types.ClientCapabilities:
        offered = super()._build_capabilities(version)
        elicitation = types.ElicitationCapability(form=types.FormElicitationCapability())
        return offered.model_copy(update={"elicitation": elicitation, "sampling": None, "roots": None})


async def _negotiate(session: ClientSession) -> str:
    """The revision both sides speak: 2026-07-28 when the server answers ``server/discover``, else
    the 2025 handshake. Returns it."""
    try:
        await session.discover()
    except MCPError:
        await session.initialize()
    assert session.protocol_version is not None
    return session.protocol_version


async def _list_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
        page = await session.list_tools(params=params)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools


def _describe(exc: BaseException) -> str:
    if isinstance(exc, trio.TooSlowError):
        return f"it did not answer within {CONNECT_SECONDS:g}s"
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _describe(exc.exceptions[0])
    if isinstance(exc, FileNotFoundError):
        return f"cannot start it: {exc.strerror}: {exc.filename}"
    return f"{type(exc).__name__}: {exc}"
