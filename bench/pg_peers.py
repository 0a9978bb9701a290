"""The same turn on PostgreSQL beside LangGraph and DBOS, through the same 1 ms link, interleaved.

Each peer runs in a process of its own (``python -m bench.pg_peers NAME URL``), on a database of its
own on the same server, reaching it through a ``pg_link`` that delays each direction by
``pg_rtt.LINK_DELAY_SECONDS``, as ours does:

- LangGraph: the agent of ``bench.peer`` checkpointed by ``PostgresSaver``
  (``langgraph-checkpoint-postgres``, as ``from_conn_string`` connects it), invoked with
  ``durability="sync"``: a turn returns once its last checkpoint is committed, as ours publishes
  ``session.idle`` after its commit.
- DBOS: a workflow of three steps (the model asking for the call, the call, the model answering),
  each step's output checkpointed in DBOS's system database before the next step runs.

Ours is ``pg_rtt``'s sequential turn. The three alternate round by round, the first of a round
rotating, so that whatever else the shared machine does weighs on each; ``pg_vs_langgraph_rtt1``
and ``pg_vs_dbos_rtt1`` are the median of the rounds' ratios of the peer's median turn over ours
(above 1: ours is faster). Each side's round trips a turn are counted by its link without delay.

The peers are not dependencies of the coordinator: the ``peer`` extra installs them (``make bench``
does), and without them this group is skipped with one line saying so.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import trio

from bench.harness import Sizes, median
from bench.peer import missing
from bench.pg import scratch_database
from bench.pg_rtt import LINK_DELAY_SECONDS, Link, running_link, warm_coordinator
from bench.turns import sequential

PEERS = ("langgraph", "dbos")
WARM_UP_TURNS = 5


def unavailable() -> str | None:
    """Why the group cannot run here, or None."""
    return missing("langgraph", "langgraph.checkpoint.postgres", "dbos")


# ---- the peers' side, in their own processes ----


@contextlib.contextmanager
def langgraph_turns(url: str) -> Iterator[Callable[[str], float]]:
    """A LangGraph agent on ``PostgresSaver``: yields one turn of a thread, returning its latency."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from bench.peer import agent_graph, langgraph_turn

    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        app = agent_graph().compile(checkpointer=saver)
        yield lambda thread: langgraph_turn(app, thread, durability="sync")


@contextlib.contextmanager
def dbos_turns(url: str) -> Iterator[Callable[[str], float]]:
    """A DBOS workflow of three steps: yields one run of it, returning its latency."""
    from dbos import DBOS

    DBOS(config={"name": "bench-pg-peers", "system_database_url": url, "log_level": "WARNING"})

    @DBOS.step()
    def model(messages: list[dict[str, Any]]) -> dict[str, Any]:
        if messages[-1]["role"] == "user":
            call = {"id": f"call_{len(messages)}", "name": "noop", "arguments": "{}"}
            return {"role": "assistant", "content": "", "tool_calls": [call]}
        return {"role": "assistant", "content": "done"}

    @DBOS.step()
    def noop(call: dict[str, Any]) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": call["id"], "content": ""}

    @DBOS.workflow()
    def turn(prompt: str) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        messages.append(model(messages))
        messages.append(noop(messages[-1]["tool_calls"][0]))
        answer = model(messages)
        return str(answer["content"])

    def one(_thread: str) -> float:
        started = time.perf_counter()
        if turn("go") != "done":
            raise RuntimeError("a DBOS turn did not answer 'done'")
        return time.perf_counter() - started

    DBOS.launch()
    try:
        yield one
    finally:
        DBOS.destroy()


def serve_turns(name: str, url: str, turns_per_thread: int) -> None:
    """Warm up, say ``ready``, then for each line ``N`` on stdin run N turns and print their latencies."""
    peer = langgraph_turns if name == "langgraph" else dbos_turns
    with peer(url) as turn:
        for index in range(WARM_UP_TURNS):
            turn(f"warm-up-{index}")
        print("ready", flush=True)
        threads = 0
        for line in sys.stdin:
            latencies = []
            for index in range(int(line)):
                if index % turns_per_thread == 0:
                    threads += 1
                latencies.append(turn(f"thread-{threads}"))
            print(json.dumps(latencies), flush=True)


