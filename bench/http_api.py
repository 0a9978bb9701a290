"""Through the HTTP API: a text turn's latency, the server's RSS, and the event stream's fan-out.

The server is ``python -m coordinator serve --config F --port 0``, a child process (its RSS is its
own); it listens on loopback. Its model is an OpenAI-compatible mock on loopback in this process
(``mock_model.py``).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
import httpx
import trio

from bench.harness import NOOP_ENTRY, Sizes, median, p99, rss_kib
from bench.mock_model import FANOUT_PREFIX, serve_mock_model
from bench.scale import child_env

START_SECONDS = 30.0
STOP_SECONDS = 20.0
WAIT_SECONDS = 120.0
"""Bound on any wait for the server: a stuck benchmark fails instead of hanging ``make bench``."""

_IDLE = b"\nevent: session.idle\n"
_EVENT = b"\nevent: "


@attrs.frozen
class Server:
    """A running ``coordinator serve`` child: its URL, process id and process."""

    url: str
    pid: int
    process: trio.Process | None = None


def _toml(value: Any) -> str:
    return json.dumps(value)  # a JSON string or number is a valid TOML value


def write_config(path: Path, db: Path, model: dict[str, str]) -> Path:
    """A config file: the database, any free port, ``model``, everything allowed, the no-op plugin."""
    lines = ["[server]", f"db = {_toml(str(db))}", "port = 0", "shutdown_grace = 10", "", "[model]"]
    lines += [f"{key} = {_toml(value)}" for key, value in model.items()]
    lines += ["", "[[permission]]", 'action = "*"', 'resource = "*"', 'effect = "allow"', ""]
    lines += ["[[plugin]]", f"entry = {_toml(NOOP_ENTRY)}", ""]
    path.write_text("\n".join(lines))
    return path


@asynccontextmanager
async def running_server(config: Path, log: Path) -> AsyncIterator[Server]:
    """``coordinator serve`` on ``config`` until the block ends, then SIGTERM (a graceful shutdown)."""
    command = [sys.executable, "-m", "coordinator", "serve", "--config", str(config), "--port", "0"]
    with log.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            command, stdout=subprocess.PIPE, stderr=stderr, env=child_env(), start_new_session=True
        )
        try:
            assert process.stdout is not None
            with trio.fail_after(START_SECONDS):
                url = await _listening_url(process.stdout)
            yield Server(url=url, pid=process.pid, process=process)
        finally:
            with trio.move_on_after(STOP_SECONDS, shield=True):
                process.send_signal(signal.SIGTERM)
                await process.wait()
            if process.returncode is None:
                process.kill()
                with trio.move_on_after(5, shield=True):
                    await process.wait()
            if process.stdout is not None:
                await process.stdout.aclose()


async def _listening_url(stdout: trio.abc.ReceiveStream) -> str:
    """The URL of the server's ``coordinator listening on URL`` line."""
    seen = b""
    while b"\n" not in seen:
        data = await stdout.receive_some(4096)
        if not data:
            raise RuntimeError(f"the server exited before listening: {seen!r}")
        seen += data
    line = seen.split(b"\n", 1)[0].decode()
    return line.rsplit(" ", 1)[-1]


