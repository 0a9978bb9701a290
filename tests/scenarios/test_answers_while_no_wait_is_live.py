"""A person's answer accepted while no wait of the turn is live (its owner shut down or died, and no one
has restored the turn yet) is applied when the turn is restored: never lost, never asked again, and
the tool runs once (design/model/README.md, finding 3).

Two coordinators on one database, as two processes would be: A runs the turn and goes away; B accepts
the answer before its watch takes the turn over.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from coordinator.actors import wait
from coordinator.chaos import crash
from coordinator.config import Config, PluginConfig
from coordinator.models.scripted import ScriptedModel
from coordinator.records import Rule
from tests.conftest import make_config, running
from tests.scenarios.test_question_forms import ASK
from tests.scenarios.test_stop_matrix import DONE, CountingModel

# A plugin tool that counts its runs in a file, so the test sees how often it ran in any coordinator.
COUNTED_PLUGIN = """
import pathlib
import trio

async def counted(path: str, seconds: float) -> str:
    \"\"\"Count a run, then sleep.\"\"\"
    with open(path, "a") as runs:
        runs.write("ran\\n")
    await trio.sleep(seconds)
    return "counted"
"""
ASK_COUNTED = (
    Rule(action="*", resource="*", effect="allow"),
    Rule(action="counted", resource="*", effect="ask"),
)


def config_with_counted(tmp_path: Path) -> Config:
    (tmp_path / "countedtools.py").write_text(COUNTED_PLUGIN)
    config = make_config(tmp_path, rules=ASK_COUNTED)
    return attrs.evolve(config, plugin=(PluginConfig(entry="countedtools:counted"),))


def counted_call(tmp_path: Path, seconds: float = 0) -> dict[str, Any]:
    arguments = {"path": str(tmp_path / "runs.txt"), "seconds": seconds}
    return {"tool_calls": [{"id": "call_1", "name": "counted", "input": arguments}]}


def runs(tmp_path: Path) -> int:
    path = tmp_path / "runs.txt"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.sqlite_only(
    "B's watch must not have taken the suspended turn over yet; on PostgreSQL a node's graceful "
    "stop reaches the others at once (NOTIFY) and they resume its turns at once"
)
async def test_a_reply_accepted_while_the_turn_is_suspended_is_applied_at_its_resume(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A shuts down while the permission waits; B accepts ``once``; B's resume runs the tool once."""
    config = config_with_counted(tmp_path)
    model = CountingModel(ScriptedModel.from_json([DONE]))
    async with running(config, model=model) as (b, b_events):
        async with running(config, [counted_call(tmp_path), DONE]) as (a, a_events):
            session = await a.create_session()
            await a.prompt(session.id, "go")
            asked = await a_events.wait_for("permission.asked")
            await trio.testing.wait_all_tasks_blocked()
        # At once, before B's watch takes the suspended turn over.
        request_id = asked.payload["request"]["id"]
        replied = await b.reply_permission(session.id, request_id, "once")
        assert replied.status == "replied"
        await b_events.wait_for("session.idle")
        types = b_events.types(session.id)
        # The reply was accepted before B took the turn over: no wait was live when it landed.
        assert types.index("permission.replied") < types.index("session.execution.resumed")
        assert types[types.index("session.execution.suspended") :] == [
            "session.execution.suspended",
            "permission.replied",
            "session.execution.resumed",
            "session.tool.succeeded",
            "session.step.started",
            "session.step.succeeded",
            "session.execution.succeeded",
            "session.idle",
        ]
        assert runs(tmp_path) == 1
        # The model is asked once more, with the tool's output: the approval was not lost.
        assert len(model.requests) == 1
        assert len(b_events.of("permission.asked")) == 1