# ---- the bench's side ----


@attrs.define
class PeerProcess:
    """A peer running in its own process behind its own link."""

    name: str
    process: subprocess.Popen[str]
    link: Link

    async def run(self, turns: int) -> tuple[list[float], float]:
        """``turns`` turns: each one's latency in seconds, and the round trips a turn."""
        await self.link.reset()
        latencies: list[float] = json.loads(await trio.to_thread.run_sync(self._ask, str(turns)))
        counts = await self.link.counts()
        return latencies, counts["round_trips"] / turns

    def _ask(self, line: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the {self.name} peer stopped (exit {self.process.wait()})")
        return answer


@contextlib.contextmanager
def running_peer(name: str, server: str, delay: float, sizes: Sizes) -> Iterator[PeerProcess]:
    with scratch_database(server, f"bench_pg_{name}") as db, running_link(db, delay) as link:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.pg_peers", name, link.url, str(sizes.turns_per_session)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            peer = PeerProcess(name, process, link)
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the {name} peer did not start")
            yield peer
        finally:
            process.kill()
            process.wait()


@contextlib.asynccontextmanager
async def _ours(workdir: Path, server: str, delay: float, sizes: Sizes) -> AsyncIterator[Any]:
    with scratch_database(server, "bench_pg_ours") as db, running_link(db, delay) as link:
        async with warm_coordinator(workdir, link.url, sizes) as (coordinator, watcher):

            async def run(turns: int) -> tuple[list[float], float]:
                await link.reset()
                _rate, _cpu, latencies = await sequential(
                    coordinator, watcher, attrs.evolve(sizes, turns=turns)
                )
                return latencies, (await link.counts())["round_trips"] / turns

            yield run


async def measure_pg_peers(workdir: Path, sizes: Sizes, server: str) -> dict[str, float]:
    """Each side's median turn at 1 ms RTT and round trips a turn; ours over each peer's."""
    await trio.Path(workdir).mkdir(parents=True, exist_ok=True)
    turns = max(1, sizes.turns // 3)
    rounds = max(sizes.repeats, 1)
    medians: dict[str, list[float]] = {side: [] for side in ("ours", *PEERS)}
    round_trips: dict[str, list[float]] = {side: [] for side in medians}
    with contextlib.ExitStack() as stack:
        runs: dict[str, Any] = {
            name: stack.enter_context(running_peer(name, server, LINK_DELAY_SECONDS, sizes)).run
            for name in PEERS
        }
        async with _ours(workdir, server, LINK_DELAY_SECONDS, sizes) as ours:
            runs["ours"] = ours
            order = list(medians)
            for round_index in range(rounds):
                for side in order[round_index % 3 :] + order[: round_index % 3]:
                    latencies, trips = await runs[side](turns)
                    medians[side].append(median(latencies) * 1000)
                    round_trips[side].append(trips)
    figures = {
        "pg_turn_ms_rtt1_ours": median(medians["ours"]),
        "langgraph_pg_turn_ms_rtt1": median(medians["langgraph"]),
        "dbos_turn_ms_rtt1": median(medians["dbos"]),
        "langgraph_pg_round_trips_per_turn": median(round_trips["langgraph"]),
        "dbos_round_trips_per_turn": median(round_trips["dbos"]),
    }
    for name in PEERS:
        ratios = [theirs / ours for theirs, ours in zip(medians[name], medians["ours"], strict=True)]
        figures[f"pg_vs_{name}_rtt1"] = median(ratios)
        print(
            f"\n  pg_vs_{name}_rtt1 over {rounds} rounds: {median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]",
            end="",
            file=sys.stderr,
        )
    print(file=sys.stderr)
    return figures


if __name__ == "__main__":
    serve_turns(sys.argv[1], sys.argv[2], int(sys.argv[3]))