class RawSubscriber:
    """An event-stream reader on a plain socket that only counts events, so it costs next to nothing.

    Each event has one ``event:`` line; ``session.idle`` ones are counted apart.
    """

    def __init__(self, url: str, path: str) -> None:
        parts = urlsplit(url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._path = path
        self.events = 0
        self.idle = 0
        self.last_seq = 0
        self.connected = trio.Event()
        self._changed = trio.Event()

    async def wait_idle(self, count: int) -> None:
        """Until ``count`` ``session.idle`` events have arrived (woken by each read, not polled)."""
        with trio.fail_after(WAIT_SECONDS):
            while self.idle < count:
                await self._changed.wait()

    async def run(self) -> None:
        stream = await trio.open_tcp_stream(self._host, self._port)
        async with stream:
            request = f"GET {self._path} HTTP/1.1\r\nHost: {self._host}\r\nAccept: text/event-stream\r\n\r\n"
            await stream.send_all(request.encode())
            tail = b""
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                if not self.connected.is_set() and b"\r\n\r\n" in tail + data:
                    self.connected.set()
                # The tail is shorter than a marker, so it holds none: counts split across reads add up.
                window = tail + data
                self.events += window.count(_EVENT)
                self.idle += window.count(_IDLE)
                self._note_seq(window)
                tail = window[-(len(_IDLE) - 1) :]
                self._changed.set()
                self._changed = trio.Event()

    def _note_seq(self, window: bytes) -> None:
        """Remember the last whole ``id: SEQ`` line (JSON data never holds ``id:`` and a space)."""
        at = window.rfind(b"id: ")
        end = window.find(b"\n", at)
        if at >= 0 and end > at and window[at + 4 : end].isdigit():
            self.last_seq = int(window[at + 4 : end])


class RawClient:
    """HTTP/1.1 requests with JSON bodies on one kept-alive plain socket: next to no client cost, so
    a latency measures the server (httpx adds about 3 ms a request here, measured on ``/health``)."""

    def __init__(self, stream: trio.SocketStream, host: str) -> None:
        self._stream = stream
        self._host = host
        self._buffer = b""

    @classmethod
    @asynccontextmanager
    async def connect(cls, url: str) -> AsyncIterator[RawClient]:
        parts = urlsplit(url)
        stream = await trio.open_tcp_stream(parts.hostname or "127.0.0.1", parts.port or 80)
        async with stream:
            yield cls(stream, parts.hostname or "127.0.0.1")

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        data = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self._host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        )
        await self._stream.send_all(head.encode() + data)
        return await self._response()

    async def _response(self) -> tuple[int, bytes]:
        while b"\r\n\r\n" not in self._buffer:
            await self._read()
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        length = next(
            int(v) for k, _, v in (line.partition(":") for line in lines[1:]) if k.lower() == "content-length"
        )
        while len(self._buffer) < length:
            await self._read()
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return int(lines[0].split()[1]), body

    async def _read(self) -> None:
        data = await self._stream.receive_some(65536)
        if not data:
            raise RuntimeError("the server closed the connection")
        self._buffer += data


async def _raw_text_turns(server: Server, turns: int) -> list[float]:
    """``_text_turns`` with a plain-socket client: POST to ``session.idle`` on the session's stream."""
    async with RawClient.connect(server.url) as client:
        status, body = await client.post("/api/session", {"title": "bench-raw"})
        if status != 201 and status != 200:
            raise RuntimeError(f"creating a session answered {status}: {body!r}")
        session_id = json.loads(body)["id"]
        stream = RawSubscriber(server.url, f"/api/session/{session_id}/event?after=0")
        latencies = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.run)
            for turn in range(turns + 1):  # the first is a warm-up
                started = time.perf_counter()
                status, body = await client.post(f"/api/session/{session_id}/prompt", {"text": "hello"})
                if status >= 300:
                    raise RuntimeError(f"a prompt answered {status}: {body!r}")
                await stream.wait_idle(turn + 1)
                latencies.append(time.perf_counter() - started)
            nursery.cancel_scope.cancel()
    return latencies[1:]


async def _wait_until(predicate: Any) -> None:
    """Poll ``predicate``: the readers count events without waking anyone, so they stay cheap."""
    with trio.fail_after(WAIT_SECONDS):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.002)


async def _text_turns(client: httpx.AsyncClient, turns: int) -> list[float]:
    """``turns`` prompts to one session, each timed from the POST to its ``session.idle`` on the stream."""
    session = (await client.post("/api/session", json={"title": "bench"})).json()
    latencies = []
    async with client.stream("GET", f"/api/session/{session['id']}/event", params={"after": 0}) as stream:
        async with contextlib.aclosing(stream.aiter_lines()) as lines:  # type: ignore[type-var]
            for _ in range(turns + 1):  # the first is a warm-up
                started = time.perf_counter()
                response = await client.post(f"/api/session/{session['id']}/prompt", json={"text": "hello"})
                response.raise_for_status()
                with trio.fail_after(WAIT_SECONDS):
                    async for line in lines:
                        if line == "event: session.idle":
                            break
                latencies.append(time.perf_counter() - started)
    return latencies[1:]


async def _sessions_with_a_turn(
    client: httpx.AsyncClient, server: Server, sessions: int, idle_before: int
) -> int:
    """``sessions`` new sessions each run one turn (20 at a time); returns, once all are idle, the
    last seq.

    ``idle_before`` turns have ended on the server already (the stream replays their ``session.idle``).
    """
    watcher = RawSubscriber(server.url, "/api/event?after=0")
    limit = trio.CapacityLimiter(20)

    async def one() -> None:
        async with limit:
            session = (await client.post("/api/session", json={})).json()
            (
                await client.post(f"/api/session/{session['id']}/prompt", json={"text": "hello"})
            ).raise_for_status()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watcher.run)
        for _ in range(sessions):
            nursery.start_soon(one)
        await _wait_until(lambda: watcher.idle >= idle_before + sessions)
        nursery.cancel_scope.cancel()
    return watcher.last_seq


