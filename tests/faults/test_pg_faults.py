"""PostgreSQL's connections ended under two nodes, the short version (``make faults`` runs 200, and
50 restarts of the whole server, which the suite cannot do beside other tests sharing that server)."""

from __future__ import annotations

import io

import pytest

from tests.backends import require_postgres, server_url
from tests.faults.pg_faults import run_campaign

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
def test_ended_connections_lose_nothing_and_run_no_tool_twice() -> None:
    require_postgres()
    out = io.StringIO()

    totals = run_campaign(kills=4, restarts=0, seed=1, server_url=server_url(), out=out)

    report = out.getvalue()
    assert totals.kills >= 4, report
    assert totals.acknowledged > 50, report
    assert (totals.lost, totals.double_runs, totals.violations) == (0, 0, 0), report
    # A kill that hit a write in flight has it refused (503), never acknowledged; one that ended an
    # idle connection costs no request at all, so a short run may refuse none.
