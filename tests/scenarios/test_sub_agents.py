"""Sub-agent sessions: the `task` tool, and stops that travel down and out.

Each scenario asserts the exact event order across the parent ("P"), its sub-agent ("C") and, two
levels deep, the sub-agent's own sub-agent ("G"), and what each model request received.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from coordinator import Coordinator
from coordinator.chaos import crash
from coordinator.config import Config, LimitsConfig, TimeoutsConfig
from coordinator.errors import SessionBusy, SessionNotFound
from coordinator.models.base import ModelRequest
from coordinator.models.scripted import ScriptedModel
from coordinator.records import Rule
from tests.backends import db_for
from tests.conftest import Recorder, make_config, running
from tests.scenarios.test_stop_matrix import CountingModel
from tests.servers import group_gone

RULES = (Rule(action="*", resource="*", effect="allow"), Rule(action="shell", resource="*", effect="ask"))
TASK = {"tool_calls": [{"id": "call_task", "name": "task", "input": {"prompt": "look", "title": "helper"}}]}
SUB_TASK = {"tool_calls": [{"id": "call_sub", "name": "task", "input": {"prompt": "dig", "title": "digger"}}]}
SHELL = {"tool_calls": [{"id": "call_sh", "name": "shell", "input": {"command": "echo hi"}}]}
DONE = {"text": "parent done"}
CHILD_DONE = {"text": "child done"}

# The parent's events before its sub-agent's first step, and the sub-agent's up to its permission.
PARENT_START = [
    "P session.created",
    "P session.turn.started",
    "P session.step.started",
    "P session.tool.started",
]
CHILD_ASKS = [
    "C session.created",
    "C session.turn.started",
    "C session.step.started",
    "C session.tool.started",
    "C permission.asked",
]
CHILD_REVOKED = ["C permission.revoked", "C session.tool.failed", "C session.step.failed"]


def config_for(tmp_path: Path, **timeouts: float) -> Config:
    # No tool or step deadline unless a test sets one: the autojump clock jumps to the next deadline
    # whenever every task waits, also while a real ``echo hi`` runs, and on a loaded machine it
    # reached the tool's 120 s before the command ended (the call then failed as a timeout).
    timeouts = {"tool": 0, "step": 0, **timeouts}
    config = make_config(tmp_path, rules=RULES, timeouts=TimeoutsConfig(**timeouts))
    return attrs.evolve(config, limits=LimitsConfig(task_depth=3))


def model_of(script: dict[str, list[dict[str, Any]]]) -> CountingModel:
    return CountingModel(ScriptedModel.from_json(script))


def timeline(recorder: Recorder, top: str) -> list[str]:
    """Every event as "<who> <type>": P the session ``top``, C its sub-agents, G theirs."""
    labels = {top: "P"}
    for event in recorder.events:
        if event.type == "session.created":
            parent = event.payload["session"]["parent"]
            if parent is not None and parent["session_id"] in labels:
                labels[event.session_id or ""] = {"P": "C", "C": "G"}[labels[parent["session_id"]]]
    return [f"{labels[e.session_id or '']} {e.type}" for e in recorder.events if e.session_id in labels]


def child_id(recorder: Recorder, depth: int = 1) -> str:
    created = [e for e in recorder.of("session.created") if e.payload["session"]["parent"] is not None]
    return str(created[depth - 1].session_id)


def reason_of(recorder: Recorder, session_id: str, type: str) -> Any:
    return next(e.payload["reason"] for e in recorder.events if e.session_id == session_id and e.type == type)


def requests_of(model: CountingModel, session_id: str) -> list[ModelRequest]:
    return [r for r in model.requests if r.session_id == session_id]


def last_tool_result(request: ModelRequest) -> Any:
    return json.loads(request.messages[-1].content or "null")


async def start(coord: Coordinator, recorder: Recorder, wait_for: str, count: int = 1) -> str:
    session = await coord.create_session(title="parent")
    await coord.prompt(session.id, "delegate")
    await recorder.wait_for(wait_for, count)
    await trio.testing.wait_all_tasks_blocked()
    return session.id


async def test_a_task_call_runs_a_sub_agent_turn_and_returns_its_last_text(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """The model delegates and gets the sub-agent's id and answer back; the child is a session of its own."""
    model = model_of({"*": [TASK, DONE], "helper": [CHILD_DONE]})
    async with running(config_for(tmp_path), model=model) as (coord, recorder):
        parent = await start(coord, recorder, "session.idle", 2)
        child = child_id(recorder)
        assert timeline(recorder, parent) == [
            *PARENT_START,
            "C session.created",
            "C session.turn.started",
            "C session.step.started",
            "C session.step.succeeded",
            "C session.execution.succeeded",
            "C session.idle",
            "P session.tool.succeeded",
            "P session.step.succeeded",
            "P session.step.started",
            "P session.step.succeeded",
            "P session.execution.succeeded",
            "P session.idle",
        ]
        assert recorder.of("session.tool.succeeded")[0].payload["output"] == {
            "session_id": child,
            "text": "child done",
        }
        info = await coord.get_session(child)
        assert info.parent is not None and (info.parent.session_id, info.parent.call_id) == (
            parent,
            "call_task",
        )
        assert info.title == "helper" and info.last_outcome == "succeeded" and info.claim is None
        assert (await coord.get_session(parent)).parent is None
        (child_request,) = requests_of(model, child)
        assert [(m.role, m.content) for m in child_request.messages] == [("user", "look")]
        assert last_tool_result(requests_of(model, parent)[1]) == {"session_id": child, "text": "child done"}


