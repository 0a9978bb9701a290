"""The power-cut rig's tests need FUSE: skipped with one line where it is missing, failed under CI."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.rig import Rig, mounted, unavailable


def require_rig() -> None:
    reason = unavailable()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"the power-cut rig cannot run in CI: {reason}")
    pytest.skip(f"the power-cut rig cannot run here: {reason}")


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    require_rig()
    with mounted(tmp_path / "rig") as mounted_rig:
        yield mounted_rig
