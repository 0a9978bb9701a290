"""The figures as a table for people and as ``latest.json`` for machines, with the machine and versions."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

import apsw
import attrs


@attrs.frozen(kw_only=True)
class Figure:
    """One headline figure of the benchmark report: what it measures, its unit and its target."""

    key: str
    workload: str
    unit: str
    target: float | None = None  # None: reported, no target
    higher_is_better: bool = True

    def verdict(self, value: float) -> str:
        if self.target is None:
            return ""
        met = value >= self.target if self.higher_is_better else value <= self.target
        return "ok" if met else "MISSED"

    def target_text(self) -> str:
        if self.target is None:
            return "reported"
        return f"{'>=' if self.higher_is_better else '<='} {self.target:,g}"


FIGURES: tuple[Figure, ...] = (
    Figure(key="turn_cpu_ms", workload="CPU a sequential turn (FULL), the headline", unit="ms", target=3, higher_is_better=False),
    Figure(key="turn_instructions_m", workload="instructions a sequential turn (FULL), callgrind: steadier than CPU time", unit="M", higher_is_better=False),
    Figure(key="turn_cpu_ms_serving_gc", workload="the same, the collector tuned as coordinator serve tunes it", unit="ms", higher_is_better=False),
    Figure(key="turns_per_s", workload="sequential turns (FULL)", unit="turns/s", target=300),
    Figure(key="aio_turn_cpu_ms", workload="CPU a sequential turn (FULL) through coordinator.aio, asyncio.run", unit="ms", higher_is_better=False),
    Figure(key="aio_turn_cpu_ratio", workload="that over the same turns through the trio API, same group", unit="ratio", target=1.15, higher_is_better=False),
    Figure(key="aio_loop_lag_ms_p99", workload="host loop's 1 ms timer, lateness p99, 100 sessions' turns via aio", unit="ms", target=5, higher_is_better=False),
    Figure(key="steer_delivery_ms_p99", workload="a steer, beyond its step boundary (a 50 ms tool call), to its delivery at a subscriber, p99", unit="ms", target=5, higher_is_better=False),
    Figure(key="mcp_call_overhead_ms", workload="an MCP call through our client over the bare SDK's, same stdio server, medians", unit="ms", target=1, higher_is_better=False),
    Figure(key="mcp_stop_to_cancel_ms_p99", workload="interrupt() to the MCP server receiving notifications/cancelled, p99", unit="ms", target=5, higher_is_better=False),
    Figure(key="turns_per_s_normal", workload="sequential turns (NORMAL)", unit="turns/s"),
    Figure(key="turns_per_s_concurrent", workload="100 concurrent sessions (FULL)", unit="turns/s", target=1000),
    Figure(key="turns_per_s_concurrent_1_process", workload="the same 100 sessions in a child process (FULL)", unit="turns/s"),
    Figure(key="turns_per_s_concurrent_2_processes", workload="the same split between 2 processes, one database", unit="turns/s"),
    Figure(key="processes_speedup", workload="2 processes over 1", unit="ratio"),
    Figure(key="turns_per_s_concurrent_normal", workload="100 concurrent sessions (NORMAL)", unit="turns/s"),
    Figure(key="turns_vs_langgraph", workload="peer: our turns/s over LangGraph's, interleaved, median round", unit="ratio", target=2),
    Figure(key="peer_turns_per_s", workload="peer: our sequential turns in those rounds (FULL)", unit="turns/s"),
    Figure(key="langgraph_turns_per_s", workload="peer: LangGraph + SqliteSaver, the same turn (FULL)", unit="turns/s"),
    Figure(key="peer_turn_cpu_ms", workload="peer: our CPU a turn in those rounds", unit="ms", higher_is_better=False),
    Figure(key="langgraph_turn_cpu_ms", workload="peer: LangGraph's CPU a turn", unit="ms", higher_is_better=False),
    Figure(key="pg_turns_per_s", workload="sequential turns, one node (PostgreSQL)", unit="turns/s"),
    Figure(key="pg_turns_per_s_3_nodes", workload="100 sessions through 3 nodes' HTTP (PostgreSQL)", unit="turns/s"),
    Figure(key="pg_round_trips_per_turn", workload="waits for PostgreSQL in a sequential turn, counted by a proxy", unit="RTs", target=10, higher_is_better=False),
    Figure(key="pg_round_trips_per_interrupt", workload="the same from interrupt() to session.idle, median", unit="RTs", target=3, higher_is_better=False),
    Figure(key="pg_mispredicted_per_turn", workload="transactions of a turn run again for a wrong prediction", unit="count", higher_is_better=False),
    Figure(key="pg_mispredicted_per_interrupt", workload="the same for an interrupt", unit="count", higher_is_better=False),
    Figure(key="pg_turn_ms_rtt1", workload="a sequential turn through a link 1 ms round trip, median", unit="ms", target=15, higher_is_better=False),
    Figure(key="pg_interrupt_p99_ms_rtt1", workload="interrupt() to session.idle through that link, p99", unit="ms", target=10, higher_is_better=False),
    Figure(key="pg_turn_ms", workload="a sequential turn on loopback (through the proxy, no delay), median", unit="ms", higher_is_better=False),
    Figure(key="pg_turn_cpu_ms", workload="CPU a sequential turn on PostgreSQL (loopback)", unit="ms", higher_is_better=False),
    Figure(key="pg_vs_langgraph_rtt1", workload="LangGraph + PostgresSaver's turn over ours at 1 ms RTT, interleaved, median round", unit="ratio", target=1),
    Figure(key="pg_vs_dbos_rtt1", workload="DBOS's workflow of three steps over our turn at 1 ms RTT, the same", unit="ratio", target=1),
    Figure(key="pg_turn_ms_rtt1_ours", workload="our turn at 1 ms RTT in those rounds, median", unit="ms", higher_is_better=False),
    Figure(key="langgraph_pg_turn_ms_rtt1", workload="LangGraph + PostgresSaver (durability sync), the same turn there", unit="ms", higher_is_better=False),
    Figure(key="dbos_turn_ms_rtt1", workload="DBOS, a workflow of three steps, there", unit="ms", higher_is_better=False),
    Figure(key="langgraph_pg_round_trips_per_turn", workload="LangGraph's round trips a turn, counted by its link", unit="RTs", higher_is_better=False),
    Figure(key="dbos_round_trips_per_turn", workload="DBOS's round trips a workflow, counted by its link", unit="RTs", higher_is_better=False),
    Figure(key="pg_turn_cpu_ratio", workload="that over SQLite FULL's CPU a turn, same group", unit="ratio", target=2, higher_is_better=False),
    Figure(key="pg_takeover_s", workload="kill -9 of a turn's node -> resumed elsewhere, median", unit="s", higher_is_better=False),
    Figure(key="pg_takeover_s_min", workload="the same, fastest try", unit="s", higher_is_better=False),
    Figure(key="pg_takeover_s_max", workload="the same, slowest try", unit="s", higher_is_better=False),
    Figure(key="pg_takeover_frozen_s", workload="SIGSTOP of a turn's node -> resumed elsewhere (lease 2 s), median", unit="s", higher_is_better=False),
    Figure(key="pg_takeover_frozen_s_min", workload="the same, fastest try", unit="s", higher_is_better=False),
    Figure(key="pg_takeover_frozen_s_max", workload="the same, slowest try", unit="s", higher_is_better=False),
    Figure(key="turn_cpu_ms_600", workload="CPU a turn, 600 earlier turns in its session", unit="ms", higher_is_better=False),
    Figure(key="turn_cpu_ms_10", workload="CPU a turn, 10 earlier turns in its session", unit="ms", higher_is_better=False),
    Figure(key="turn_cpu_600_vs_10", workload="turn_cpu_ms_600 / turn_cpu_ms_10", unit="ratio", target=1.5, higher_is_better=False),
    Figure(key="baseline_turns_per_s", workload="bare apsw + trio, same parts (FULL)", unit="turns/s"),
    Figure(key="baseline_turns_per_s_normal", workload="bare apsw + trio, same parts (NORMAL)", unit="turns/s"),
    Figure(key="turns_vs_baseline", workload="turns_per_s / baseline_turns_per_s", unit="ratio"),
    Figure(key="turns_vs_baseline_normal", workload="the same, NORMAL", unit="ratio"),
    Figure(key="interrupt_p99_ms", workload="interrupt() -> session.idle (FULL), quiet machine", unit="ms", target=5, higher_is_better=False),
    Figure(key="interrupt_p99_ms_normal", workload="interrupt() -> session.idle (NORMAL)", unit="ms", higher_is_better=False),
    Figure(key="decline_p99_ms", workload="reply(reject) -> session.idle (FULL), quiet machine", unit="ms", target=5, higher_is_better=False),
    Figure(key="decline_p99_ms_normal", workload="reply(reject) -> session.idle (NORMAL)", unit="ms", higher_is_better=False),
    Figure(key="interrupt_p99_ms_loaded", workload="interrupt() -> session.idle (FULL), the other core busy", unit="ms", target=10, higher_is_better=False),
    Figure(key="decline_p99_ms_loaded", workload="reply(reject) -> session.idle (FULL), the other core busy", unit="ms", target=10, higher_is_better=False),
    Figure(key="busy_session_kib", workload="RSS per session waiting on a permission", unit="KiB", target=32, higher_is_better=False),
    Figure(key="watch_look_ms", workload="the watch's look (every second), 1,000 sessions waiting", unit="ms", higher_is_better=False),
    Figure(key="shutdown_1000_s", workload="graceful shutdown of 1,000 waits (FULL)", unit="s", target=2, higher_is_better=False),
    Figure(key="shutdown_1000_s_normal", workload="the same, NORMAL", unit="s", higher_is_better=False),
    Figure(key="restore_1000_s", workload="restart restoring 1,000 waits (FULL)", unit="s", target=2, higher_is_better=False),
    Figure(key="restore_1000_s_normal", workload="the same, NORMAL", unit="s", higher_is_better=False),
    Figure(key="http_text_turn_ms", workload="HTTP: POST prompt -> session.idle on SSE", unit="ms", target=10, higher_is_better=False),
    Figure(key="server_rss_idle_mib", workload="coordinator serve, idle after start", unit="MiB", target=60, higher_is_better=False),
    Figure(key="server_rss_200_sessions_mib", workload="coordinator serve, after 200 sessions' turns", unit="MiB", target=100, higher_is_better=False),
    Figure(key="fanout_events_per_s", workload="100 SSE subscribers, live, in aggregate", unit="events/s", target=50_000),
    Figure(key="checkpoint_overhead_pct", workload="chaos checkpoints' cost on turns_per_s", unit="%", target=2, higher_is_better=False),
    Figure(key="metrics_overhead_pct", workload="the metrics' cost on turn_cpu_ms_normal", unit="%", target=1, higher_is_better=False),
    Figure(key="delta_fanout_per_s", workload="100 sessions x 200 chunks (HTTP mock), 10 delta subscribers", unit="deltas/s"),
    Figure(key="delta_fanout_scripted_per_s", workload="the same, scripted model, a chunk every 2 ms", unit="deltas/s"),
    Figure(key="streaming_cpu_overhead_pct", workload="a turn's CPU, 200 chunks vs one, model's cost out", unit="%", target=10, higher_is_better=False),
    Figure(key="streaming_cpu_overhead_raw_pct", workload="the same, the scripted model's own cost in", unit="%", higher_is_better=False),
    Figure(key="stream_us_per_chunk_1", workload="server CPU a streamed chunk: 100 sessions' models streaming at 40/s, 1 delta subscriber", unit="us", target=50, higher_is_better=False),
    Figure(key="stream_us_per_chunk_10", workload="the same, 10 delta subscribers", unit="us", target=60, higher_is_better=False),
    Figure(key="streams_carried_p99_100ms", workload="the most sessions streaming at once with chunk-to-subscriber delay p99 <= 100 ms", unit="sessions", target=500),
    Figure(key="stream_turn_stretch_500", workload="500 sessions prompted at once, 5 s streams: median turn over 5 s", unit="ratio", target=1.1, higher_is_better=False),
    Figure(key="turn_ms_p50_alone", workload="sequential turns beside 100,000 old events (FULL), median", unit="ms", higher_is_better=False),
    Figure(key="turn_ms_p99_alone", workload="the same, p99", unit="ms", higher_is_better=False),
    Figure(key="turn_ms_p50_pruning", workload="the same while retention prunes them, median", unit="ms", higher_is_better=False),
    Figure(key="turn_ms_p99_pruning", workload="the same while retention prunes them, p99", unit="ms", higher_is_better=False),
    Figure(key="prune_s", workload="the pass: 100,000 events deleted, pages given back", unit="s", higher_is_better=False),
    Figure(key="prune_events_per_s", workload="the pass's rate, turns running meanwhile", unit="events/s"),
)  # fmt: skip

HEADLINE_KEYS = tuple(figure.key for figure in FIGURES)
PG_PEER_KEYS = (
    "pg_vs_langgraph_rtt1",
    "pg_vs_dbos_rtt1",
    "pg_turn_ms_rtt1_ours",
    "langgraph_pg_turn_ms_rtt1",
    "dbos_turn_ms_rtt1",
    "langgraph_pg_round_trips_per_turn",
    "dbos_round_trips_per_turn",
)
"""The pg_peers group's figures: measured only where a PostgreSQL server answers and the peers are installed."""
PG_KEYS = tuple(key for key in HEADLINE_KEYS if key.startswith("pg_") and key not in PG_PEER_KEYS)
"""The pg and pg_rtt groups' figures: measured only where a PostgreSQL server answers."""
PEER_KEYS = (
    "turns_vs_langgraph",
    "peer_turns_per_s",
    "langgraph_turns_per_s",
    "peer_turn_cpu_ms",
    "langgraph_turn_cpu_ms",
)
"""The peer group's figures: measured only where LangGraph is installed (the ``peer`` extra)."""
INSTRUCTION_KEYS = ("turn_instructions_m",)
"""The instructions group's figure: measured only where valgrind is installed."""


