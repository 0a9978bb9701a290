"""Sub-agent sessions over HTTP: `parent` on sessions, the child's requests in the
parent's pending lists, and `?descendants=true` on the session's event stream."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import httpx
import trio

from coordinator.config import ModelConfig
from tests.coordinator.server.harness import EventLog, server_config, serving

TASK = {"tool_calls": [{"id": "call_task", "name": "task", "input": {"prompt": "look", "title": "helper"}}]}
SHELL = {"tool_calls": [{"id": "call_sh", "name": "shell", "input": {"command": "echo hi"}}]}
SCRIPT = {"*": [TASK, {"text": "parent done"}], "helper": [SHELL, {"text": "child done"}]}


async def test_a_sub_agents_request_is_listed_and_answered_and_streamed_with_its_parent(
    tmp_path: Path,
) -> None:
    """A person watching the parent must see the child's request, answer it, and see the child's events."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    config = attrs.evolve(server_config(tmp_path), model=ModelConfig(provider="scripted", script=str(script)))
    async with serving(config) as listening, httpx.AsyncClient(base_url=listening.url) as http:
        parent = (await http.post("/api/session", json={"title": "parent"})).json()
        family, alone = EventLog(), EventLog()
        async with trio.open_nursery() as nursery:
            path = f"/api/session/{parent['id']}/event"
            nursery.start_soon(family.follow_once, listening.url, path + "?descendants=true")
            nursery.start_soon(alone.follow_once, listening.url, path)
            await family.wait_for("session.created", count=1)
            assert (
                await http.post(f"/api/session/{parent['id']}/prompt", json={"text": "go"})
            ).status_code == 202
            asked = (await family.wait_for("permission.asked"))["request"]
            child_id = asked["session_id"]
            assert child_id != parent["id"]
            child = (await http.get(f"/api/session/{child_id}")).json()
            assert child["parent"] == {"session_id": parent["id"], "call_id": "call_task"}
            assert child["title"] == "helper" and child["status"] == "busy"
            assert (await http.get(f"/api/session/{parent['id']}")).json()["parent"] is None
            listed = [s["id"] for s in (await http.get("/api/session")).json()]
            assert listed == [child_id, parent["id"]]
            assert (await http.get(f"/api/session/{parent['id']}/permission")).json() == [asked]
            assert (await http.get(f"/api/session/{child_id}/permission")).json() == [asked]
            assert (await http.get("/api/permission")).json() == [asked]
            assert (await http.get(f"/api/session/{parent['id']}/form")).json() == []
            reply = await http.post(
                f"/api/session/{child_id}/permission/{asked['id']}/reply", json={"decision": "once"}
            )
            assert reply.status_code == 200
            await family.wait_for("session.idle", session_id=parent["id"])
            await alone.wait_for("session.idle", session_id=parent["id"])
            nursery.cancel_scope.cancel()
        stored = await http.get(
            f"/api/session/{parent['id']}/event", params={"follow": "false", "descendants": "true"}
        )
        every = await http.get("/api/event", params={"follow": "false"})
    assert {e["session_id"] for e in family.events} == {parent["id"], child_id}
    assert alone.events == [e for e in family.events if e["session_id"] == parent["id"]]
    assert [e["seq"] for e in family.events] == sorted(e["seq"] for e in family.events)
    assert [(e["session_id"], e["type"]) for e in family.events] == [
        (parent["id"], "session.created"),
        (parent["id"], "session.turn.started"),
        (parent["id"], "session.step.started"),
        (parent["id"], "session.tool.started"),
        (child_id, "session.created"),
        (child_id, "session.turn.started"),
        (child_id, "session.step.started"),
        (child_id, "session.tool.started"),
        (child_id, "permission.asked"),
        (child_id, "permission.replied"),
        (child_id, "session.tool.succeeded"),
        (child_id, "session.step.succeeded"),
        (child_id, "session.step.started"),
        (child_id, "session.step.succeeded"),
        (child_id, "session.execution.succeeded"),
        (child_id, "session.idle"),
        (parent["id"], "session.tool.succeeded"),
        (parent["id"], "session.step.succeeded"),
        (parent["id"], "session.step.started"),
        (parent["id"], "session.step.succeeded"),
        (parent["id"], "session.execution.succeeded"),
        (parent["id"], "session.idle"),
    ]
    frames = [
        json.loads(line[len("data: ") :]) for line in stored.text.splitlines() if line.startswith("data: ")
    ]
    assert frames == family.events
    everything = [json.loads(line[6:]) for line in every.text.splitlines() if line.startswith("data: ")]
    assert frames == everything
