"""The MCP server of the process rounds (``python -m coordinator.chaos.mcp_server``), over stdio.

Its one tool, ``wait``, takes time and stops when it is cancelled. Like a server wrapped by ``npx``, it
keeps a child in its process group, which it never ends itself: a coordinator that leaves the group alive
(after a kill -9, its next start must kill it) leaves that child, which the round's check of leftover
processes finds.
"""

from __future__ import annotations

import subprocess

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("chaos")


@server.tool()
async def wait(seconds: float) -> str:
    """Wait ``seconds``, then say so."""
    await anyio.sleep(seconds)
    return f"waited {seconds:g}s"


if __name__ == "__main__":
    # Never killed by the server itself: only the coordinator's kill of the whole group ends it.
    _child = subprocess.Popen(["sleep", "3600"])
    server.run("stdio")
