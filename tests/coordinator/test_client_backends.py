"""The Python client is the same under asyncio and under trio: each scenario runs under both.

The server is a real ``coordinator serve`` process on the demo model (no script: it answers "You said:
..." and runs ``shell`` for a prompt that begins with ``run:``), with ``shell`` asking permission. The
scenarios are written against anyio and run by ``anyio.run`` with each backend.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from coordinator.client import CoordinatorClient
from coordinator.errors import SessionNotFound
from tests.servers import server_env

ASYNC_BACKENDS = ("asyncio", "trio")

CONFIG = """
[server]
db = "{db}"
port = {port}
shutdown_grace = 5

[model]
provider = "scripted"

[[permission]]
action = "*"
resource = "*"
effect = "allow"

[[permission]]
action = "shell"
resource = "*"
effect = "ask"
"""


@attrs.define
class Server:
    """A ``coordinator serve`` process on a fixed port, which a scenario may stop and start again."""

    folder: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        config = self.folder / "coordinator.toml"
        config.write_text(CONFIG.format(db=self.folder / "db.sqlite", port=self.port))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "coordinator", "serve", "--config", str(config)],
            cwd=self.folder,
            env=server_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode()
        assert line.startswith("coordinator listening on "), line

    def stop(self) -> None:
        """SIGTERM, and wait for the graceful exit."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = Server(folder=tmp_path, port=free_port())
    running.start()
    try:
        yield running
    finally:
        running.stop()


Scenario = Callable[[Server, CoordinatorClient], Awaitable[None]]


def run_under(backend: str, server: Server, scenario: Scenario) -> None:
    async def main() -> None:
        with anyio.fail_after(60):
            async with CoordinatorClient(server.url) as client:
                await scenario(server, client)

    anyio.run(main, backend=backend)


async def until_idle(client: CoordinatorClient, session_id: str, *, count: int = 1) -> list[dict[str, Any]]:
    """The session's events (replayed, then live) up to its ``count``-th ``session.idle``.

    The stream is left by cancelling it, as the client asks (breaking out would leave httpx's
    iterators to the garbage collector).
    """
    seen: list[dict[str, Any]] = []
    with anyio.CancelScope() as following:
        async for event in client.events(session_id=session_id, follow=True):
            seen.append(event)
            if sum(e["type"] == "session.idle" for e in seen) == count:
                following.cancel()
    return seen


@pytest.mark.parametrize("backend", ASYNC_BACKENDS)
def test_a_turn_and_its_permission_through_the_client(backend: str, server: Server) -> None:
    async def scenario(server: Server, client: CoordinatorClient) -> None:
        assert (await client.health())["status"] == "ok"
        session = await client.create_session(title="t")
        await client.prompt(session.id, "run: echo hi")
        pending: list[Any] = []
        while not pending:
            pending = await client.pending_permissions(session.id)
            await anyio.sleep(0.02)
        await client.reply_permission(session.id, pending[0].id, "once")
        events = await until_idle(client, session.id)
        types = [e["type"] for e in events]
        assert types[-3:] == ["session.step.succeeded", "session.execution.succeeded", "session.idle"]
        assert "permission.replied" in types
        history = await client.history(session.id)
        assert history[0].parts[0].text == "run: echo hi"
        with pytest.raises(SessionNotFound):
            await client.get_session("ses_nobody")

    run_under(backend, server, scenario)


async def restart_and_prompt(server: Server, session_id: str) -> None:
    await anyio.to_thread.run_sync(server.stop)
    await anyio.to_thread.run_sync(server.start)
    async with CoordinatorClient(server.url) as other:
        await other.prompt(session_id, "second")


@pytest.mark.parametrize("backend", ASYNC_BACKENDS)
def test_a_followed_stream_resumes_after_a_server_restart_without_a_gap(backend: str, server: Server) -> None:
    """The server goes away mid-stream and comes back: the client reconnects with ``Last-Event-ID``
    and reads every event once, in order."""

    async def scenario(server: Server, client: CoordinatorClient) -> None:
        session = await client.create_session(title="t")
        await client.prompt(session.id, "first")
        seen: list[dict[str, Any]] = []
        with anyio.CancelScope() as following:
            async for event in client.events(session_id=session.id, follow=True):
                seen.append(event)
                if event["type"] != "session.idle":
                    continue
                if sum(e["type"] == "session.idle" for e in seen) == 2:
                    following.cancel()
                else:
                    await restart_and_prompt(server, session.id)
        seqs = [e["seq"] for e in seen]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        texts = [e["prompt"] for e in seen if e["type"] == "session.turn.started"]
        assert texts == ["first", "second"]

    run_under(backend, server, scenario)
