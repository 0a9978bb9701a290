"""Process-level chaos: the real server stopped (SIGTERM) or killed (SIGKILL) at random, then restarted."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from coordinator.chaos import processes
from coordinator.chaos.known import explain
from coordinator.chaos.process_chaos import run_round

# A few rounds on every push (each starts the server two to four times: about 8 s a round).
ROUNDS = 2
SEED = 1


@pytest.mark.slow
@pytest.mark.parametrize("number", range(ROUNDS))
def test_a_server_stopped_and_killed_at_random_keeps_every_invariant(tmp_path: Path, number: int) -> None:
    """Seen from outside (the database, the servers' logs, our children), every invariant holds."""
    with processes.adopting_orphans():
        result = trio.run(run_round, SEED, number, tmp_path)
    assert result.phases[-1] == "done"
    unexplained = [v for v in result.violations if v in explain(result)[1]]
    assert unexplained == [], result.violations
