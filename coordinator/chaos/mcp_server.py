"""The MCP server of the campaign (``python coordinator/chaos/mcp_server.py``), over stdio.

Written with the standard library alone, on the wire protocol of the 2025 revisions (newline-delimited
JSON-RPC): it starts in a few tens of milliseconds, where a server on the SDK takes a second, which
the campaign pays at every start of every run that has one. It speaks only what the campaign uses:
``initialize``, ``tools/list``, and ``tools/call`` of its one tool, ``wait``, which takes time and
stops at ``notifications/cancelled``. It answers ``server/discover`` as an unknown method, as any
server of the 2025 revisions does.

Like a server wrapped by ``npx``, it keeps a child in its process group, which it never ends itself:
a coordinator that leaves the group alive (after a kill -9, its next start must kill it) leaves that
child, which the campaign's check of leftover processes finds.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

PROTOCOL = "2025-11-25"
WAIT = {
    "name": "wait",
    "description": "Wait some seconds, then say so.",
    "inputSchema": {
        "type": "object",
        "properties": {"seconds": {"type": "number"}},
        "required": ["seconds"],
    },
}


class Server:
    """Reads requests from stdin, writes answers to stdout; each call runs as a task of its own."""

    def __init__(self) -> None:
        self.calls: dict[Any, asyncio.Task[None]] = {}

    def send(self, message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        sys.stdout.flush()

    def handle(self, message: dict[str, Any]) -> None:
        method, ident = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method == "initialize":
            info = {"name": "chaos", "version": "1"}
            result = {"protocolVersion": PROTOCOL, "capabilities": {"tools": {}}, "serverInfo": info}
            self.send({"id": ident, "result": result})
        elif method == "tools/list":
            self.send({"id": ident, "result": {"tools": [WAIT]}})
        elif method == "tools/call":
            self.calls[ident] = asyncio.ensure_future(self.wait(ident, params))
        elif method == "notifications/cancelled":
            task = self.calls.pop(params.get("requestId"), None)
            if task is not None:
                task.cancel()  # a cancelled request gets no answer
        elif method == "ping":
            self.send({"id": ident, "result": {}})
        elif ident is not None:
            self.send({"id": ident, "error": {"code": -32601, "message": "Method not found"}})

    async def wait(self, ident: Any, params: dict[str, Any]) -> None:
        seconds = float((params.get("arguments") or {}).get("seconds", 0))
        await asyncio.sleep(seconds)
        self.calls.pop(ident, None)
        text = f"waited {seconds:g}s"
        self.send({"id": ident, "result": {"content": [{"type": "text", "text": text}], "isError": False}})


async def serve() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    server = Server()
    while line := await reader.readline():
        if line.strip():
            server.handle(json.loads(line))


if __name__ == "__main__":
    # Never ended by the server itself: only the coordinator's kill of the whole group ends it.
    _child = subprocess.Popen(["sleep", "3600"])
    asyncio.run(serve())
