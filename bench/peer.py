"""The same turn beside LangGraph with its SQLite checkpointer, interleaved in one run.

The peer our users would pick instead: LangGraph's ``StateGraph`` over ``MessagesState``, a model
node, its prebuilt ``ToolNode`` and ``tools_condition``, checkpointed by ``SqliteSaver`` on a file of
its own in WAL with ``synchronous=FULL`` (the mode of our headline figures). Its turn is ours: the
model asks for one no-op tool call, the call runs, the model answers text; its model is scripted in
the graph's node, with no delay, as ours is. A new thread every ``turns_per_session`` turns, as our
``turns_per_s`` workload makes a new session.

The two alternate, round by round, which one goes first alternating too, so that whatever else the
shared machine does weighs on both: ``turns_vs_langgraph`` is the median of each round's ratio.
LangGraph is not a dependency of the coordinator: ``make bench`` installs the ``peer`` extra, and
without it this group is skipped with one line saying so.
"""

from __future__ import annotations

import sqlite3
import time
from importlib import metadata, util
from pathlib import Path
from typing import Any

from bench.harness import Sizes, median, p99, tool_then_text_script
from bench.turns import run_turn, sequential, watched_coordinator


def unavailable() -> str | None:
    """Why the group cannot run here, or None."""
    return missing("langgraph", "langgraph.checkpoint.sqlite")


def missing(*modules: str) -> str | None:
    """Which of the peer extra's ``modules`` is not installed, said as a skip's reason; or None."""
    for module in modules:
        try:
            found = util.find_spec(module)
        except ModuleNotFoundError:
            found = None
        if found is None:
            return f"{module} is not installed (pip install -e '.[peer]')"
    return None


def agent_graph() -> Any:
    """The peer's agent, not yet compiled: a model node scripted as ours (one no-op call, then
    text), LangGraph's prebuilt ``ToolNode`` and ``tools_condition``."""
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def noop() -> str:
        """Does nothing (the benchmark's tool)."""
        return ""

    def model(state: MessagesState) -> dict[str, Any]:
        messages = state["messages"]
        if messages[-1].type == "human":
            call = {"name": "noop", "args": {}, "id": f"call_{len(messages)}"}
            return {"messages": [AIMessage(content="", tool_calls=[call])]}
        return {"messages": [AIMessage(content="done")]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode([noop]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph


def langgraph_turn(app: Any, thread_id: str, **options: Any) -> float:
    """One turn of a compiled agent (prompt to the final answer checkpointed); its latency in seconds."""
    from langchain_core.messages import HumanMessage

    started = time.perf_counter()
    state = app.invoke(
        {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": thread_id}}, **options
    )
    if state["messages"][-1].content != "done":
        raise RuntimeError(f"a LangGraph turn ended with {state['messages'][-1]!r}")
    return time.perf_counter() - started


class LangGraphTurns:
    """A compiled LangGraph agent on its own SQLite file, and a count of that file's commits."""

    def __init__(self, path: Path) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        # As SqliteSaver.from_conn_string connects, plus the journal and sync modes of our FULL.
        self.connection = sqlite3.connect(str(path), check_same_thread=False)
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute("PRAGMA synchronous=FULL")
        self.commits = 0
        self.connection.set_trace_callback(self._count)
        self.app = agent_graph().compile(checkpointer=SqliteSaver(self.connection))
        self.threads = 0

    def _count(self, statement: str) -> None:
        if statement.lstrip()[:6].upper() == "COMMIT":
            self.commits += 1

    def turn(self, thread_id: str) -> float:
        """One turn (prompt to the final answer checkpointed); returns its latency in seconds."""
        return langgraph_turn(self.app, thread_id)

    def sequential(self, sizes: Sizes) -> tuple[float, float, list[float]]:
        """As ``bench.turns.sequential``: turns per second, CPU seconds a turn, each turn's latency."""
        latencies = []
        cpu_started = time.process_time()
        started = time.perf_counter()
        for index in range(sizes.turns):
            if index % sizes.turns_per_session == 0:
                self.threads += 1
            latencies.append(self.turn(f"thread-{self.threads}"))
        elapsed = time.perf_counter() - started
        return sizes.turns / elapsed, (time.process_time() - cpu_started) / sizes.turns, latencies

    def close(self) -> None:
        self.connection.close()


async def _ours(workdir: Path, sizes: Sizes, round_index: int) -> tuple[float, float, list[float]]:
    script = tool_then_text_script(sizes.turns_per_session)
    async with watched_coordinator(workdir, f"peer-ours-{round_index}.sqlite", "full", script) as (
        coordinator,
        watcher,
    ):
        warm_up = await coordinator.create_session("warm-up")
        for _ in range(sizes.turns_per_session):
            await run_turn(coordinator, watcher, warm_up.id)
        return await sequential(coordinator, watcher, sizes)


async def measure_peer(workdir: Path, sizes: Sizes) -> dict[str, float]:
    """``turns_vs_langgraph`` and both sides' turns per second, CPU a turn, p99 and commits a turn."""
    rounds = max(sizes.repeats, 1) * 2 - 1  # odd: the median ratio is one round's
    peer = LangGraphTurns(workdir / "peer-langgraph.sqlite")
    try:
        for _ in range(sizes.turns_per_session):  # warm-up: imports, the tables, the first thread
            peer.turn("warm-up")
        ours: list[tuple[float, float, list[float]]] = []
        theirs: list[tuple[float, float, list[float]]] = []
        for round_index in range(rounds):
            if round_index % 2 == 0:
                ours.append(await _ours(workdir, sizes, round_index))
                theirs.append(peer.sequential(sizes))
            else:
                theirs.append(peer.sequential(sizes))
                ours.append(await _ours(workdir, sizes, round_index))
        commits_before = peer.commits
        peer.turn("commits")
        commits = peer.commits - commits_before
    finally:
        peer.close()
    return {
        "peer_turns_per_s": median([rate for rate, _, _ in ours]),
        "langgraph_turns_per_s": median([rate for rate, _, _ in theirs]),
        "turns_vs_langgraph": median([a[0] / b[0] for a, b in zip(ours, theirs, strict=True)]),
        "peer_turn_cpu_ms": median([cpu for _, cpu, _ in ours]) * 1000,
        "langgraph_turn_cpu_ms": median([cpu for _, cpu, _ in theirs]) * 1000,
        "peer_turn_ms_p99": p99([latency for _, _, run in ours for latency in run]) * 1000,
        "langgraph_turn_ms_p99": p99([latency for _, _, run in theirs for latency in run]) * 1000,
        "langgraph_turn_commits": float(commits),
    }


def langgraph_version() -> str:
    return metadata.version("langgraph")
