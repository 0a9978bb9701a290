"""The power-cut campaign's short version: a few seeded cuts of the real server under load on SQLite
FULL, with nothing acknowledged lost (``make faults`` runs 500)."""

from __future__ import annotations

import io

import pytest

from tests.faults.conftest import require_rig
from tests.faults.power_cuts import run_campaign

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
def test_power_cuts_lose_nothing_acknowledged() -> None:
    require_rig()
    out = io.StringIO()

    totals = run_campaign(cuts=4, seed=1, synchronous="full", out=out, stop_at_first_loss=True)

    report = out.getvalue()
    assert totals.cuts >= 4, report
    assert totals.acknowledged > 100, report
    assert "lose:" in report, report  # a cut forgot unsynced writes of some file
    assert (totals.lost, totals.integrity_failures, totals.violations) == (0, 0, 0), report
    assert totals.starts > 0, report
