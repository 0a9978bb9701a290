"""The tool-call actor (``coordinator/actors/tool_call.py``) stopped with its turn: what its failure keeps, and
when it may be written, on a real SQLite file with in-process tools."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from coordinator import decisions
from coordinator.actors import tool_call
from coordinator.actors.context import TurnScope
from coordinator.actors.journal import Journal
from coordinator.config import Config, TimeoutsConfig
from coordinator.models.base import ToolSpec
from coordinator.records import Rule
from coordinator.store import Transaction
from coordinator.store.rows import ToolCallRow
from coordinator.tools.base import Capabilities, Tool, ToolContext, any_resource
from tests.actors.turn_harness import Harness, call_row, open_harness, start_step


def _tool(name: str, run: Callable[[ToolContext, dict[str, Any]], Any], **capabilities: bool) -> Tool:
    """An in-process tool without a deadline of its own."""
    spec = ToolSpec(name=name, description=name, parameters={"type": "object"})
    return Tool(
        spec=spec,
        resource=any_resource,
        run=run,
        deadline_scope=None,
        capabilities=Capabilities(**capabilities),
    )


async def _echo(context: ToolContext, input: dict[str, Any]) -> Any:
    return input["text"]


async def _block(context: ToolContext, input: dict[str, Any]) -> Any:
    await trio.sleep_forever()


async def _script(context: ToolContext, input: dict[str, Any]) -> Any:
    """What an ``execute`` script does, in process: one nested call, one log line, then a long wait."""
    assert context.call_nested is not None and context.write_log is not None
    first = await context.call_nested("echo", {"text": "FIRST_RESULT_42"})
    await context.write_log(f"first: {first.output}")
    await trio.sleep_forever()


async def _note_stop_reason(context: ToolContext, input: dict[str, Any]) -> Any:
    """A tool that, like an MCP client, reads why it is stopped in its shielded cleanup."""
    try:
        await trio.sleep_forever()
    finally:
        SEEN_STOP_REASONS.append(context.stop_reason())


SEEN_STOP_REASONS: list[Any] = []

TOOLS = {
    "note_stop": _tool("note_stop", _note_stop_reason),
    "echo": _tool("echo", _echo),
    "block": _tool("block", _block),
    "gate": _tool("gate", _echo),
    "script": _tool("script", _script, keeps_partial_result=True, runs_nested_calls=True, nestable=False),
}


async def _run_calls(
    turn: TurnScope, *calls: ToolCallRow, slow: set[trio.lowlevel.Task] | None = None
) -> None:
    """Run the calls' actors as the turn's children, concurrently, until the turn stops; the tasks of
    those named in ``slow`` are added to it."""

    async def run_one(call: ToolCallRow, is_slow: bool) -> None:
        if slow is not None and is_slow:
            slow.add(trio.lowlevel.current_task())
        await tool_call.run(turn, turn.handle, call)

    with turn.handle.scope:
        async with trio.open_nursery() as nursery:
            for call in calls:
                nursery.start_soon(run_one, call, call.name == "gate")


class SlowRevocations:
    """``Journal.settled``, except that a settlement of one of the ``slow`` tasks, once the turn
    stops, waits until ``release`` is set: a wait whose cleanup takes its time (a busy disk, a slow
    network)."""

    def __init__(self) -> None:
        self.slow: set[trio.lowlevel.Task] = set()
        self.release = trio.Event()
        original = Journal.settled

        async def settle(journal: Journal, body: Callable[[Transaction], object]) -> bool:
            if journal.handle.reason is not None and trio.lowlevel.current_task() in self.slow:
                await self.release.wait()
            return await original(journal, body)

        self.settle = settle


async def _interrupted_while_running(harness: Harness, *calls: ToolCallRow) -> None:
    """Run the calls until they all block, then interrupt the turn as a person would."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_run_calls, harness.turn, *calls)
        await trio.testing.wait_all_tasks_blocked()
        assert await decisions.interrupt(harness.runtime, "ses_1", "api")


def _settled(harness: Harness) -> list[tuple[str, Any]]:
    """Each event with what it is about: a wait's id, or a call's id and its error type."""
    out: list[tuple[str, Any]] = []
    for event in harness.events:
        payload = event.payload
        key = payload.get("request_id") or payload.get("call_id")
        if event.type == "session.tool.failed":
            key = (payload["call_id"], payload["error"]["type"])
        out.append((event.type, key))
    return out


async def test_a_stopped_call_fails_only_after_every_wait_of_the_turn_is_revoked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop settles waits first: a client sees every revocation before any tool failure, even when a
    sibling call's wait takes its time to revoke (before, only the chaos campaign caught this)."""
    config = Config(base_dir=tmp_path, permission=(Rule(action="gate", resource="*", effect="ask"),))
    async with open_harness(tmp_path, config=config, tools=TOOLS) as harness:
        turn = harness.live()
        slow = SlowRevocations()
        monkeypatch.setattr(Journal, "settled", slow.settle)
        asking, running = call_row("c1", "gate", input={"text": "x"}), call_row("c2", "block")
        await start_step(harness, asking, running)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: _run_calls(turn, asking, running, slow=slow.slow))
            try:
                await trio.testing.wait_all_tasks_blocked()
                assert harness.types() == ["permission.asked"]
                assert await decisions.interrupt(harness.runtime, "ses_1", "api")
                await trio.testing.wait_all_tasks_blocked()
                # c1's wait is still revoking its request: c2, stopped too, must not fail before it.
                assert turn.journal.deferred == ()
            finally:
                slow.release.set()
        await harness.settle()
        request_id = harness.events[0].payload["request"]["id"]
        assert _settled(harness)[:2] == [("permission.asked", None), ("permission.revoked", request_id)]
        assert sorted(_settled(harness)[2:]) == [
            ("session.tool.failed", ("c1", "interrupted")),
            ("session.tool.failed", ("c2", "interrupted")),
        ]


