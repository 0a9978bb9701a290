"""A turn's statements visit as many rows in a store that has run many sessions as in a new one.

A read of every row ever written hides in a short test: it costs nothing in a new store and grows
with the store's age, on the trio thread, in every turn or every second (the watch's look read every
turn ever run, a stopped call's logs every event of its session: design/store.md, migrations 13 and
14). Every kind of turn of ``test_kept_conversation`` (text, a tool, a failing tool, two calls, a
stream interrupted, a call declined, a tool interrupted) runs once in a new session of a new store,
and of a store where sessions ran every kind before. SQLite counts each statement's virtual-machine
steps: a seek is one step however deep the index, a row read is one more.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import apsw
import pytest
import trio

from tests.conftest import running
from tests.scenarios.test_kept_conversation import CheckingModel, Driver, config_for

OLD_SESSIONS = 24
"""Sessions that ran every kind of turn before the measured one: a read of every turn, request or
event ever written visits hundreds of rows more than in a new store."""

SLACK_STEPS = 5
"""VM steps a statement may take more, on average, in the older store."""


async def _steps_a_run(folder: Path, old_sessions: int) -> dict[str, float]:
    """Every kind of turn in a new session, after ``old_sessions`` sessions ran every kind: the VM
    steps of each statement the coordinator ran meanwhile, on average a run (the watch's look runs
    as often as the clock moves, so totals are not compared)."""
    await trio.Path(folder).mkdir()
    config = config_for(folder)
    model = CheckingModel(db_path=config.server.db)
    steps: collections.Counter[str] = collections.Counter()
    runs: collections.Counter[str] = collections.Counter()

    def profile(info: dict[str, Any]) -> None:
        steps[info["sql"]] += info["stmt_status"]["SQLITE_STMTSTATUS_VM_STEP"]
        runs[info["sql"]] += 1

    async with running(config, model=model) as (coord, recorder):
        drive = Driver(coord, recorder, model)
        old = [(await coord.create_session(title=f"old {n}")).id for n in range(old_sessions)]
        new = (await coord.create_session(title="new")).id
        model.scripts.update({session_id: [] for session_id in [*old, new]})
        await drive.cycles(old, 1)
        db: apsw.Connection = coord.store._db  # type: ignore[attr-defined]
        db.trace_v2(apsw.SQLITE_TRACE_PROFILE, profile)
        try:
            await drive.cycles([new], 1)
        finally:
            db.trace_v2(0, None)
    return {sql: steps[sql] / runs[sql] for sql in steps}


@pytest.mark.sqlite_only(
    "it counts SQLite's virtual-machine steps; PostgreSQL's plans of the same reads were checked with "
    "EXPLAIN (design/store.md), and the reads are one body of SQL for both"
)
async def test_no_statement_of_a_turn_reads_more_of_an_older_store(
    tmp_path: Path, autojump_clock: Any
) -> None:
    young = await _steps_a_run(tmp_path / "new", 0)
    aged = await _steps_a_run(tmp_path / "aged", OLD_SESSIONS)
    grown = {
        sql: (young.get(sql), steps) for sql, steps in aged.items() if steps > young.get(sql, 0) + SLACK_STEPS
    }
    assert grown == {}
    assert len(aged) > 40  # the kinds of turn ran their statements (a trace that saw nothing passes)
