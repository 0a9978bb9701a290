"""MCP servers as tool providers: every ``[[mcp]]`` server connected while the coordinator runs.

Each server is an actor of its own (``server.McpServer``) under this one's nursery; its tools join
every session's tool table as ``SERVER__TOOL`` while it is ready. ``design/mcp.md`` explains the
client: the stops, the questions, the processes, and what is not offered.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import trio

from coordinator.config import McpConfig
from coordinator.mcp.state import ServerState
from coordinator.store import Store
from coordinator.tools.process_group import GroupOwner, StoredGroups
from coordinator.tools.table import ToolTable

if TYPE_CHECKING:
    from coordinator.mcp.server import McpServer

__all__ = ["McpServers", "ServerState"]


class McpServers:
    """The configured servers, connected by ``serve`` until ``aclose``."""

    def __init__(
        self,
        configs: tuple[McpConfig, ...],
        *,
        tools: ToolTable,
        store: Store,
        instance_id: str,
        base_dir: Path,
        grace: float,
    ) -> None:
        self._closing = trio.Event()
        self._closed = trio.Event()
        self._servers: list[McpServer] = []
        if not configs:
            return  # the SDK (a second to import) is loaded only for a coordinator that has servers
        from coordinator.mcp.call import run_call
        from coordinator.mcp.server import McpServer as Server

        self._servers = [
            Server(
                config=config,
                tools=tools,
                records=StoredGroups(store, GroupOwner(instance_id=instance_id, label=f"mcp:{config.name}")),
                base_dir=base_dir,
                grace=grace,
                run_call=run_call,
            )
            for config in configs
        ]

    def states(self) -> list[ServerState]:
        """Every server as ``GET /api/mcp`` shows it, in the config's order."""
        return [server.state() for server in self._servers]

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect every server (each retried on its own) until ``aclose``; started at once, without
        waiting for any server: the coordinator serves whatever its servers do."""
        try:
            async with trio.open_nursery() as nursery:
                for server in self._servers:
                    nursery.start_soon(server.serve, name=f"mcp:{server.name}")
                task_status.started()
                await self._closing.wait()
                nursery.cancel_scope.cancel(reason="the coordinator is closing")
        finally:
            self._closed.set()

    async def aclose(self) -> None:
        """Close every connection: each process's stdin closed, then its group signalled and reaped
        within the shutdown grace."""
        self._closing.set()
        await self._closed.wait()
