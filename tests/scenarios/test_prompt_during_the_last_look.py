"""A prompt that commits while the session's actor looks for its next turn is run by that actor.

On PostgreSQL the actor's look runs in a worker thread, on a snapshot taken before the prompt's
commit; the prompt finds the actor still registered and starts none. The actor must look again, not
leave the turn to the watch's next pass (a second later, or never here: the watch is made slow).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from coordinator import _open
from coordinator.store._turn_reads import TurnReads
from tests.conftest import make_config, running
from tests.scenarios.test_stop_matrix import DONE


@pytest.mark.postgres_only("a SQLite read runs whole on the trio thread: no commit lands during it")
async def test_a_prompt_during_the_actors_last_look_is_run_by_that_actor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The watch looks every min(WATCH_SECONDS, lease / 3): here only the actor can start the turn.
    monkeypatch.setattr(_open, "WATCH_SECONDS", 3600.0)
    looked, go = threading.Event(), threading.Event()
    armed = [False]
    next_turn = TurnReads.next_turn

    def held_look(self: TurnReads, session_id: str) -> Any:
        found = next_turn(self, session_id)
        if armed[0] and found is None:
            armed[0] = False
            looked.set()  # the snapshot is taken, and found no turn
            go.wait(10)
        return found

    monkeypatch.setattr(TurnReads, "next_turn", held_look)
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
