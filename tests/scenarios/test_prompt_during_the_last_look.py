"""A prompt that commits while the session's actor looks for its next turn is run by that actor.

The actor's look after a turn is read in the turn's settlement, in a worker thread on PostgreSQL: a
prompt that commits after that read, while the actor has not yet learned what it found, finds the
actor still registered and starts none. The actor must look again, not leave the turn to the watch's
next pass (a second later, or never here: the watch is made slow).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from coordinator import _open
from coordinator.store._writes import SqlTransaction
from coordinator.store.postgres._store import PostgresStore
from tests.conftest import make_config, running
from tests.scenarios.test_stop_matrix import DONE


@pytest.mark.postgres_only("a SQLite read runs whole on the trio thread: no commit lands during it")
async def test_a_prompt_during_the_actors_last_look_is_run_by_that_actor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The watch looks every min(WATCH_SECONDS, lease / 3): here only the actor can start the turn.
    monkeypatch.setattr(_open, "WATCH_SECONDS", 3600.0)
    looked, go = threading.Event(), threading.Event()
    armed, settling = [False], threading.local()
    next_turn_later = SqlTransaction.next_turn_later
    write_in_thread = PostgresStore._write_in_thread

    def marked_look(self: SqlTransaction, session_id: str) -> Any:
        settling.looks = True
        return next_turn_later(self, session_id)

    def held_after_the_look(self: PostgresStore, body: Any, fence: Any) -> Any:
        settling.looks = False
        committed = write_in_thread(self, body, fence)
        if armed[0] and settling.looks and fence is not None:  # a settlement's, not a prompt's
            armed[0] = False
            looked.set()  # the settlement committed, its look found no turn
            go.wait(10)
        return committed

    monkeypatch.setattr(SqlTransaction, "next_turn_later", marked_look)
    monkeypatch.setattr(PostgresStore, "_write_in_thread", held_after_the_look)
    async with running(make_config(tmp_path, lease=3600.0), [DONE, DONE]) as (coord, recorder):
        session = await coord.create_session()
        armed[0] = True
        await coord.prompt(session.id, "first")
        with trio.fail_after(10):
            await trio.to_thread.run_sync(looked.wait, 10)
            second = await coord.prompt(session.id, "second")
            go.set()
            idle = await recorder.wait_until(
                lambda e: e.type == "session.idle" and e.payload["turn_id"] == second
            )
        assert idle.payload["outcome"] == "succeeded"
        assert [e.payload["turn_id"] for e in recorder.of("session.turn.started")] == [
            recorder.of("session.idle")[0].payload["turn_id"],
            second,
        ]