async def test_the_model_comes_back_to_its_sub_agent_with_its_session_id(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """With session_id, a task call prompts the same sub-agent again, which remembers its earlier turn."""

    first = model_of({"*": [TASK, DONE], "helper": [CHILD_DONE]})
    async with running(config_for(tmp_path), model=first) as (coord, recorder):
        parent = await start(coord, recorder, "session.idle", 2)
    child = child_id(recorder)
    again = {
        "tool_calls": [{"id": "call_again", "name": "task", "input": {"prompt": "more", "session_id": child}}]
    }
    # Requests are counted per session: the parent's third and the sub-agent's second.
    model = model_of({"*": [TASK, DONE, again, DONE], "helper": [CHILD_DONE, {"text": "second answer"}]})
    async with running(config_for(tmp_path), model=model) as (coord, recorder):
        await coord.prompt(parent, "again")
        await recorder.wait_for("session.idle", 4)
        output = [e for e in recorder.of("session.tool.succeeded") if e.payload["call_id"] == "call_again"]
        assert output[0].payload["output"] == {"session_id": child, "text": "second answer"}
        (request,) = requests_of(model, child)
        assert [m.content for m in request.messages if m.role == "user"] == ["look", "more"]


async def test_a_session_id_that_is_not_a_sub_agent_of_this_session_fails_the_call(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A model must not drive any session it names: only its own sub-agents."""
    async with running(config_for(tmp_path), model=model_of({"*": [DONE]})) as (coord, recorder):
        stranger = await coord.create_session(title="stranger")
        call = {"id": "call_x", "name": "task", "input": {"prompt": "hi", "session_id": stranger.id}}
        model = model_of({"*": [{"tool_calls": [call]}, DONE]})
    async with running(config_for(tmp_path), model=model) as (coord, recorder):
        parent = await start(coord, recorder, "session.idle")
        failed = recorder.of("session.tool.failed")[0].payload
        assert failed["error"]["type"] == "error" and "not a sub-agent session" in failed["error"]["message"]
        assert (await coord.get_session(stranger.id)).last_outcome is None
        assert timeline(recorder, parent)[-3:] == [
            "P session.step.succeeded",
            "P session.execution.succeeded",
            "P session.idle",
        ]


async def test_an_interrupt_of_the_parent_stops_the_sub_agent_first_with_parent_on_its_reason(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """The child's wait is revoked with the parent's reason, and it settles before the task call fails."""
    model = model_of({"*": [TASK, DONE], "helper": [SHELL, CHILD_DONE]})
    async with running(config_for(tmp_path), model=model) as (coord, recorder):
        parent = await start(coord, recorder, "permission.asked")
        child = child_id(recorder)
        assert await coord.interrupt(parent, by="api")
        await recorder.wait_for("session.idle", 2)
        assert timeline(recorder, parent) == [
            *PARENT_START,
            *CHILD_ASKS,
            *CHILD_REVOKED,
            "C session.execution.interrupted",
            "C session.idle",
            "P session.tool.failed",
            "P session.step.failed",
            "P session.execution.interrupted",
            "P session.idle",
        ]
        from_parent = {
            "type": "interrupt",
            "by": "api",
            "parent": {"session_id": parent, "call_id": "call_task"},
        }
        assert recorder.of("permission.revoked")[0].payload["reason"] == from_parent
        assert reason_of(recorder, child, "session.execution.interrupted") == from_parent
        assert reason_of(recorder, parent, "session.execution.interrupted") == {
            "type": "interrupt",
            "by": "api",
        }
        failed = recorder.of("session.tool.failed")[-1].payload
        assert failed["error"]["type"] == "interrupted"
        # The child's id survives the stop, so the model (or a person) can come back to it.
        assert failed["partial"] == {"progress": {"session_id": child}}
        assert (await coord.get_session(child)).last_outcome == "interrupted"
        assert len(requests_of(model, parent)) == 1 and len(requests_of(model, child)) == 1
        assert await coord.pending_permissions() == []


async def test_a_sub_agent_declined_ends_its_parent_declined_via_task(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A person who rejects the sub-agent's tool meant to stop the work they asked for: the parent's too."""
    model = model_of({"*": [TASK, DONE], "helper": [SHELL, CHILD_DONE]})
    async with running(config_for(tmp_path), model=model) as (coord, recorder):
        parent = await start(coord, recorder, "permission.asked")
        child = child_id(recorder)
        request = recorder.of("permission.asked")[0].payload["request"]
        assert request["session_id"] == child
        await coord.reply_permission(child, request["id"], "reject")
        await recorder.wait_for("session.idle", 2)
        assert timeline(recorder, parent) == [
            *PARENT_START,
            *CHILD_ASKS,
            "C permission.replied",
            "C session.tool.failed",
            "C session.step.failed",
            "C session.execution.interrupted",
            "C session.idle",
            "P session.tool.failed",
            "P session.step.failed",
            "P session.execution.interrupted",
            "P session.idle",
        ]
        assert reason_of(recorder, child, "session.execution.interrupted") == {
            "type": "declined",
            "via": "permission",
            "call_id": "call_sh",
        }
        assert reason_of(recorder, parent, "session.execution.interrupted") == {
            "type": "declined",
            "via": "task",
            "call_id": "call_task",
        }
        assert recorder.of("session.tool.failed")[-1].payload["error"]["type"] == "declined"
        assert (await coord.get_session(parent)).last_outcome == "declined"
        assert len(requests_of(model, parent)) == 1


async def test_a_reject_with_a_message_in_the_sub_agent_is_feedback_to_it(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """Feedback stays inside the sub-agent: its model hears it, and the parent gets its answer."""
    model = model_of({"*": [TASK, DONE], "helper": [SHELL, CHILD_DONE]})
    async with running(config_for(tmp_path), model=model) as (coord, recorder):
        parent = await start(coord, recorder, "permission.asked")
        child = child_id(recorder)
        request = recorder.of("permission.asked")[0].payload["request"]
        await coord.reply_permission(child, request["id"], "reject", message="use ls instead")
        await recorder.wait_for("session.idle", 2)
        assert timeline(recorder, parent) == [
            *PARENT_START,
            *CHILD_ASKS,
            "C permission.replied",
            "C session.tool.failed",
            "C session.step.succeeded",
            "C session.step.started",
            "C session.step.succeeded",
            "C session.execution.succeeded",
            "C session.idle",
            "P session.tool.succeeded",
            "P session.step.succeeded",
            "P session.step.started",
            "P session.step.succeeded",
            "P session.execution.succeeded",
            "P session.idle",
        ]
        second = requests_of(model, child)[1]
        assert "use ls instead" in (second.messages[-1].content or "")
        assert last_tool_result(requests_of(model, parent)[1]) == {"session_id": child, "text": "child done"}


async def test_the_parents_turn_deadline_times_the_sub_agent_out_with_parent_on_its_reason(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """The parent's deadline covers its sub-agents' work: the child stops with it, first."""
    late_task = {**TASK, "delay": 10}  # the child's own turn deadline comes 10 s after the parent's
    model = model_of({"*": [late_task, DONE], "helper": [SHELL, CHILD_DONE]})
    async with running(config_for(tmp_path, turn=30), model=model) as (coord, recorder):
        parent = await start(coord, recorder, "session.idle", 2)
        child = child_id(recorder)
        assert timeline(recorder, parent) == [
            *PARENT_START,
            *CHILD_ASKS,
            *CHILD_REVOKED,
            "C session.execution.interrupted",
            "C session.idle",
            "P session.tool.failed",
            "P session.step.failed",
            "P session.execution.interrupted",
            "P session.idle",
        ]
        link = {"session_id": parent, "call_id": "call_task"}
        assert reason_of(recorder, child, "session.execution.interrupted") == {
            "type": "timeout",
            "scope": "turn",
            "after": 30.0,
            "parent": link,
        }
        assert recorder.of("session.tool.failed")[-1].payload["error"]["type"] == "timeout"
        assert (await coord.get_session(child)).last_outcome == "timed_out"
        assert (await coord.get_session(parent)).last_outcome == "timed_out"


async def test_a_timeout_inside_the_sub_agent_fails_only_the_task_call(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """The child's own deadline is its own stop: the parent's model hears of it and goes on."""
    model = model_of({"*": [TASK, DONE], "helper": [SHELL, CHILD_DONE]})
    async with running(config_for(tmp_path, permission=5), model=model) as (coord, recorder):
        parent = await start(coord, recorder, "session.idle", 2)
        child = child_id(recorder)
        assert timeline(recorder, parent) == [
            *PARENT_START,
            *CHILD_ASKS,
            *CHILD_REVOKED,
            "C session.execution.interrupted",
            "C session.idle",
            "P session.tool.failed",
            "P session.step.succeeded",
            "P session.step.started",
            "P session.step.succeeded",
            "P session.execution.succeeded",
            "P session.idle",
        ]
        assert reason_of(recorder, child, "session.execution.interrupted") == {
            "type": "timeout",
            "scope": "permission",
            "after": 5.0,
        }
        failed = recorder.of("session.tool.failed")[-1].payload
        assert failed["error"]["type"] == "timeout" and failed["partial"]["progress"] == {"session_id": child}
        heard = last_tool_result(requests_of(model, parent)[1])
        assert heard["error"]["type"] == "timeout" and child in json.dumps(heard)


async def test_a_clients_interrupt_of_the_sub_agent_fails_the_call_as_interrupted(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """Stopping a sub-agent from its own page stops that work only; the parent's model goes on."""
    model = model_of({"*": [TASK, DONE], "helper": [SHELL, CHILD_DONE]})
    async with running(config_for(tmp_path), model=model) as (coord, recorder):
        parent = await start(coord, recorder, "permission.asked")
        child = child_id(recorder)
        assert await coord.interrupt(child, by="api")
        await recorder.wait_for("session.idle", 2)
        assert timeline(recorder, parent) == [
            *PARENT_START,
            *CHILD_ASKS,
            *CHILD_REVOKED,
            "C session.execution.interrupted",
            "C session.idle",
            "P session.tool.failed",
            "P session.step.succeeded",
            "P session.step.started",
            "P session.step.succeeded",
            "P session.execution.succeeded",
            "P session.idle",
        ]
        assert reason_of(recorder, child, "session.execution.interrupted") == {
            "type": "interrupt",
            "by": "api",
        }
        assert recorder.of("session.tool.failed")[-1].payload["error"]["type"] == "interrupted"
        assert last_tool_result(requests_of(model, parent)[1])["error"]["type"] == "interrupted"


async def test_shutdown_suspends_both_and_the_restart_resumes_the_child_inside_the_call(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """Both resume exactly once; the child's request keeps its id; no model is asked twice."""
    config = config_for(tmp_path)
    script = {"*": [TASK, DONE], "helper": [SHELL, CHILD_DONE]}
    async with running(config, model=model_of(script)) as (coord, recorder):
        parent = await start(coord, recorder, "permission.asked")
        child = child_id(recorder)
    asked = recorder.of("permission.asked")[0].payload["request"]
    assert timeline(recorder, parent) == [
        *PARENT_START,
        *CHILD_ASKS,
        "C session.step.failed",
        "C session.execution.suspended",
        "P session.step.failed",
        "P session.execution.suspended",
    ]
    assert (await_info := stored_status(tmp_path, child)) == "suspended", await_info
    model = model_of({"*": [DONE], "helper": [CHILD_DONE]})
    async with running(config, model=model) as (coord, recorder):
        restored = await recorder.wait_for("permission.asked", 2)
        assert restored.payload["restored"] is True and restored.payload["request"]["id"] == asked["id"]
        assert [p.id for p in await coord.pending_permissions(parent)] == [asked["id"]]
        await coord.reply_permission(child, asked["id"], "once")
        await recorder.wait_for("session.idle", 2)
        after = timeline(recorder, parent)
        assert after[after.index("P session.execution.resumed") :] == [
            "P session.execution.resumed",
            "C session.execution.resumed",
            "C permission.asked",
            "C permission.replied",
            "C session.tool.succeeded",
            "C session.step.started",
            "C session.step.succeeded",
            "C session.execution.succeeded",
            "C session.idle",
            "P session.tool.succeeded",
            "P session.step.started",
            "P session.step.succeeded",
            "P session.execution.succeeded",
            "P session.idle",
        ]
        assert [e.payload["after"] for e in recorder.of("session.execution.resumed")] == [
            "shutdown",
            "shutdown",
        ]
        assert len(requests_of(model, parent)) == 1 and len(requests_of(model, child)) == 1


def stored_status(tmp_path: Path, session_id: str) -> str:
    from coordinator.store import open_read_view

    with open_read_view(db_for(tmp_path)) as reader:
        session = reader.get_session(session_id)
        assert session is not None
        return session.status


async def test_a_crash_resumes_parent_and_child_once_each_with_the_childs_request_kept(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """An abandoned coordinator writes nothing; the next start resumes both as a crash, child inside."""
    config = config_for(tmp_path)
    async with running(config, model=model_of({"*": [TASK, DONE], "helper": [SHELL, CHILD_DONE]})) as (
        coord,
        recorder,
    ):
        parent = await start(coord, recorder, "permission.asked")
        child = child_id(recorder)
        await crash(coord)
    asked = recorder.of("permission.asked")[0].payload["request"]
    model = model_of({"*": [DONE], "helper": [CHILD_DONE]})
    async with running(config, model=model) as (coord, recorder):
        restored = await recorder.wait_for("permission.asked", 2)
        assert restored.payload["request"]["id"] == asked["id"]
        await coord.reply_permission(child, asked["id"], "once")
        await recorder.wait_for("session.idle", 2)
        after = timeline(recorder, parent)
        assert after[after.index("P session.execution.resumed") :] == [
            "P session.execution.resumed",
            "P session.step.failed",
            "C session.execution.resumed",
            "C session.step.failed",
            "C permission.asked",
            "C permission.replied",
            "C session.tool.succeeded",
            "C session.step.started",
            "C session.step.succeeded",
            "C session.execution.succeeded",
            "C session.idle",
            "P session.tool.succeeded",
            "P session.step.started",
            "P session.step.succeeded",
            "P session.execution.succeeded",
            "P session.idle",
        ]
        assert [e.payload["after"] for e in recorder.of("session.execution.resumed")] == ["crash", "crash"]
        assert len(requests_of(model, parent)) == 1 and len(requests_of(model, child)) == 1


async def test_two_levels_deep_an_interrupt_settles_the_deepest_first(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """Children settle before parents at every level, each with `parent` naming its own task call."""
    model = model_of(
        {"*": [TASK, DONE], "helper": [SUB_TASK, CHILD_DONE], "digger": [SHELL, {"text": "dug"}]}
    )
    async with running(config_for(tmp_path), model=model) as (coord, recorder):
        parent = await start(coord, recorder, "permission.asked")
        child, grandchild = child_id(recorder, 1), child_id(recorder, 2)
        request = recorder.of("permission.asked")[0].payload["request"]
        assert request["session_id"] == grandchild
        assert [p.id for p in await coord.pending_permissions(parent)] == [request["id"]]
        assert await coord.interrupt(parent, by="api")
        await recorder.wait_for("session.idle", 3)
        assert timeline(recorder, parent) == [
            *PARENT_START,
            "C session.created",
            "C session.turn.started",
            "C session.step.started",
            "C session.tool.started",
            "G session.created",
            "G session.turn.started",
            "G session.step.started",
            "G session.tool.started",
            "G permission.asked",
            "G permission.revoked",
            "G session.tool.failed",
            "G session.step.failed",
            "G session.execution.interrupted",
            "G session.idle",
            "C session.tool.failed",
            "C session.step.failed",
            "C session.execution.interrupted",
            "C session.idle",
            "P session.tool.failed",
            "P session.step.failed",
            "P session.execution.interrupted",
            "P session.idle",
        ]
        assert reason_of(recorder, grandchild, "session.execution.interrupted")["parent"] == {
            "session_id": child,
            "call_id": "call_sub",
        }
        assert reason_of(recorder, child, "session.execution.interrupted")["parent"] == {
            "session_id": parent,
            "call_id": "call_task",
        }


async def test_a_task_call_deeper_than_the_limit_fails_with_type_error(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """`[limits] task_depth` bounds how deep sub-agents nest; the sub-agent's model hears the refusal."""
    config = attrs.evolve(config_for(tmp_path), limits=LimitsConfig(task_depth=1))
    model = model_of({"*": [TASK, DONE], "helper": [SUB_TASK, CHILD_DONE]})
    async with running(config, model=model) as (coord, recorder):
        parent = await start(coord, recorder, "session.idle", 2)
        child = child_id(recorder)
        assert timeline(recorder, parent) == [
            *PARENT_START,
            "C session.created",
            "C session.turn.started",
            "C session.step.started",
            "C session.tool.started",
            "C session.tool.failed",
            "C session.step.succeeded",
            "C session.step.started",
            "C session.step.succeeded",
            "C session.execution.succeeded",
            "C session.idle",
            "P session.tool.succeeded",
            "P session.step.succeeded",
            "P session.step.started",
            "P session.step.succeeded",
            "P session.execution.succeeded",
            "P session.idle",
        ]
        error = recorder.of("session.tool.failed")[0].payload["error"]
        assert error["type"] == "error" and "task_depth is 1" in error["message"]
        assert last_tool_result(requests_of(model, child)[1])["error"]["type"] == "error"


async def test_an_interrupt_of_the_parent_kills_the_sub_agents_command_before_the_call_fails(
    tmp_path: Path,
) -> None:
    """The seeds' server left a cancelled sub-agent's processes running: here they are killed and reaped
    as the child settles, before its parent's task call fails."""
    config = attrs.evolve(
        config_for(tmp_path),
        permission=(*RULES, Rule(action="shell", resource="exec sleep*", effect="allow")),
    )
    sleeper = {"tool_calls": [{"id": "call_sleep", "name": "shell", "input": {"command": "exec sleep 30"}}]}
    model = model_of({"*": [TASK, DONE], "helper": [sleeper, CHILD_DONE]})
    async with running(config, model=model) as (coord, recorder):
        session = await coord.create_session(title="parent")
        await coord.prompt(session.id, "delegate")
        await recorder.wait_for("session.tool.started", 2)
        child = child_id(recorder)
        with trio.fail_after(10):
            while (group := await _process_group(coord, child)) is None:  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert not group_gone(group.pgid)
        assert await coord.interrupt(session.id, by="api")
        await recorder.wait_for("session.idle", 2)
        assert group_gone(group.pgid)
        assert timeline(recorder, session.id)[4:] == [
            "C session.created",
            "C session.turn.started",
            "C session.step.started",
            "C session.tool.started",
            "C session.tool.failed",
            "C session.step.failed",
            "C session.execution.interrupted",
            "C session.idle",
            "P session.tool.failed",
            "P session.step.failed",
            "P session.execution.interrupted",
            "P session.idle",
        ]
        assert recorder.of("session.tool.failed")[0].payload["error"]["type"] == "interrupted"


async def test_deleting_a_session_deletes_its_sub_agents_and_is_refused_while_one_is_busy(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A sub-agent is part of its parent's work: deleted with it, and its live turn keeps both."""
    model = model_of({"*": [TASK, DONE], "helper": [SHELL, CHILD_DONE]})
    async with running(config_for(tmp_path), model=model) as (coord, recorder):
        parent = await start(coord, recorder, "permission.asked")
        child = child_id(recorder)
        for busy in (parent, child):
            with pytest.raises(SessionBusy):
                await coord.delete_session(busy)
        assert (await coord.get_session(child)).parent is not None
        asked = recorder.of("permission.asked")[0]
        await coord.reply_permission(child, asked.payload["request"]["id"], "once")
        await recorder.wait_for("session.idle", 2)
        await coord.delete_session(parent)
        for gone in (parent, child):
            with pytest.raises(SessionNotFound):
                await coord.get_session(gone)
        assert await coord.pending_permissions() == []


async def _process_group(coord: Any, session_id: str) -> Any:
    return await coord.store.read(lambda reader: reader.process_group_of(session_id, "call_sleep"))
