"""The pg benchmark group at a tiny size, on a real PostgreSQL server: every figure lands as a number;
and without a server the group is skipped with one line, not failed. No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import pg_peers
from bench.report import PG_KEYS, PG_PEER_KEYS
from tests.backends import require_postgres, server_url

ROOT = Path(__file__).resolve().parents[2]

# Counts of what should not happen: zero is their good value.
MAY_BE_ZERO = frozenset({"pg_mispredicted_per_turn", "pg_mispredicted_per_interrupt"})


def _bench(out: Path, url: str, groups: str = "pg,pg_rtt") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", groups, "--pg", url, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _figures(out: Path, done: subprocess.CompletedProcess[str], keys: tuple[str, ...]) -> dict[str, Any]:
    """The recorded document, once each of ``keys`` is found in it as a positive number (or a count of
    what should not happen, zero), and printed."""
    document: dict[str, Any] = json.loads(out.read_text())
    for key in keys:
        value = document.get(key)
        assert isinstance(value, int | float) and not isinstance(value, bool), key
        assert math.isfinite(value) and (value > 0 or (key in MAY_BE_ZERO and value == 0)), key
        assert key in done.stdout, key
    return document


@pytest.mark.slow
def test_the_pg_group_writes_every_figure_as_a_number(tmp_path: Path) -> None:
    """`coordinator bench --only pg,pg_rtt` must print and record one node's and three nodes' turn
    rates, the takeover's time (median and range), and a turn's and an interrupt's round trips and
    times through the delaying proxy, each a plain number."""
    require_postgres()
    out = tmp_path / "latest.json"
    done = _bench(out, server_url())
    assert done.returncode == 0, done.stderr
    document = _figures(out, done, PG_KEYS)
    assert document["pg_takeover_s_min"] <= document["pg_takeover_s"] <= document["pg_takeover_s_max"]


def test_without_a_server_the_pg_group_is_skipped_with_a_line(tmp_path: Path) -> None:
    """A laptop without PostgreSQL still runs the bench: the group says why it was skipped, exit 0."""
    out = tmp_path / "latest.json"
    done = _bench(out, "postgresql://postgres@127.0.0.1:1/none")
    assert done.returncode == 0, done.stderr
    assert "pg... skipped: no PostgreSQL answers at postgresql://postgres@127.0.0.1:1/none" in done.stderr
    assert not set(PG_KEYS) & set(json.loads(out.read_text()))


@pytest.mark.slow
def test_the_pg_peers_group_runs_langgraph_and_dbos_beside_us(tmp_path: Path) -> None:
    """`coordinator bench --only pg_peers` runs the same turn on LangGraph + PostgresSaver, on DBOS and
    on ours, each through its own delaying link, and records each side's turn and the ratios."""
    require_postgres()
    out = tmp_path / "latest.json"
    done = _bench(out, server_url(), "pg_peers")
    assert done.returncode == 0, done.stderr
    document = _figures(out, done, PG_PEER_KEYS)
    # Every side waits for the server at least once a turn, through its own link.
    assert document["langgraph_pg_round_trips_per_turn"] >= 1
    assert document["dbos_round_trips_per_turn"] >= 1
    assert document["versions"]["dbos"] != "not installed"


def test_without_the_peers_the_pg_peers_group_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert pg_peers.unavailable() == "langgraph is not installed (pip install -e '.[peer]')"
