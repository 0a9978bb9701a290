"""A turn on a real SQLite file, without a session actor: the tests of the arbiter, the settlement, the
durable wait, the tool-call actor and the decisions drive it by hand (``tests/actors/test_stops.py``,
``test_settlement.py``, ``test_wait.py``, ``test_tool_call.py``, ``tests/coordinator/test_decisions.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs

from coordinator.actors.context import Runtime, TurnScope
from coordinator.bus import Bus
from coordinator.config import Config
from coordinator.events import Event
from coordinator.models.scripted import ScriptedModel
from coordinator.store import Store, open_store
from coordinator.store.rows import ToolCallRow
from coordinator.tools.base import Tool
from coordinator.tools.registry import build_tools
from coordinator.tools.table import ToolTable

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

    async def settle(self) -> None:
        """Commit the settlements the stopped turn's cleanups deferred (``Journal.settled``), in one
        transaction, in their order, as the session's own settlement does first."""
        await self.turn.journal.settle_turn(lambda tx: None)

    def live(self) -> TurnScope:
        """Register the turn as running in this process (as the session actor does)."""
        self.runtime.turns[self.turn.turn_id] = self.turn
        return self.turn


@contextlib.asynccontextmanager
async def open_harness(
    tmp_path: Path,
    *,
    status: str = "running",
    config: Config | None = None,
    tools: dict[str, Tool] | None = None,
) -> AsyncIterator[Harness]:
    """A store with one session whose turn is ``status``, its claim held by this runtime, which runs
    with ``config`` (by default no rule: every call is allowed) and ``tools`` (by default the
    built-in tools and the config's plugins)."""
    with open_store(str(tmp_path / "db.sqlite"), synchronous="normal") as store:
        async with store.transaction() as tx:
            tx.insert_session("ses_1", "t", AT)
            tx.insert_turn("turn_1", "ses_1", "hello", AT)
            tx.set_turn_status("turn_1", status)
            assert tx.acquire_claim("ses_1", OWNER, AT, takeover_from=None) > 0
        committed: list[Event] = []
        store.on_commit(committed.extend)
        config = config or Config(base_dir=tmp_path)
        runtime = Runtime(
            store=store,
            bus=Bus(store, store.read.last_seq()),
            config=config,
            model=ScriptedModel.from_json([{"text": "done"}]),
            tools=ToolTable(build_tools(config) if tools is None else tools),
            instance_id=OWNER,
            workdir=tmp_path,
        )
        claim = store.read.get_claim("ses_1")
        assert claim is not None
        turn = TurnScope.of_claimed(runtime, "ses_1", "turn_1", claim.epoch)
        yield Harness(runtime=runtime, turn=turn, events=committed)


def call_row(call_id: str, name: str, *, parent: str | None = None, input: Any = None) -> ToolCallRow:
    """A running call of ``step_1`` of the turn, as its step (or its ``execute`` parent) stores it."""
    return ToolCallRow(
        session_id="ses_1",
        call_id=call_id,
        turn_id="turn_1",
        step_id="step_1",
        parent_call_id=parent,
        model_call_id=None if parent else call_id,
        name=name,
        input={} if input is None else input,
        status="running",
        output=None,
        error=None,
        partial=None,
        progress=None,
    )


async def start_step(harness: Harness, *calls: ToolCallRow) -> None:
    """Store ``step_1`` and its running ``calls``, as a step commits them before their actors start;
    then forget those events: a test asserts what comes after."""
    async with harness.store.transaction() as tx:
        tx.insert_step("step_1", "ses_1", "turn_1", AT)
        for call in calls:
            tx.insert_tool_call(call, AT)
    harness.events.clear()
