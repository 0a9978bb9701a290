"""The peer benchmark group (LangGraph beside us) at a tiny size: every figure lands as a number, and
without LangGraph the group is skipped with one line, not failed. No timing is asserted."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench import peer
from bench.report import PEER_KEYS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_peer_group_writes_every_figure_as_a_number(tmp_path: Path) -> None:
    """`coordinator bench --only peer` runs the same turn on both, interleaved, and records the ratio."""
    out = tmp_path / "latest.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "peer", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    for key in (*PEER_KEYS, "langgraph_turn_commits", "langgraph_turn_ms_p99", "peer_turn_ms_p99"):
        value = document.get(key)
        assert isinstance(value, int | float) and not isinstance(value, bool), key
        assert math.isfinite(value) and value > 0, key
    for key in PEER_KEYS:
        assert key in done.stdout, key
    # A LangGraph turn checkpoints each super-step: it commits, and the count is whole.
    assert document["langgraph_turn_commits"] == int(document["langgraph_turn_commits"]) >= 1
    assert document["versions"]["langgraph"] != "not installed"


def test_without_langgraph_the_group_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peer.util, "find_spec", lambda name: None)
    assert peer.unavailable() == "langgraph is not installed (pip install -e '.[peer]')"
