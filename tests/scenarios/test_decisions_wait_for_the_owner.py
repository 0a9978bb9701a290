"""On PostgreSQL a person's decision waits for the owner's fenced transaction in flight on its session,
as every write does on SQLite: it lands wholly before or wholly after it (``decisions`` module).

Otherwise a reply could commit between the owner's read of a restored wait and that wait's
``permission.asked`` again: the person would see the dialog they had just answered open again (the
chaos rounds over nodes found such an ask, invariant 4). The owner's transaction is played by a
connection of the test that holds the session's lock, as a fenced transaction holds it to its commit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from coordinator import Coordinator
from tests.backends import db_for, until_a_transaction_waits_for_a_lock
from tests.conftest import ASK_SHELL, Recorder, make_config, running
from tests.scenarios.test_question_forms import ASK
from tests.scenarios.test_stop_matrix import DONE

SHELL_CALL = {"tool_calls": [{"id": "call_1", "name": "shell", "input": {"command": "true"}}]}

Decide = Callable[[Coordinator, str, Recorder], Awaitable[Any]]


async def _reply(coord: Coordinator, session_id: str, recorder: Recorder) -> Any:
    request = recorder.of("permission.asked")[0].payload["request"]["id"]
    return await coord.reply_permission(session_id, request, "once")


async def _submit(coord: Coordinator, session_id: str, recorder: Recorder) -> Any:
    form = recorder.of("form.asked")[0].payload["form"]["id"]
    return await coord.submit_form(session_id, form, {"color": "red", "name": "Ada"})


async def _interrupt(coord: Coordinator, session_id: str, recorder: Recorder) -> Any:
    return await coord.interrupt(session_id)


@pytest.mark.postgres_only("SQLite runs one write transaction at a time whatever it touches")
@pytest.mark.parametrize(
    ("script", "asked", "decide", "decided"),
    [
        (SHELL_CALL, "permission.asked", _reply, "permission.replied"),
        (ASK, "form.asked", _submit, "form.submitted"),
        (SHELL_CALL, "permission.asked", _interrupt, "session.execution.interrupted"),
    ],
    ids=["reply", "form", "interrupt"],
)
async def test_a_decision_waits_for_the_owners_transaction_in_flight(
    tmp_path: Path, script: dict[str, Any], asked: str, decide: Decide, decided: str
) -> None:
    config = make_config(tmp_path, rules=ASK_SHELL)
    async with running(config, [script, DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for(asked)
        decisions: list[Any] = []

        async def decision() -> None:
            decisions.append(await decide(coord, session.id, recorder))

        with psycopg.connect(db_for(tmp_path)) as owner, trio.fail_after(10):
            owner.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (session.id,))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(decision)
                await until_a_transaction_waits_for_a_lock(db_for(tmp_path))
                assert decisions == []  # it waits for the owner's commit
                owner.commit()
            assert len(decisions) == 1
            await recorder.wait_for(decided)
            await recorder.wait_for("session.idle")
