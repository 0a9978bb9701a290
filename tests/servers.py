"""Coordinator servers as real processes, for tests: write a config, start, wait healthy, SIGTERM, kill -9.

Everything here is async (trio), so a test can serve the mock model (``tests/model_server.py``) in the
same trio run that the server process talks to; a blocking wait would starve the mock.

Each server runs in a session of its own (``start_new_session``), so ``kill`` reaches its whole process
group with one ``killpg``, as an operator's ``kill -9 -PGID`` would. Processes the server put in groups
of their own (a shell tool's command, an execute runner) are not reached, exactly as in real life.
A killed server is reaped at once: an unreaped zombie still answers ``kill(pid, 0)``, and would look
alive to another coordinator deciding whether its claims are orphaned.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from coordinator.client import CoordinatorClient
from coordinator.records import Session
from coordinator.store import open_read_view
from coordinator.store.rows import ProcessGroupRow
from tests.coordinator.server.harness import EventLog

REPO = Path(__file__).resolve().parents[1]

START_SECONDS = 30.0
"""Seconds a server may take to announce its address and answer /health."""

STOP_SECONDS = 30.0
"""Seconds a server may take to exit after a signal."""

POLL = 0.02
"""Seconds between two looks at something another process changes (/health, the database, /proc)."""

ASK_SHELL_RULES: tuple[Mapping[str, str], ...] = (
    {"action": "*", "resource": "*", "effect": "allow"},
    {"action": "shell", "resource": "*", "effect": "ask"},
)
"""Every tool allowed, shell asks: the contract's example rules."""


