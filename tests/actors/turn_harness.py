"""A turn on a real SQLite file, without a session actor: the arbiter's and the settlement's tests
drive it by hand (``tests/actors/test_stops.py``, ``tests/actors/test_settlement.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import attrs

from actors.context import Runtime, TurnScope
from actors.handle import ActorHandle
from coordinator.bus import Bus
from coordinator.config import Config
from coordinator.events import Event
from coordinator.models.scripted import ScriptedModel
from coordinator.store import Store, open_store
from coordinator.tools.registry import build_tools

AT = "2026-12-03T00:00:00.000Z"
OWNER = "inst_here"


@attrs.define
class Harness:
    """One running turn (``turn_1`` of ``ses_1``), its runtime, and every event committed since."""

    runtime: Runtime
    turn: TurnScope
    events: list[Event]

    @property
    def store(self) -> Store:
        return self.runtime.store

    def types(self) -> list[str]:
        return [event.type for event in self.events]

    def live(self) -> TurnScope:
        """Register the turn as running in this process (as the session actor does)."""
        self.runtime.turns[self.turn.turn_id] = self.turn
        return self.turn


@contextlib.asynccontextmanager
async def open_harness(tmp_path: Path, *, status: str = "running") -> AsyncIterator[Harness]:
    """A store with one session whose turn is ``status``, its claim held by this runtime."""
    with open_store(str(tmp_path / "db.sqlite"), synchronous="normal") as store:
        async with store.transaction() as tx:
            tx.insert_session("ses_1", "t", AT)
            tx.insert_turn("turn_1", "ses_1", "hello", AT)
            tx.set_turn_status("turn_1", status)
            assert tx.acquire_claim("ses_1", OWNER, AT, takeover_from=None) > 0
        committed: list[Event] = []
        store.on_commit(committed.extend)
        config = Config(base_dir=tmp_path)
        runtime = Runtime(
            store=store,
            bus=Bus(store, store.read.last_seq()),
            config=config,
            model=ScriptedModel.from_json([{"text": "done"}]),
            tools=build_tools(config),
            instance_id=OWNER,
            workdir=tmp_path,
        )
        claim = store.read.get_claim("ses_1")
        assert claim is not None
        turn = TurnScope(
            runtime=runtime,
            session_id="ses_1",
            turn_id="turn_1",
            epoch=claim.epoch,
            handle=ActorHandle(kind="turn", id="turn_1"),
        )
        yield Harness(runtime=runtime, turn=turn, events=committed)
