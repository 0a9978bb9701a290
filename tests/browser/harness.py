"""Test parts for the page in a real browser: Debian's Chromium driven by Playwright, servers to point it at.

The tests are synchronous (Playwright's sync API); a server runs either in a thread of its own with its
own trio run (``ServerThread``: ``serve()``, what ``coordinator serve`` runs, or the API behind a
``Gate``), or as a real ``coordinator serve`` process (``ServeProcess``), which a test can stop with
SIGTERM and start again on the same port and database.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
from playwright.sync_api import Browser, Page, sync_playwright
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator import open_coordinator
from coordinator.config import Config, ModelConfig
from coordinator.server.app import build_app
from tests.conftest import ASK_SHELL, make_config
from tests.coordinator.server.harness import hypercorn_app, serving
from tests.servers import server_env

CHROMIUM = Path(os.environ.get("COORDINATOR_TEST_CHROMIUM", "/usr/bin/chromium"))
"""Debian's Chromium; the variable exists so that a test can check what happens without it."""
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]

EXPECT_MS = 10_000
"""How long a browser expectation may take before it fails (the page reacts in milliseconds)."""

START_SECONDS = 30.0


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not CHROMIUM.exists():
        return f"no {CHROMIUM} (apt-get install chromium)"
    return None


@contextlib.contextmanager
def open_browser() -> Iterator[Browser]:
    """Headless Debian Chromium with a fresh profile; Playwright's own browser download is never used."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser: Browser) -> Page:
    page = browser.new_context(viewport={"width": 1100, "height": 760}).new_page()
    page.set_default_timeout(EXPECT_MS)
    return page


def scripted_config(tmp_path: Path, script: Any, **server: Any) -> Config:
    """A config on ``tmp_path`` (port 0, shell asks) whose model plays ``script`` (the scripted model)."""
    script_path = tmp_path / "script.json"
    script_path.write_text(json.dumps(script))
    config = make_config(tmp_path, rules=ASK_SHELL, port=0, shutdown_grace=5, **server)
    return attrs.evolve(config, model=ModelConfig(provider="scripted", script=str(script_path)))


@attrs.define(eq=False)
class Network:
    """The link between the page and the server's event streams, which a test can slow down or cut.

    ``hold()`` keeps back what every ``.../event`` response sends until ``release()`` (a slow network:
    the page hears of nothing meanwhile); ``drop()`` cuts every open stream (a failed connection).
    Every method runs in the server's trio run (``ServerThread.run_sync``).
    """

    _open: trio.Event = attrs.Factory(trio.Event)
    _streams: set[trio.CancelScope] = attrs.Factory(set)

    def __attrs_post_init__(self) -> None:
        self._open.set()

    def hold(self) -> None:
        if self._open.is_set():
            self._open = trio.Event()

    def release(self) -> None:
        self._open.set()

    def drop(self) -> None:
        for stream in self._streams:
            stream.cancel()

    def around(self, app: ASGIApp) -> ASGIApp:
        """``app`` with its event streams passing through this network."""

        async def routed(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or not scope["path"].endswith("/event"):
                await app(scope, receive, send)
                return

            async def held_send(message: Message) -> None:
                if message["type"] == "http.response.body":
                    await self._open.wait()
                await send(message)

            with trio.CancelScope() as stream:
                self._streams.add(stream)
                try:
                    await app(scope, receive, held_send)
                finally:
                    self._streams.discard(stream)

        return routed


@contextlib.asynccontextmanager
async def networked_server(config: Config, network: Network) -> AsyncIterator[str]:
    """The API of ``config`` with its event streams behind ``network``; yields its base URL."""
    async with open_coordinator(config, synchronous="normal") as coordinator:
        async with hypercorn_app(network.around(build_app(coordinator, config))) as url:
            yield url


@contextlib.asynccontextmanager
async def plain_server(config: Config) -> AsyncIterator[str]:
    """``serve(config)``: exactly what ``coordinator serve`` runs; yields its base URL."""
    async with serving(config) as listening:
        yield listening.url


class ServerThread:
    """A server (an async context manager yielding its URL) in its own thread and trio run."""

    def __init__(self, server: Callable[[], contextlib.AbstractAsyncContextManager[str]]) -> None:
        self._server = server
        self._ready: queue.Queue[str | BaseException] = queue.Queue()
        self._stop: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread = threading.Thread(target=self._run, name="page-server", daemon=True)
        self.url = ""

    def __enter__(self) -> ServerThread:
        self._thread.start()
        ready = self._ready.get(timeout=START_SECONDS)
        if isinstance(ready, BaseException):
            raise ready
        self.url = ready
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(timeout=START_SECONDS)
        assert not self._thread.is_alive(), "the server thread did not stop"

    def run_sync(self, function: Callable[..., Any], *args: Any) -> Any:
        """Call ``function`` in the server's trio run (to open or close a ``Gate``)."""
        return trio.from_thread.run_sync(function, *args, trio_token=self._token)

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # handed to the test thread, which raises it
            self._ready.put(exc)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with self._server() as url:
            self._ready.put(url)
            await self._stop.wait()


class ServeProcess:
    """A real ``coordinator serve`` process (its own process group), stopped with SIGTERM."""

    def __init__(self, config: Path, db: Path, cwd: Path, port: int = 0) -> None:
        argv = [sys.executable, "-m", "coordinator", "serve", "--config", str(config), "--db", str(db)]
        self._argv = [*argv, "--port", str(port)]
        self._cwd = cwd
        self._process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def __enter__(self) -> ServeProcess:
        stderr = (self._cwd / f"serve-{os.getpid()}-{id(self)}.stderr").open("wb")
        with stderr:
            self._process = subprocess.Popen(
                self._argv,
                cwd=self._cwd,
                env=server_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
            )
        assert self._process.stdout is not None
        line = self._process.stdout.readline().decode().strip()  # `serve` prints its address at once
        assert line.startswith("coordinator listening on "), line
        self.url = line.rsplit(" ", 1)[1]
        return self

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def terminate(self) -> int:
        """SIGTERM (a graceful shutdown: turns are suspended, waits kept) and wait for the exit."""
        assert self._process is not None
        self._process.send_signal(signal.SIGTERM)
        code = self._process.wait(timeout=START_SECONDS)
        if self._process.stdout is not None:
            self._process.stdout.close()
        return code

    def __exit__(self, *exc: object) -> None:
        if self._process is not None and self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(timeout=START_SECONDS)
        if self._process is not None and self._process.stdout is not None:
            self._process.stdout.close()


def serve_config(tmp_path: Path, script: Sequence[Any] | None) -> Path:
    """A config file for ``coordinator serve``: shell asks; the scripted model, or the demo model."""
    lines = ["[server]", "shutdown_grace = 5", "", "[model]", 'provider = "scripted"']
    if script is not None:
        (tmp_path / "script.json").write_text(json.dumps(list(script)))
        lines.append('script = "script.json"')
    for action in ("*", "shell"):
        effect = "allow" if action == "*" else "ask"
        lines += ["", "[[permission]]", f'action = "{action}"', 'resource = "*"', f'effect = "{effect}"']
    path = tmp_path / "coordinator.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def api(url: str) -> httpx.Client:
    """A plain HTTP client of the server: what another tab, the CLI or a script would send."""
    return httpx.Client(base_url=url, timeout=START_SECONDS)