async def test_a_reply_accepted_after_its_owner_died_is_applied_at_the_takeover(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A dies while the permission waits; B accepts ``once`` before its lease runs out, then takes over."""
    config = config_with_counted(tmp_path)
    model = CountingModel(ScriptedModel.from_json([DONE]))
    async with running(config, model=model) as (b, b_events):
        async with running(config, [counted_call(tmp_path), DONE]) as (a, a_events):
            session = await a.create_session()
            await a.prompt(session.id, "go")
            asked = await a_events.wait_for("permission.asked")
            await trio.testing.wait_all_tasks_blocked()
            await crash(a)
            await b.reply_permission(session.id, asked.payload["request"]["id"], "once")
        await b_events.wait_for("session.idle")
        types = b_events.types(session.id)
        assert types.index("permission.replied") < types.index("session.execution.resumed")
        assert types[types.index("permission.replied") :] == [
            "permission.replied",
            "session.execution.resumed",
            "session.step.failed",
            "session.tool.succeeded",
            "session.step.started",
            "session.step.succeeded",
            "session.execution.succeeded",
            "session.idle",
        ]
        assert runs(tmp_path) == 1
        assert len(model.requests) == 1


async def test_a_call_whose_tool_had_started_is_never_restored(tmp_path: Path, autojump_clock: Any) -> None:
    """Approved, started, then the owner died: the call fails as interrupted and does not run again."""
    config = config_with_counted(tmp_path)
    model = CountingModel(ScriptedModel.from_json([DONE]))
    async with running(config, model=model) as (_b, b_events):
        async with running(config, [counted_call(tmp_path, seconds=1000), DONE]) as (a, a_events):
            session = await a.create_session()
            await a.prompt(session.id, "go")
            asked = await a_events.wait_for("permission.asked")
            await a.reply_permission(session.id, asked.payload["request"]["id"], "once")
            await a_events.wait_for("permission.replied")
            await trio.testing.wait_all_tasks_blocked()
            assert runs(tmp_path) == 1
            await crash(a)
        await b_events.wait_for("session.idle")
        failed = b_events.of("session.tool.failed")
        assert [e.payload["error"]["type"] for e in failed] == ["interrupted"]
        assert runs(tmp_path) == 1
        assert len(model.requests) == 1


@pytest.mark.sqlite_only(
    "B's watch must not have taken the suspended turn over yet; on PostgreSQL a node's graceful "
    "stop reaches the others at once (NOTIFY) and they resume its turns at once"
)
async def test_a_form_submitted_while_the_turn_is_suspended_is_the_call_result_at_its_resume(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A shuts down while the form waits; B accepts the answers; the resumed call returns them."""
    config = make_config(tmp_path)
    model = CountingModel(ScriptedModel.from_json([DONE]))
    async with running(config, model=model) as (b, b_events):
        async with running(config, [ASK, DONE]) as (a, a_events):
            session = await a.create_session()
            await a.prompt(session.id, "ask me")
            asked = await a_events.wait_for("form.asked")
            await trio.testing.wait_all_tasks_blocked()
        await b.submit_form(session.id, asked.payload["form"]["id"], {"color": "red", "name": "Ada"})
        await b_events.wait_for("session.idle")
        types = b_events.types(session.id)
        assert types[types.index("form.submitted") :] == [
            "form.submitted",
            "session.execution.resumed",
            "session.tool.succeeded",
            "session.step.started",
            "session.step.succeeded",
            "session.execution.succeeded",
            "session.idle",
        ]
        assert b_events.of("session.tool.succeeded")[0].payload["output"] == {
            "answers": {"color": "red", "name": "Ada"}
        }
        assert len(b_events.of("form.asked")) == 1
        assert len(model.requests) == 1


async def test_a_reply_that_lands_while_the_takeover_restores_the_call_is_not_asked_again(
    tmp_path: Path, autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dies while the permission waits; B resumes the turn; the reply (from another node, say) lands
    after the resume read the request pending and before the call re-opens it. The request must not
    be published as asked again after its reply (a client would show a settled request), and the
    reply is applied: the tool runs once (found by the chaos rounds over nodes)."""
    config = config_with_counted(tmp_path)
    model = CountingModel(ScriptedModel.from_json([DONE]))
    original = wait._open
    replies: list[Any] = []

    async def reply_first(turn: Any, kind: Any, call_id: str) -> Any:
        if replies:
            await replies.pop()()
        return await original(turn, kind, call_id)

    monkeypatch.setattr(wait, "_open", reply_first)
    async with running(config, model=model) as (b, b_events):
        async with running(config, [counted_call(tmp_path), DONE]) as (a, a_events):
            session = await a.create_session()
            await a.prompt(session.id, "go")
            asked = await a_events.wait_for("permission.asked")
            await trio.testing.wait_all_tasks_blocked()
            replies.append(lambda: b.reply_permission(session.id, asked.payload["request"]["id"], "once"))
            await crash(a)
        await b_events.wait_for("session.idle")
        types = b_events.types(session.id)
        assert types[types.index("session.execution.resumed") :] == [
            "session.execution.resumed",
            "session.step.failed",
            "permission.replied",
            "session.tool.succeeded",
            "session.step.started",
            "session.step.succeeded",
            "session.execution.succeeded",
            "session.idle",
        ]
        assert len(b_events.of("permission.asked")) == 1
        assert runs(tmp_path) == 1
