"""The browser tests without a browser: one line and no failure on a laptop, a failure in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run_browser_tests(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "CI"}
    environment.update(COORDINATOR_TEST_CHROMIUM=str(tmp_path / "no-chromium"), **env)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/browser"]
    return subprocess.run(argv, cwd=REPO, env=environment, capture_output=True, text=True, timeout=120)


def test_without_chromium_the_browser_tests_are_skipped_with_one_line(tmp_path: Path) -> None:
    """`make test` on a machine without Chromium must still pass, and say once what it did not run."""
    run = _run_browser_tests(tmp_path)
    lines = [line for line in run.stdout.splitlines() if "browser tests skipped" in line]
    assert lines == [f"browser tests skipped: no {tmp_path / 'no-chromium'} (apt-get install chromium)"]
    assert run.returncode == 5, run.stdout  # pytest's "no tests collected": the whole suite has others


def test_in_ci_a_missing_chromium_fails_the_browser_tests(tmp_path: Path) -> None:
    """CI must never go green by skipping the only tests of the page."""
    run = _run_browser_tests(tmp_path, CI="true")
    assert run.returncode == 1, run.stdout
    assert "CI=true and the browser tests cannot run" in run.stdout
    assert "browser tests skipped" not in run.stdout
