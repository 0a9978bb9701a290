"""Many models streaming at once: what a streamed chunk costs the server, and how many streams it carries.

A model streams its answer for seconds in production, so how many sessions one process carries while
their models stream decides how many users a node serves. Here ``coordinator serve`` (a child process,
SQLite FULL) is answered by ``stream_model.py`` (a model in a process of its own, streaming each
answer in chunks 25 ms apart, 40 a second, each chunk carrying the time it was written); subscribers
with deltas on read ``GET /api/event?deltas=true`` in this process. Every session gets one prompt at
once; the figures:

- ``stream_us_per_chunk_1`` and ``stream_us_per_chunk_10``: the server's CPU (its own and its
  children's) from the first prompt to the last ``session.idle``, over the chunks its models streamed,
  with 1 and with 10 subscribers (100 sessions, 200 chunks each). The turns' own cost is in it (about
  a turn's CPU over 200 chunks).
- ``stream_delay_ms_p50``/``_p99`` (at those 100 sessions, 1 subscriber): from a chunk's write by the
  model to its text arriving at the subscriber, in a delta.
- ``streams_carried_p99_100ms``: the most sessions, of 50, 100, 200, 300, 500, 700 and 1,000 streaming at
  once (100 chunks each), for which that delay's p99 stays within 100 ms.
- ``stream_floor_us_per_chunk``: this process's CPU a chunk when bare trio tasks read the same 100
  streams (a socket read, the events split, ``json.loads``): what a chunk costs any trio program
  before it does anything with it.
- ``stream_turn_stretch_500``: 500 sessions prompted at once (as fast as 8 connections send the
  prompts), each model streaming a 5 s answer: the median session's time from the first prompt sent
  to its ``session.idle``, over the model's own 5 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import trio

from bench.harness import Sizes, median, p99
from bench.http_api import RawClient, RawSubscriber, Server, running_server, write_config

CHUNK_MS = 25
"""A chunk every 25 ms: 40 a second, a fast model's pace."""

DELAY_LIMIT_MS = 100.0
POSTERS = 8
"""Connections sending the prompts, so that 1,000 prompts go out within a fraction of a stream."""

WAIT_SECONDS = 300.0

_TIMESTAMP = re.compile(rb"T(\d+\.\d+);")
_DELTA = b"event: session.text.delta\n"
_IDLE = b"event: session.idle\n"


@attrs.frozen(kw_only=True)
class Load:
    """What one load measured."""

    us_per_chunk: float
    delays_ms: list[float]
    turns_s: list[float]


@contextlib.contextmanager
def running_model() -> Iterator[str]:
    """``stream_model.py`` in its own process: yields its ``/v1`` base URL."""
    # From the checkout's root, so that ``-m bench.stream_model`` is found wherever the bench runs from.
    root = Path(__file__).resolve().parent.parent
    command = [sys.executable, "-m", "bench.stream_model"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=root)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds so far of process ``pid`` (every thread) and of its live children."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = _own_cpu_seconds(pid, ticks)
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        except OSError:
            continue
        total += sum(_own_cpu_seconds(int(child), ticks) for child in children)
    return total


def _own_cpu_seconds(pid: int, ticks: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0  # exited meanwhile
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


class DeltaReader:
    """A subscriber that reads each delta's chunk times (their delay) and each session's idle time."""

    def __init__(self, url: str) -> None:
        self._url = url
        self.delays_ms: list[float] = []
        self.idle_at: dict[str, float] = {}
        self.connected = trio.Event()
        self._changed = trio.Event()

    async def wait_idle(self, count: int) -> None:
        with trio.fail_after(WAIT_SECONDS):
            while len(self.idle_at) < count:
                await self._changed.wait()

    async def run(self) -> None:
        host, port = self._url.split("//", 1)[1].split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            request = (
                f"GET /api/event?deltas=true HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n"
            )
            await stream.send_all(request.encode())
            buffer = b""
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                now = time.time()
                buffer += data
                if not self.connected.is_set() and b"\r\n\r\n" in buffer:
                    self.connected.set()
                *events, buffer = buffer.split(b"\n\n")
                for event in events:
                    self._read(event, now)
                self._changed.set()
                self._changed = trio.Event()

    def _read(self, event: bytes, now: float) -> None:
        if _DELTA in event:
            self.delays_ms.extend((now - float(at)) * 1000 for at in _TIMESTAMP.findall(event))
        elif _IDLE in event:
            data = event[event.index(b"data: ") + 6 :]
            self.idle_at[json.loads(data)["session_id"]] = now


async def one_load(workdir: Path, model_url: str, sessions: int, chunks: int, subscribers: int) -> Load:
    """``sessions`` sessions streaming ``chunks`` chunks each at once to ``subscribers`` subscribers."""
    name = f"streams-{sessions}-{subscribers}-{time.monotonic_ns()}"
    config = write_config(
        workdir / f"{name}.toml",
        workdir / f"{name}.sqlite",
        {"provider": "openai", "base_url": model_url, "name": "paced", "api_key_env": ""},
    )
    async with running_server(config, workdir / f"{name}.log") as server:
        ids = await _sessions(server, sessions)
        reader = DeltaReader(server.url)
        others = [RawSubscriber(server.url, "/api/event?deltas=true") for _ in range(subscribers - 1)]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader.run)
            for other in others:
                nursery.start_soon(other.run)
            for connected in (reader.connected, *(other.connected for other in others)):
                await connected.wait()
            cpu_started = tree_cpu_seconds(server.pid)
            started = time.time()
            await _prompt_all(server, ids, f"paced:{chunks}:{CHUNK_MS}")
            await reader.wait_idle(sessions)
            cpu = tree_cpu_seconds(server.pid) - cpu_started
            nursery.cancel_scope.cancel()
    return Load(
        us_per_chunk=cpu / (sessions * chunks) * 1e6,
        delays_ms=reader.delays_ms,
        turns_s=[reader.idle_at[sid] - started for sid in ids],
    )


