"""Streaming text: how many deltas the bus delivers, and what streaming in chunks costs a turn.

``delta_fanout_per_s``: 100 sessions streaming 200 chunks each, as fast as the OpenAI-compatible mock
sends them over loopback HTTP, with 10 subscribers with deltas on: deltas delivered per second in all.
``delta_fanout_scripted_per_s``: the same with the scripted model in process, each stream spread over
0.4 s (a chunk every 2 ms), so that the bus, not the HTTP model path, is what is measured.
``streaming_cpu_overhead_pct``: the coordinator's CPU per turn with a reply in 200 chunks against the
same text in one chunk, with a delta subscriber, minus what the scripted model itself spends producing
200 chunks (measured alone): what streaming adds in the coordinator. ``..._raw_pct`` keeps the model's
own cost in.
"""

from __future__ import annotations

import time
from pathlib import Path

import trio
import trio.testing

from bench.harness import Sizes, bench_config, cpu_seconds
from bench.mock_model import STREAM_PREFIX, STREAM_WORD, serve_mock_model
from coordinator import Coordinator, open_coordinator
from coordinator.config import ModelConfig
from coordinator.models.base import ChatMessage, Model, ModelRequest
from coordinator.models.openai import OpenAIModel
from coordinator.models.scripted import ScriptedModel

STREAM_CHUNKS = 200
DELTA_SUBSCRIBERS = 10


async def measure_streaming(workdir: Path, sizes: Sizes) -> dict[str, float]:
    sessions, turns = sizes.stream_sessions, sizes.stream_turns
    figures = {
        "delta_fanout_per_s": await _delta_fanout(workdir, sessions, scripted=False),
        "delta_fanout_scripted_per_s": await _delta_fanout(workdir, sessions, scripted=True),
    }
    runs = [await _cpu_overhead(workdir, turns, n) for n in range(sizes.repeats)]
    adjusted, raw = zip(*runs, strict=True)
    figures["streaming_cpu_overhead_pct"] = sorted(adjusted)[len(adjusted) // 2]
    figures["streaming_cpu_overhead_raw_pct"] = sorted(raw)[len(raw) // 2]
    return figures


async def _delta_fanout(workdir: Path, sessions: int, *, scripted: bool) -> float:
    async with serve_mock_model() as url:
        model: Model
        if scripted:
            chunks = [STREAM_WORD] * STREAM_CHUNKS
            model = ScriptedModel.from_json([{"chunks": chunks, "chunk_delay": 0.002}])
        else:
            config = ModelConfig(provider="openai", base_url=url, name="mock", api_key_env="")
            model = OpenAIModel.from_config(config)
        db = f"deltas-{'scripted' if scripted else 'http'}.sqlite"
        async with open_coordinator(bench_config(workdir, db), model=model, synchronous="normal") as coord:
            ids = [(await coord.create_session(title=f"s{i}")).id for i in range(sessions)]
            counts = [0] * DELTA_SUBSCRIBERS
            idle = trio.Event()
            async with trio.open_nursery() as nursery:
                for k in range(DELTA_SUBSCRIBERS):
                    nursery.start_soon(_count_deltas, coord, counts, k, sessions, idle)
                await trio.testing.wait_all_tasks_blocked()
                started = time.perf_counter()
                for session_id in ids:
                    await coord.prompt(session_id, f"{STREAM_PREFIX}{STREAM_CHUNKS}")
                await idle.wait()
                elapsed = time.perf_counter() - started
                nursery.cancel_scope.cancel()
    return sum(counts) / elapsed


async def _count_deltas(
    coord: Coordinator, counts: list[int], k: int, sessions: int, idle: trio.Event
) -> None:
    seen_idle = 0
    async for event in coord.subscribe(after=coord.published_seq, deltas=True):
        if event.seq is None:
            counts[k] += 1
        elif event.type == "session.idle":
            seen_idle += 1
            if seen_idle == sessions:
                idle.set()


class Silent:
    """A ``TextSink`` that keeps nothing and, like the step's without an injector, never yields."""

    def append(self, piece: str) -> None:
        pass

    def restart(self) -> None:
        pass

    async def between_chunks(self) -> None:
        return None


async def _cpu_overhead(workdir: Path, turns: int, repeat: int) -> tuple[float, float]:
    """The coordinator's overhead of 200 chunks over one, in %: without and with the model's own cost."""
    chunked: list[dict[str, object]] = [{"chunks": [STREAM_WORD] * STREAM_CHUNKS}]
    whole: list[dict[str, object]] = [{"text": STREAM_WORD * STREAM_CHUNKS}]
    one, model_one = await _turns_cpu(workdir / f"whole-{repeat}.sqlite", whole, turns)
    many, model_many = await _turns_cpu(workdir / f"chunked-{repeat}.sqlite", chunked, turns)
    raw = (many - one) / one * 100
    return ((many - model_many) - (one - model_one)) / one * 100, raw


async def _turns_cpu(db: Path, script: list[dict[str, object]], turns: int) -> tuple[float, float]:
    """Process CPU seconds for ``turns`` sequential text turns, a subscriber with deltas on watching;
    and for the scripted model alone answering as many requests, in the same running coordinator (so
    that the scheduler it yields to is the same)."""
    config = bench_config(db.parent, db.name)
    model = ScriptedModel.from_json(script)
    async with open_coordinator(config, model=model, synchronous="normal") as coord:
        async with trio.open_nursery() as nursery:
            idle: list[trio.Event] = []

            async def watch() -> None:
                async for event in coord.subscribe(after=coord.published_seq, deltas=True):
                    if event.type == "session.idle" and idle:
                        idle[-1].set()

            nursery.start_soon(watch)
            session = await coord.create_session(title="cpu")
            started = cpu_seconds()
            for _ in range(turns):
                idle.append(trio.Event())
                await coord.prompt(session.id, "go")
                await idle[-1].wait()
            cpu = cpu_seconds() - started
            message = ChatMessage(role="user", content="go")
            request = ModelRequest(session_id="s", index=0, messages=(message,), tools=(), text=Silent())
            started = cpu_seconds()
            for _ in range(turns):
                await model.complete(request)
            model_cpu = cpu_seconds() - started
            nursery.cancel_scope.cancel()
    return cpu, model_cpu