async def _fan_out(client: httpx.AsyncClient, server: Server, sizes: Sizes, after: int) -> tuple[float, int]:
    """Live: the subscribers attach, then turns run. Returns (seconds, events each subscriber got).

    Each turn is a new session whose prompt ``fanout:N`` makes the mock ask for N no-op calls; the
    time runs from the first POST until every subscriber has every event.
    """
    path = f"/api/event?after={after}"
    subscribers = [RawSubscriber(server.url, path) for _ in range(sizes.fanout_subscribers)]
    async with trio.open_nursery() as nursery:
        for subscriber in subscribers:
            nursery.start_soon(subscriber.run)
        await _wait_until(lambda: all(s.connected.is_set() for s in subscribers))
        started = time.perf_counter()
        for _ in range(sizes.fanout_turns):
            session = (await client.post("/api/session", json={})).json()
            prompt = {"text": f"{FANOUT_PREFIX}{sizes.fanout_calls}"}
            (await client.post(f"/api/session/{session['id']}/prompt", json=prompt)).raise_for_status()
        await _wait_until(lambda: subscribers[0].idle >= sizes.fanout_turns)
        expected = subscribers[0].events
        await _wait_until(lambda: all(s.events >= expected for s in subscribers))
        elapsed = time.perf_counter() - started
        nursery.cancel_scope.cancel()
    return elapsed, expected


async def _replay(server: Server, sizes: Sizes, after: int, expected: int) -> float:
    """Replay: every subscriber reads the ``expected`` events stored after ``after``. Returns seconds."""
    path = f"/api/event?after={after}"
    subscribers = [RawSubscriber(server.url, path) for _ in range(sizes.fanout_subscribers)]
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for subscriber in subscribers:
            nursery.start_soon(subscriber.run)
        await _wait_until(lambda: all(s.events >= expected for s in subscribers))
        elapsed = time.perf_counter() - started
        nursery.cancel_scope.cancel()
    return elapsed


async def _fanout_figures(
    client: httpx.AsyncClient, server: Server, sizes: Sizes, after: int
) -> dict[str, float]:
    """``fanout_events_per_s`` (live) and ``fanout_replay_events_per_s``, medians of the repeats."""
    live, replay = [], []
    for _ in range(sizes.repeats):
        elapsed, expected = await _fan_out(client, server, sizes, after)
        live.append(expected * sizes.fanout_subscribers / elapsed)
        replay.append(expected * sizes.fanout_subscribers / await _replay(server, sizes, after, expected))
        after += expected
    return {"fanout_events_per_s": median(live), "fanout_replay_events_per_s": median(replay)}


async def measure_http(workdir: Path, sizes: Sizes) -> dict[str, float]:
    """Every HTTP figure, on one ``coordinator serve`` child answered by the mock model."""
    async with serve_mock_model() as base_url:
        model = {"provider": "openai", "base_url": base_url, "name": "mock", "api_key_env": "BENCH_NO_KEY"}
        config = write_config(workdir / "http.toml", workdir / "http.sqlite", model)
        async with (
            running_server(config, workdir / "http-server.log") as server,
            httpx.AsyncClient(base_url=server.url, timeout=WAIT_SECONDS) as client,
        ):
            (await client.get("/health")).raise_for_status()
            await trio.sleep(0.5)  # let start-up settle before reading the idle RSS
            idle_rss = rss_kib(server.pid)
            latencies = await _raw_text_turns(server, sizes.http_turns)
            with_httpx = await _text_turns(client, sizes.http_turns)
            ended = len(latencies) + len(with_httpx) + 2  # with the warm-up turns
            last_seq = await _sessions_with_a_turn(client, server, sizes.http_sessions, idle_before=ended)
            busy_rss = rss_kib(server.pid)
            figures = {
                "http_text_turn_ms": median(latencies) * 1000,
                "http_text_turn_p99_ms": p99(latencies) * 1000,
                "http_text_turn_httpx_ms": median(with_httpx) * 1000,
                "server_rss_idle_mib": idle_rss / 1024,
                "server_rss_200_sessions_mib": busy_rss / 1024,
            }
            figures.update(await _fanout_figures(client, server, sizes, last_seq))
    return figures
