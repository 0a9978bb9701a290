"""The pg benchmark group at a tiny size, on a real PostgreSQL server: every figure lands as a number;
and without a server the group is skipped with one line, not failed. No timing is asserted."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import PG_KEYS
from tests.backends import require_postgres, server_url

ROOT = Path(__file__).resolve().parents[2]


def _bench(out: Path, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "pg,pg_rtt", "--pg", url, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.slow
def test_the_pg_group_writes_every_figure_as_a_number(tmp_path: Path) -> None:
    """`coordinator bench --only pg,pg_rtt` must print and record one node's and three nodes' turn
    rates, the takeover's time (median and range), and a turn's and an interrupt's round trips and
    times through the delaying proxy, each a plain number."""
    require_postgres()
    out = tmp_path / "latest.json"
    done = _bench(out, server_url())
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    for key in PG_KEYS:
        value = document.get(key)
        assert isinstance(value, int | float) and not isinstance(value, bool), key
        assert math.isfinite(value) and value > 0, key
        assert key in done.stdout, key
    assert document["pg_takeover_s_min"] <= document["pg_takeover_s"] <= document["pg_takeover_s_max"]


def test_without_a_server_the_pg_group_is_skipped_with_a_line(tmp_path: Path) -> None:
    """A laptop without PostgreSQL still runs the bench: the group says why it was skipped, exit 0."""
    out = tmp_path / "latest.json"
    done = _bench(out, "postgresql://postgres@127.0.0.1:1/none")
    assert done.returncode == 0, done.stderr
    assert "pg... skipped: no PostgreSQL answers at postgresql://postgres@127.0.0.1:1/none" in done.stderr
    assert not set(PG_KEYS) & set(json.loads(out.read_text()))