async def test_a_stopped_script_call_keeps_its_finished_nested_calls_and_logs(tmp_path: Path) -> None:
    """Seed 002: the model must get what the script had already done (finished nested calls, logged
    lines) with the interrupted call, or the next turn redoes that work."""
    async with open_harness(tmp_path, tools=TOOLS) as harness:
        harness.live()
        script = call_row("c1", "script")
        await start_step(harness, script)
        await _interrupted_while_running(harness, script)
        await harness.settle()
        finished = {
            "call_id": "c1.1",
            "name": "echo",
            "input": {"text": "FIRST_RESULT_42"},
            "status": "succeeded",
            "output": "FIRST_RESULT_42",
        }
        partial = {"logs": ["first: FIRST_RESULT_42"], "calls": [finished]}
        assert harness.types() == [
            "session.tool.started",
            "session.tool.succeeded",
            "session.tool.progress",
            "session.tool.progress",
            "session.tool.failed",
        ]
        assert harness.events[-1].payload == {
            "call_id": "c1",
            "error": {"type": "interrupted", "message": "interrupted by the user", "started": True},
            "partial": partial,
        }
        stored = harness.store.read.get_tool_call("ses_1", "c1")
        assert stored is not None and stored.partial is not None
        assert (len(stored.partial.logs), len(stored.partial.calls)) == (1, 1)


async def test_only_a_call_that_waited_on_a_person_looks_for_its_waits_as_it_settles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call's settlement revokes a wait the call left pending (its own revocation failed, chaos F15
    and F17) before the call settles; a call that never opened a wait has none, and its settlement
    reads nothing for one (two reads a plain call fewer on every turn)."""
    from coordinator.store._reads import SqlReader

    looked_up: list[tuple[str, str]] = []
    for read in ("permission_of_call", "form_of_call"):
        original = getattr(SqlReader, read)

        def recording(
            self: SqlReader,
            session_id: str,
            call_id: str,
            *,
            pending: bool,
            _o: Any = original,
            _r: str = read,
        ) -> Any:
            if pending:
                looked_up.append((_r, call_id))
            return _o(self, session_id, call_id, pending=pending)

        monkeypatch.setattr(SqlReader, read, recording)
    config = Config(base_dir=tmp_path, permission=(Rule(action="gate", resource="*", effect="ask"),))
    async with open_harness(tmp_path, config=config, tools=TOOLS) as harness:
        turn = harness.live()
        plain, asking = (
            call_row("c1", "echo", input={"text": "x"}),
            call_row("c2", "gate", input={"text": "y"}),
        )
        await start_step(harness, plain, asking)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: _run_calls(turn, plain, asking))
            await trio.testing.wait_all_tasks_blocked()
            (asked,) = [event for event in harness.events if event.type == "permission.asked"]
            request_id = asked.payload["request"]["id"]
            await decisions.reply_permission(harness.runtime, "ses_1", request_id, "once", None)
        await harness.settle()
    succeeded = [
        event.payload["call_id"] for event in harness.events if event.type == "session.tool.succeeded"
    ]
    assert sorted(succeeded) == ["c1", "c2"]
    assert sorted(looked_up) == [("form_of_call", "c2"), ("permission_of_call", "c2")]


async def test_a_tool_reads_the_reason_its_call_is_stopped_for_in_its_cleanup(tmp_path: Path) -> None:
    """A tool that must tell someone outside why it stops (an MCP server, a remote job) reads the typed
    reason, never guesses it from the cancellation."""
    SEEN_STOP_REASONS.clear()
    async with open_harness(tmp_path, tools=TOOLS) as harness:
        harness.live()
        call = call_row("c1", "note_stop")
        await start_step(harness, call)
        await _interrupted_while_running(harness, call)
    assert [type(r).__name__ for r in SEEN_STOP_REASONS] == ["Interrupt"]
    assert SEEN_STOP_REASONS[0].by == "api"


async def test_a_tool_stopped_by_its_own_deadline_reads_the_timeout(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The tool's own ``[timeouts] tool`` deadline is a reason too: the call fails as timeout, the
    turn goes on, and the tool's cleanup knows which deadline it was."""
    SEEN_STOP_REASONS.clear()
    tools = dict(TOOLS, note_stop=attrs.evolve(TOOLS["note_stop"], deadline_scope="tool"))
    config = Config(base_dir=tmp_path, timeouts=TimeoutsConfig(tool=5))
    async with open_harness(tmp_path, tools=tools, config=config) as harness:
        turn = harness.live()
        call = call_row("c1", "note_stop")
        await start_step(harness, call)
        with trio.fail_after(60):
            await tool_call.run(turn, turn.handle, call)
    assert [(type(r).__name__, r.scope) for r in SEEN_STOP_REASONS] == [("Timeout", "tool")]
    assert harness.types()[-1] == "session.tool.failed"
    assert harness.events[-1].payload["error"]["type"] == "timeout"
