"""Permission replies: once, always, reject with and without a message, late replies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from coordinator import decisions
from coordinator.config import Config
from coordinator.errors import PermissionAlreadySettled, PermissionNotFound
from coordinator.models.scripted import ScriptedModel
from coordinator.records import Rule
from tests.conftest import make_config, running
from tests.scenarios.test_chaos_findings import as_another_process
from tests.scenarios.test_stop_matrix import CountingModel

ASK = (Rule(action="*", resource="*", effect="allow"), Rule(action="shell", resource="*", effect="ask"))
DONE = {"text": "done"}


def shell_calls(*commands: str) -> dict[str, Any]:
    calls = [{"id": f"call_{i}", "name": "shell", "input": {"command": c}} for i, c in enumerate(commands)]
    return {"tool_calls": calls}


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path, rules=ASK)


async def test_reject_with_a_message_is_feedback_and_the_turn_goes_on(config: Config) -> None:
    """The model receives the message as the call's failure and answers; the turn succeeds."""
    model = CountingModel(ScriptedModel.from_json([shell_calls("rm -rf /tmp/x"), DONE]))
    async with running(config, model=model) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "clean up")
        asked = await recorder.wait_for("permission.asked")
        await coord.reply_permission(
            session.id, asked.payload["request"]["id"], "reject", "use trash instead"
        )
        await recorder.wait_for("session.idle")
        assert recorder.types(session.id)[4:] == [
            "permission.asked",
            "permission.replied",
            "session.tool.failed",
            "session.step.succeeded",
            "session.step.started",
            "session.step.succeeded",
            "session.execution.succeeded",
            "session.idle",
        ]
        error = recorder.of("session.tool.failed")[0].payload["error"]
        assert error == {"type": "declined", "message": "use trash instead", "started": False}
        tool_message = model.requests[1].messages[-1]
        assert tool_message.role == "tool" and tool_message.tool_call_id == "call_0"
        assert "use trash instead" in (tool_message.content or "")


async def test_always_adds_a_session_rule_and_resolves_the_other_pending_requests(config: Config) -> None:
    """``always`` answers every pending request it now allows, each with its own permission.replied."""
    script = [shell_calls("ls", "ls"), shell_calls("ls"), DONE]
    async with running(config, script) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "list")
        first = await recorder.wait_for("permission.asked", 1)
        await recorder.wait_for("permission.asked", 2)
        await coord.reply_permission(session.id, first.payload["request"]["id"], "always")
        await recorder.wait_for("session.idle")
        replied = [e.payload["decision"] for e in recorder.of("permission.replied")]
        assert replied == ["always", "always"]
        assert len(recorder.of("permission.asked")) == 2  # the third `ls` ran under the session rule
        assert len(recorder.of("session.tool.succeeded")) == 3
        assert await coord.pending_permissions() == []


