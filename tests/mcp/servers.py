"""The fixture MCP server as the tests run it: over Streamable HTTP in a process of its own."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import trio

FIXTURE = Path(__file__).parent / "fixture_server.py"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def http_fixture(record: Path, *, port: int | None = None) -> AsyncIterator[str]:
    """The fixture server listening on 127.0.0.1, its ``/mcp`` URL yielded once it accepts
    connections; killed with its process group and reaped on leaving."""
    port = port or free_port()
    env = {**os.environ, "FIXTURE_RECORD": str(record)}
    process = await trio.lowlevel.open_process(
        [sys.executable, str(FIXTURE), "http", str(port)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        with trio.fail_after(20):
            while True:
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                except OSError:
                    await trio.sleep(0.05)
                    continue
                await stream.aclose()
                break
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        with trio.move_on_after(5, shield=True):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