async def _sessions(server: Server, count: int) -> list[str]:
    ids: list[str] = []
    async with RawClient.connect(server.url) as client:
        for index in range(count):
            status, body = await client.post("/api/session", {"title": f"stream-{index}"})
            if status != 201:
                raise RuntimeError(f"POST /api/session answered {status}: {body[:200]!r}")
            ids.append(json.loads(body)["id"])
    return ids


async def _prompt_all(server: Server, ids: list[str], text: str) -> None:
    """Prompt every session, from ``POSTERS`` connections at once."""

    async def post(part: list[str]) -> None:
        async with RawClient.connect(server.url) as client:
            for sid in part:
                status, body = await client.post(f"/api/session/{sid}/prompt", {"text": text})
                if status != 202:
                    raise RuntimeError(f"POST prompt answered {status}: {body[:200]!r}")

    async with trio.open_nursery() as nursery:
        for index in range(POSTERS):
            nursery.start_soon(post, ids[index::POSTERS])


async def floor_us_per_chunk(model_url: str, sessions: int, chunks: int) -> float:
    """CPU a chunk of ``sessions`` streams read by bare trio tasks: the floor under the server's."""
    body = json.dumps(
        {"model": "paced", "messages": [{"role": "user", "content": f"paced:{chunks}:{CHUNK_MS}"}]}
    )
    host, port = model_url.split("//", 1)[1].split("/", 1)[0].split(":")
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}"
    ).encode()
    parsed = 0

    async def read_one() -> None:
        nonlocal parsed
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(request)
            buffer = b""
            while not buffer.endswith(b"0\r\n\r\n"):
                data = await stream.receive_some(65536)
                if not data:
                    break
                *events, buffer = (buffer + data).split(b"\n\n")
                for event in events:
                    at = event.find(b"data: {")
                    if at >= 0:
                        json.loads(event[at + 6 :])
                        parsed += 1

    started = time.process_time()
    async with trio.open_nursery() as nursery:
        for _ in range(sessions):
            nursery.start_soon(read_one)
    return (time.process_time() - started) / max(parsed, 1) * 1e6


async def measure_model_streams(workdir: Path, sizes: Sizes) -> dict[str, float]:
    await trio.Path(workdir).mkdir(parents=True, exist_ok=True)
    base, chunks = sizes.model_streams, sizes.model_stream_chunks
    figures: dict[str, float] = {}
    with running_model() as model_url:
        one = await one_load(workdir, model_url, base, chunks, 1)
        ten = await one_load(workdir, model_url, base, chunks, 10)
        figures["stream_floor_us_per_chunk"] = await floor_us_per_chunk(model_url, base, chunks)
        figures["stream_us_per_chunk_1"] = one.us_per_chunk
        figures["stream_us_per_chunk_10"] = ten.us_per_chunk
        figures["stream_delay_ms_p50"] = median(one.delays_ms)
        figures["stream_delay_ms_p99"] = p99(one.delays_ms)
        carried = 0
        for level in sizes.model_stream_levels:
            load = await one_load(workdir, model_url, level, chunks // 2, 1)
            delay = p99(load.delays_ms)
            print(f" {level}: p99 {delay:.0f} ms;", end="", file=sys.stderr, flush=True)
            if delay > DELAY_LIMIT_MS:
                break
            carried = level
        figures["streams_carried_p99_100ms"] = float(carried)
        stretch = await one_load(workdir, model_url, sizes.model_stream_stretch, chunks, 1)
        figures["stream_turn_stretch_500"] = median(stretch.turns_s) / (chunks * CHUNK_MS / 1000)
        figures["stream_delay_ms_p99_500"] = p99(stretch.delays_ms)
        figures["stream_us_per_chunk_500"] = stretch.us_per_chunk
    return figures
