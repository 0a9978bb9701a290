"""The benchmark suite at a tiny size: every workload runs and every figure lands in the JSON.

No timing is asserted: a figure's value depends on the machine; that it is measured does not.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from bench import GROUPS
from bench.harness import p99
from bench.report import HEADLINE_KEYS, INSTRUCTION_KEYS, PEER_KEYS, PG_KEYS, PG_PEER_KEYS

ROOT = Path(__file__).resolve().parents[2]

# The pg, pg_rtt and pg_peers groups need a PostgreSQL server (test_bench_pg.py runs them), the peer
# group LangGraph (test_bench_peer.py), the instructions group valgrind and half a minute a child
# (test_bench_instructions.py).
SQLITE_GROUPS = tuple(
    group for group in GROUPS if group not in ("pg", "pg_rtt", "pg_peers", "peer", "instructions")
)
SQLITE_KEYS = tuple(
    key for key in HEADLINE_KEYS if key not in (*PG_KEYS, *PG_PEER_KEYS, *PEER_KEYS, *INSTRUCTION_KEYS)
)

# Measured beside the headline figures: medians, acknowledgements, the parts of a turn, replay.
EXTRA_KEYS = (
    "turn_ms_p50",
    "turn_ms_p99",
    "interrupt_p50_ms",
    "interrupt_ack_p99_ms",
    "decline_p50_ms",
    "decline_ack_p99_ms",
    "interrupt_sync_p99_ms",
    "decline_sync_p99_ms",
    "stops_with_full_gc",
    "full_gc_ms_max",
    "turn_commits",
    "turn_events",
    "turn_task_spawns",
    "checkpoints_per_turn",
    "checkpoint_ns",
    "metrics_commit_ns",
    "metrics_settle_ns",
    "http_text_turn_p99_ms",
    "http_text_turn_httpx_ms",
    "fanout_replay_events_per_s",
)


def test_quick_bench_writes_every_figure_as_a_number(tmp_path: Path) -> None:
    """`make bench` must print and record every figure of issue 8's table, each a plain number."""
    out = tmp_path / "latest.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", ",".join(SQLITE_GROUPS), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    for key in (*SQLITE_KEYS, *EXTRA_KEYS):
        value = document.get(key)
        assert isinstance(value, int | float) and not isinstance(value, bool), key
        assert math.isfinite(value), key
    for key in SQLITE_KEYS:
        assert key in done.stdout, key
    assert {"cpu", "cores", "python"} <= set(document["machine"])
    assert {"sqlite", "trio", "apsw"} <= set(document["versions"])
    assert document["run"]["quick"] is True


def test_p99_is_the_nearest_rank() -> None:
    """With fewer than 100 samples the 99th percentile is the slowest one, never an interpolation."""
    assert p99([3.0, 1.0, 2.0]) == 3.0
    assert p99([float(i) for i in range(1, 201)]) == 198.0
