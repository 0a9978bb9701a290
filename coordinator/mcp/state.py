"""What ``GET /api/mcp`` shows of a server: readable without loading the MCP SDK, which is loaded
only when a server is configured."""

from __future__ import annotations

from typing import Literal

import attrs

ServerStatus = Literal["connecting", "ready", "failed"]


@attrs.frozen(kw_only=True)
class ServerState:
    """A server as ``GET /api/mcp`` shows it."""

    name: str
    status: ServerStatus
    protocol: str | None = None
    tools: list[str] = attrs.Factory(list)
    error: str | None = None