@pytest.mark.parametrize("message", [None, ""])
async def test_a_reject_with_no_message_or_an_empty_one_is_a_declined_stop(
    config: Config, message: str | None
) -> None:
    """An empty message is no message: the turn stops declined (seed 000's cause), and the stored
    reply says so, so a restored wait reading it back after a restart decides the same."""
    async with running(config, [shell_calls("rm -rf /tmp/x"), DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        request_id = (await recorder.wait_for("permission.asked")).payload["request"]["id"]
        await coord.reply_permission(session.id, request_id, "reject", message)
        idle = await recorder.wait_for("session.idle")
        assert idle.payload["outcome"] == "declined"
        types = recorder.types(session.id)
        assert types[types.index("permission.asked") + 1 :] == [
            "permission.replied",
            "session.tool.failed",
            "session.step.failed",
            "session.execution.interrupted",
            "session.idle",
        ]
        stored = await coord.store.read(lambda reader: reader.permission_wait_row(request_id))
        assert stored is not None and stored.message is None


async def test_a_reply_to_the_wait_of_a_turn_whose_stop_is_committed_is_a_late_reply(config: Config) -> None:
    """Between a stop's intent and its one settlement commit the request still reads pending in the
    store: a reply then answers 409 with the revocation it is about to get, never 200 and ignored."""
    async with running(config, [shell_calls("echo hi"), DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        request_id = (await recorder.wait_for("permission.asked")).payload["request"]["id"]
        # Another node's interrupt: committed, not applied here yet (this node's watch does that).
        assert await decisions.interrupt(as_another_process(coord._runtime), session.id, "api")
        with pytest.raises(PermissionAlreadySettled) as caught:
            await coord.reply_permission(session.id, request_id, "once")
        assert caught.value.settlement == {"status": "revoked", "reason": {"type": "interrupt", "by": "api"}}
        idle = await recorder.wait_for("session.idle")
        assert idle.payload["outcome"] == "interrupted"
        revoked = recorder.of("permission.revoked")
        assert [e.payload["reason"] for e in revoked] == [{"type": "interrupt", "by": "api"}]
        assert recorder.of("permission.replied") == []


async def test_a_reply_to_a_settled_request_names_its_settlement(config: Config) -> None:
    """A late reply is a 409 with the settlement, never "not found" (seed 003)."""
    async with running(config, [shell_calls("echo hi"), DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        request_id = (await recorder.wait_for("permission.asked")).payload["request"]["id"]
        assert await coord.interrupt(session.id) is True
        await recorder.wait_for("permission.revoked")
        with pytest.raises(PermissionAlreadySettled) as caught:
            await coord.reply_permission(session.id, request_id, "once")
        assert caught.value.settlement == {
            "status": "revoked",
            "reason": {"type": "interrupt", "by": "embedder"},
        }
        other = await coord.create_session()
        with pytest.raises(PermissionNotFound):
            await coord.reply_permission(other.id, request_id, "once")
        with pytest.raises(PermissionNotFound):
            await coord.reply_permission(session.id, "per_never", "once")


async def test_of_two_concurrent_replies_exactly_one_wins(config: Config) -> None:
    """Replies race; one is applied, the other learns how the request was settled."""
    async with running(config, [shell_calls("echo hi"), DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        request_id = (await recorder.wait_for("permission.asked")).payload["request"]["id"]
        outcomes: list[str] = []

        async def reply(decision: str, message: str | None = None) -> None:
            try:
                await coord.reply_permission(session.id, request_id, decision, message)
                outcomes.append(decision)
            except PermissionAlreadySettled as exc:
                outcomes.append(f"409 {exc.settlement['decision']}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reply, "once")
            nursery.start_soon(reply, "reject", "not now")
        # The loser may learn first: the winner's answer waits until its reply is durable.
        [winner] = [outcome for outcome in outcomes if not outcome.startswith("409")]
        assert sorted(outcomes) == sorted([winner, f"409 {winner}"])
        await recorder.wait_for("session.idle")
        assert len(recorder.of("permission.replied")) == 1


async def test_a_second_interrupt_answers_false_and_changes_nothing(config: Config) -> None:
    """Only the first interrupt is recorded; an idle session has nothing to interrupt."""
    async with running(config, [shell_calls("echo hi"), DONE]) as (coord, recorder):
        session = await coord.create_session()
        assert await coord.interrupt(session.id) is False
        await coord.prompt(session.id, "go")
        await recorder.wait_for("permission.asked")
        assert await coord.interrupt(session.id) is True
        assert await coord.interrupt(session.id) is False
        await recorder.wait_for("session.idle")
        assert len(recorder.of("session.execution.interrupted")) == 1


async def test_a_deny_rule_fails_the_call_and_the_turn_goes_on(tmp_path: Path) -> None:
    """``deny`` fails the call at once with type denied, naming the rule; the model sees it."""
    rules = (*ASK, Rule(action="shell", resource="rm *", effect="deny"))
    config = make_config(tmp_path, rules=rules)
    async with running(config, [shell_calls("rm -rf /"), DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        error = recorder.of("session.tool.failed")[0].payload["error"]
        assert error["type"] == "denied" and 'resource="rm *"' in error["message"]
        assert recorder.of("session.idle")[0].payload["outcome"] == "succeeded"


async def test_prompts_sent_while_a_turn_runs_are_queued_in_order(config: Config) -> None:
    """A second prompt runs after the first turn settles, never beside it."""
    async with running(config, [shell_calls("echo hi"), DONE, DONE]) as (coord, recorder):
        session = await coord.create_session()
        first = await coord.prompt(session.id, "one")
        second = await coord.prompt(session.id, "two")
        asked = await recorder.wait_for("permission.asked")
        await coord.reply_permission(session.id, asked.payload["request"]["id"], "once")
        await recorder.wait_for("session.idle", 2)
        started = [e.payload["turn_id"] for e in recorder.of("session.turn.started")]
        idles = [e.payload["turn_id"] for e in recorder.of("session.idle")]
        assert started == idles == [first, second]
        history = await coord.history(session.id)
        assert [m.role for m in history] == ["user", "assistant", "assistant", "user", "assistant"]


async def test_a_configured_deny_wins_over_an_always_rule_the_session_already_has(tmp_path: Path) -> None:
    """An operator who adds a deny rule after a user answered ``always`` must be obeyed: the session's
    rule never reopens what the configuration forbids (design/decisions.md)."""
    command = "rm -rf build"
    script = ScriptedModel.from_json([shell_calls(command), DONE, shell_calls(command), DONE])
    async with running(make_config(tmp_path, rules=ASK), model=script) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "clean")
        asked = await recorder.wait_for("permission.asked")
        await coord.reply_permission(session.id, asked.payload["request"]["id"], "always")
        await recorder.wait_for("session.idle")
    deny = Rule(action="shell", resource="rm *", effect="deny")
    async with running(make_config(tmp_path, rules=(*ASK, deny)), model=script) as (coord, recorder):
        await coord.prompt(session.id, "clean again")
        await recorder.wait_for("session.idle", 2)
        failed = recorder.of("session.tool.failed")
        assert [e.payload["error"]["type"] for e in failed] == ["denied"]
        assert len(recorder.of("permission.asked")) == 1  # the first turn's only
        assert recorder.of("session.idle")[-1].payload["outcome"] == "succeeded"