def server_env(**extra: str) -> dict[str, str]:
    """This environment with the repository importable and no token inherited from the caller."""
    env = {k: v for k, v in os.environ.items() if k != "COORDINATOR_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    raise TypeError(f"no TOML spelling for {value!r}")


def _toml_table(header: str, values: Mapping[str, Any]) -> list[str]:
    return [header, *(f"{key} = {_toml_value(value)}" for key, value in values.items()), ""]


def write_config(
    path: Path,
    *,
    model_url: str,
    server: Mapping[str, Any] | None = None,
    timeouts: Mapping[str, Any] | None = None,
    permission: Sequence[Mapping[str, str]] = ASK_SHELL_RULES,
    plugins: Sequence[str] = (),
    extra: str = "",
) -> Path:
    """Write a config file whose model is the OpenAI-compatible ``model_url``.

    ``server`` and ``timeouts`` hold keys of those tables; the shutdown grace defaults to 5 seconds so a
    stuck shutdown fails a test quickly. ``plugins`` are ``[[plugin]]`` entries (``module:attribute``,
    a module may sit in the config file's folder); ``extra`` is TOML appended as it is. Returns ``path``.
    """
    model = {"provider": "openai", "base_url": model_url, "name": "mock", "api_key_env": "COORDINATOR_NO_KEY"}
    lines = _toml_table("[server]", {"shutdown_grace": 5, **(server or {})})
    lines += _toml_table("[model]", model)
    lines += _toml_table("[timeouts]", dict(timeouts or {}))
    for rule in permission:
        lines += _toml_table("[[permission]]", rule)
    for entry in plugins:
        lines += _toml_table("[[plugin]]", {"entry": entry})
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


@attrs.define(eq=False)
class ServerProcess:
    """One ``coordinator serve`` process, its URL and the file its log lines (JSON) go to."""

    process: trio.Process
    url: str
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def terminate(self, signum: signal.Signals = signal.SIGTERM) -> int:
        """Send ``signum`` (a graceful shutdown for SIGTERM/SIGINT) and wait for the exit; its code.

        **Cancellation:** the process goes on shutting down; ``server_process`` kills it at the end.

        **Raises:** ``trio.TooSlowError`` when the process is still running after ``STOP_SECONDS``.
        """
        self.process.send_signal(signum)
        with trio.fail_after(STOP_SECONDS):
            return await self.process.wait()

    async def kill(self, *, reap: bool = True) -> None:
        """``kill -9`` the server's whole process group and reap it, so that its pid is gone.

        With ``reap=False`` the dead server stays a zombie (as under a parent that never waits) until
        ``process.wait()``; the pid then still answers ``kill(pid, 0)``.

        **Cancellation:** the signal is sent first; a cancelled wait leaves the zombie to
        ``server_process``, which reaps it.

        **Raises:** ``trio.TooSlowError`` when the process is not reaped within ``STOP_SECONDS``.
        """
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if reap:
            with trio.fail_after(STOP_SECONDS):
                await self.process.wait()

    def log(self) -> list[dict[str, Any]]:
        """The server's structured log lines so far (lines that are not JSON are skipped)."""
        lines = []
        for line in self.stderr_path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                parsed = json.loads(line)
                if isinstance(parsed, dict):
                    lines.append(parsed)
        return lines

    def logged(self, event: str) -> list[dict[str, Any]]:
        """The log lines whose ``event`` is ``event``."""
        return [line for line in self.log() if line.get("event") == event]

    def instance_id(self) -> str:
        """This process's coordinator instance id (the owner its claims name)."""
        return str(self.logged("coordinator_started")[0]["instance_id"])


async def start_server(
    config: Path, db: Path | str, *, cwd: Path, name: str = "server", port: int = 0, **env: str
) -> ServerProcess:
    """Start ``python -m coordinator serve`` and return once it answers ``GET /health``.

    Its log goes to ``cwd/<name>.stderr`` (``<name>-2.stderr``... if taken).

    **Cancellation:** the process is killed and reaped before the ``Cancelled`` propagates.

    **Raises:** ``AssertionError`` (with the server's stderr) when it exits or stays silent instead of
    announcing its address; ``trio.TooSlowError`` when it is not healthy within ``START_SECONDS``.
    """
    stderr_path = _fresh_path(cwd, name, ".stderr")
    argv = [sys.executable, "-m", "coordinator", "serve", "--config", str(config), "--db", str(db)]
    argv += ["--port", str(port)]
    with stderr_path.open("wb") as sink:
        process = await trio.lowlevel.open_process(
            argv,
            cwd=cwd,
            env=server_env(**env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=sink,
            start_new_session=True,
        )
    server = ServerProcess(process=process, url="", stderr_path=stderr_path)
    try:
        with trio.fail_after(START_SECONDS):
            announced = await _first_line(server)
            assert announced.startswith("coordinator listening on "), announced
            server.url = announced.rsplit(" ", 1)[1]
            await wait_healthy(server.url)
    except BaseException:
        with trio.move_on_after(STOP_SECONDS, shield=True):
            await server.kill()
            await _close_stdout(server)
        raise
    return server


def _fresh_path(folder: Path, stem: str, suffix: str) -> Path:
    """``folder/stem.suffix``, or ``stem-2``, ``stem-3``... when taken (a restart keeps the old log)."""
    path, n = folder / f"{stem}{suffix}", 1
    while path.exists():
        n += 1
        path = folder / f"{stem}-{n}{suffix}"
    return path


async def _first_line(server: ServerProcess) -> str:
    stdout = server.process.stdout
    assert stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        chunk = await stdout.receive_some(1)
        if not chunk:
            code = await server.process.wait()
            raise AssertionError(
                f"the server exited ({code}) before listening; stderr:\n{server.stderr_path.read_text()}"
            )
        line += chunk
    return line.decode().rstrip("\n")


async def wait_healthy(url: str, seconds: float = START_SECONDS) -> None:
    """Poll ``GET {url}/health`` until it answers ``{"status": "ok"}``.

    **Raises:** ``trio.TooSlowError`` after ``seconds``.
    """
    with trio.fail_after(seconds):
        async with httpx.AsyncClient(timeout=seconds) as http:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    response = await http.get(f"{url}/health")
                    if response.status_code == 200 and response.json() == {"status": "ok"}:
                        return
                await trio.sleep(POLL)


async def _close_stdout(server: ServerProcess) -> None:
    if server.process.stdout is not None:
        await server.process.stdout.aclose()


@contextlib.asynccontextmanager
async def server_process(
    config: Path, db: Path | str, *, cwd: Path, name: str = "server", port: int = 0, **env: str
) -> AsyncIterator[ServerProcess]:
    """``start_server`` for the block; a server the test left running is killed (``kill -9``) at the end.

    **Cancellation:** the process is still killed and reaped.
    """
    server = await start_server(config, db, cwd=cwd, name=name, port=port, **env)
    try:
        yield server
    finally:
        with trio.move_on_after(STOP_SECONDS, shield=True):
            if server.returncode is None:
                await server.kill()
            await _close_stdout(server)


@attrs.frozen
class Watched:
    """A server process, a client of it, and its whole event stream from seq 0, followed live."""

    server: ServerProcess
    client: CoordinatorClient
    log: EventLog

    def types(self, session_id: str) -> list[str]:
        return self.log.types(session_id)

    async def stored(self, session_id: str) -> list[dict[str, Any]]:
        """The session's stored events, replayed from seq 0 (the stream without following)."""
        return [e async for e in self.client.events(after=0, session_id=session_id, follow=False)]


@contextlib.asynccontextmanager
async def watched_server(
    config: Path, db: Path | str, *, cwd: Path, name: str = "server"
) -> AsyncIterator[Watched]:
    """``server_process`` with a client and an ``EventLog`` following every event from seq 0.

    The follower reconnects (``Last-Event-ID``) while the block runs, also after the server died.
    """
    async with (
        server_process(config, db, cwd=cwd, name=name) as server,
        CoordinatorClient(server.url) as client,
        trio.open_nursery() as nursery,
    ):
        log = EventLog()
        nursery.start_soon(log.follow, client)
        yield Watched(server=server, client=client, log=log)
        nursery.cancel_scope.cancel()


def stored_session(db: Path | str, session_id: str) -> Session:
    """The session as the database has it, read directly: what the next start will find."""
    with open_read_view(str(db)) as reader:
        found = reader.get_session(session_id)
    assert found is not None, f"no session {session_id} in {db}"
    return found


async def recorded_process_group(db: Path | str, session_id: str, call_id: str, seconds: float = 15.0) -> int:
    """The process group a server recorded for a running shell call, once that record is durable.

    **Raises:** ``trio.TooSlowError`` when nothing is recorded within ``seconds``.
    """
    with trio.fail_after(seconds), open_read_view(str(db)) as reader:
        # Another process writes it: there is nothing to wait on but the database itself.
        while (group := reader.process_group_of(session_id, call_id)) is None:  # noqa: ASYNC110
            await trio.sleep(POLL)
    return group.pgid


def process_group_record(db: Path | str, session_id: str, call_id: str) -> ProcessGroupRow | None:
    """The record of the process group a call's tool started, as the database has it now: gone once
    the group was reaped, or killed by the start after a crash."""
    with open_read_view(str(db)) as reader:
        return reader.process_group_of(session_id, call_id)


def group_gone(pgid: int) -> bool:
    """No live process left in process group ``pgid`` (zombies waiting for init count as gone)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            state, _ppid, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
            if int(group) == pgid and state != "Z":
                return False
    return True


async def wait_group_gone(pgid: int, seconds: float = 3.0) -> bool:
    """Whether process group ``pgid`` is gone within ``seconds`` (a SIGKILL completes asynchronously)."""
    with trio.move_on_after(seconds):
        while not group_gone(pgid):  # noqa: ASYNC110 (the kernel's doing: nothing to wait on)
            await trio.sleep(POLL)
    return group_gone(pgid)
