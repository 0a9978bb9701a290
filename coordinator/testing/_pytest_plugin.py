"""The pytest plugin of ``coordinator.testing`` (``pytest -p coordinator.testing``): options and fixtures."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from coordinator import Coordinator
from coordinator.testing._api import open_test_coordinator

DEFAULT_RUNS = 10


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("coordinator", "coordinator.testing")
    group.addoption(
        "--chaos-runs",
        type=int,
        default=DEFAULT_RUNS,
        help=f"the chaos_runs fixture (default {DEFAULT_RUNS})",
    )
    group.addoption("--chaos-seed", type=int, default=0, help="the chaos_seed fixture (default 0)")


@pytest.fixture
def chaos_runs(request: pytest.FixtureRequest) -> int:
    """``--chaos-runs``: pass it as ``run_chaos(..., runs=chaos_runs)`` to scale a campaign from the command line."""
    return int(request.config.getoption("--chaos-runs"))


@pytest.fixture
def chaos_seed(request: pytest.FixtureRequest) -> int:
    """``--chaos-seed``: the seed to pass to ``run_chaos``."""
    return int(request.config.getoption("--chaos-seed"))


@pytest.fixture
def coordinator_config() -> Any:
    """The config ``test_coordinator`` uses: None (the defaults); override it in your conftest.py."""
    return None


@pytest.fixture
def coordinator_script() -> Any:
    """The script ``test_coordinator``'s model follows: None (the demo model); override it likewise."""
    return None


@pytest.fixture
async def test_coordinator(
    coordinator_config: Any, coordinator_script: Any, tmp_path: Path
) -> AsyncIterator[Coordinator]:
    """``open_test_coordinator(config=coordinator_config, script=coordinator_script, tmp_path=tmp_path)``.

    An async fixture: it needs pytest-trio (``trio_mode = true``, or the test marked ``trio``).
    """
    async with open_test_coordinator(
        coordinator_config, script=coordinator_script, tmp_path=tmp_path
    ) as coord:
        yield coord
