"""The instructions group at a tiny size: a turn's instructions land as a number; without valgrind
the group is skipped with one line, not failed. No count is asserted beyond its being a turn's."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import instructions

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_the_instructions_group_counts_a_turn(tmp_path: Path) -> None:
    out = tmp_path / "latest.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "instructions", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    value = json.loads(out.read_text()).get("turn_instructions_m")
    assert isinstance(value, float) and math.isfinite(value), value
    # A turn is millions of instructions (8 M in stop 33), not the start-up's billions: the two
    # children's start-ups cancelled out.
    assert 1 < value < 100, value
    assert "turn_instructions_m" in done.stdout


def test_without_valgrind_the_group_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(instructions.shutil, "which", lambda name: None)
    assert instructions.unavailable() == "valgrind is not installed"