def add_ratios(figures: dict[str, float]) -> None:
    """``turns_vs_baseline`` (and ``_normal``): how close a turn comes to its parts' limit."""
    for suffix in ("", "_normal"):
        figures[f"turns_vs_baseline{suffix}"] = (
            figures[f"turns_per_s{suffix}"] / figures[f"baseline_turns_per_s{suffix}"]
        )


def print_table(figures: Mapping[str, float], out: TextIO) -> None:
    """The headline figures with their targets, then every other figure measured."""
    rows = [("key", "workload", "value", "unit", "target", "")]
    for figure in FIGURES:
        value = figures.get(figure.key)
        if value is None:
            continue
        rows.append(
            (
                figure.key,
                figure.workload,
                _number(value),
                figure.unit,
                figure.target_text(),
                figure.verdict(value),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for index, row in enumerate(rows):
        print(
            "  ".join(
                cell.rjust(w) if i == 2 else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip(),
            file=out,
        )
        if index == 0:
            print("  ".join("-" * w for w in widths), file=out)
    extra = sorted(set(figures) - set(HEADLINE_KEYS))
    if extra:
        print("\nalso measured: " + ", ".join(f"{key}={_number(figures[key])}" for key in extra), file=out)


def _number(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def write_json(path: Path, figures: Mapping[str, float], run: Mapping[str, Any]) -> None:
    """``path``: one key a figure (numbers), plus ``machine``, ``versions`` and ``run`` (sizes, time)."""
    document: dict[str, Any] = {key: float(value) for key, value in sorted(figures.items())}
    document["machine"] = machine()
    document["versions"] = versions()
    document["run"] = dict(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


def machine() -> dict[str, Any]:
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_mib": _memory_mib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def versions() -> dict[str, str]:
    found = {"sqlite": apsw.sqlite_lib_version(), "commit": _commit()}
    for package in (
        "coordinator",
        "trio",
        "apsw",
        "attrs",
        "cattrs",
        "structlog",
        "hypercorn",
        "starlette",
        "httpx",
        "langgraph",
        "langgraph-checkpoint-sqlite",
        "langgraph-checkpoint-postgres",
        "dbos",
        "psycopg",
    ):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_mib() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def _commit() -> str:
    """The checkout's commit (uncommitted changes are not marked); "unknown" outside git."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip()
