"""Sub-agent sessions under real restarts: a `coordinator serve` process stopped with
SIGTERM or killed with `kill -9` while its sub-agent waits for a person, restarted on the same
database. Both sessions resume exactly once, the child inside the parent's task call, and the child's
request keeps its id; the mock model counts what each session asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.model_server import Call, Reply, Text, ToolCalls
from tests.scenarios.test_restarts_process import NOTE, site, stop
from tests.servers import stored_session

pytestmark = pytest.mark.slow

TASK = ToolCalls(calls=(Call(id="call_task", name="task", input={"prompt": "look", "title": "helper"}),))
SHELL = ToolCalls(calls=(Call(id="call_sh", name="shell", input={"command": "echo hi"}),))


def is_child(body: dict[str, Any]) -> bool:
    return body["messages"][0]["content"] == "look"


def reply(index: int, body: dict[str, Any]) -> Reply:
    """The parent delegates, the child asks to run a command; each answers once it has a result."""
    last = body["messages"][-1]
    if last["role"] == "tool" or NOTE in (last.get("content") or ""):
        return Text(text="child done" if is_child(body) else "parent done")
    return SHELL if is_child(body) else TASK


@pytest.mark.parametrize("how", ["sigterm", "kill"])
async def test_a_restart_resumes_parent_and_child_once_each_with_the_childs_request_kept(
    tmp_path: Path, how: str
) -> None:
    """After either stop, the next start resumes the parent, whose task call resumes the child."""
    async with site(tmp_path, reply) as s:
        async with s.running("first") as first:
            parent = (await first.client.create_session(title="parent")).id
            await first.client.prompt(parent, "go")
            asked = (await first.log.wait_for("permission.asked"))["request"]
            child = asked["session_id"]
            await stop(first, how)
            if how == "sigterm":
                await first.log.wait_for("session.execution.suspended", parent)
        assert stored_session(s.db, child).status == ("suspended" if how == "sigterm" else "busy")
        assert [is_child(r) for r in s.mock.requests] == [False, True]
        async with s.running("second") as second:
            restored = await second.log.wait_for("permission.asked", child, count=2)
            assert restored["restored"] is True and restored["request"]["id"] == asked["id"]
            assert [r.id for r in await second.client.pending_permissions(parent)] == [asked["id"]]
            await second.client.reply_permission(child, asked["id"], "once")
            await second.log.wait_for("session.idle", parent)
            after = "shutdown" if how == "sigterm" else "crash"
            resumed = second.log.of("session.execution.resumed")
            assert [(e["session_id"], e["after"]) for e in resumed] == [(parent, after), (child, after)]
            assert (
                second.types(child)[-8:]
                == [
                    "session.execution.resumed",
                    *(["session.step.failed"] if how == "kill" else []),
                    "permission.asked",
                    "permission.replied",
                    "session.tool.succeeded",
                    "session.step.started",
                    "session.step.succeeded",
                    "session.execution.succeeded",
                    "session.idle",
                ][-8:]
            )
            output = second.log.of("session.tool.succeeded", parent)[0]["output"]
            assert output == {"session_id": child, "text": "child done"}
            assert second.types(parent)[-4:] == [
                "session.step.started",
                "session.step.succeeded",
                "session.execution.succeeded",
                "session.idle",
            ]
            # Each session asked the model once more, after the restart, and nothing twice.
            assert [is_child(r) for r in s.mock.requests] == [False, True, True, False]
            await stop(second, "sigterm")
        async with s.running("third") as third:
            assert third.server.logged("coordinator_started")[0]["recovered"] == 0
            assert (await third.client.get_session(child)).last_outcome == "succeeded"
