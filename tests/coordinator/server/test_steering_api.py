"""Steering, the queue, soft stops and edited approvals over HTTP, against a real server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from coordinator import errors
from tests.coordinator.server.harness import SHELL_CALL, Api, running_api, server_config
from tests.model_server import Text, serve_model


async def _waiting(api: Api) -> tuple[str, str, str]:
    session = await api.client.create_session(title="t")
    turn_id = await api.client.prompt(session.id, "say hi")
    asked = await api.log.wait_for("permission.asked", session.id)
    return session.id, turn_id, asked["request"]["id"]


async def _post(api: Api, path: str, body: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=api.listening.url) as http:
        return await http.post(path, json=body)


async def test_a_steer_over_http(tmp_path: Path) -> None:
    async with serve_model([SHELL_CALL, Text(text="done")]) as mock:
        async with running_api(server_config(tmp_path, mock), mock) as api:
            sid, turn_id, request_id = await _waiting(api)
            answer = await _post(api, f"/api/session/{sid}/prompt", {"text": "and bye", "mode": "steer"})
            assert answer.status_code == 202
            body = answer.json()
            assert body["turn_id"] == turn_id and body["steer_id"].startswith("steer")
            mismatch = await _post(
                api,
                f"/api/session/{sid}/prompt",
                {"text": "x", "mode": "steer", "expected_turn_id": "turn_x"},
            )
            assert mismatch.status_code == 409
            error = mismatch.json()["error"]
            assert error["name"] == "TurnMismatch" and error["running_turn_id"] == turn_id
            await api.client.reply_permission(sid, request_id, "once")
            await api.log.wait_for("session.idle", sid)
            steered = api.log.of("session.turn.steered", sid)[0]
            assert {k: steered[k] for k in ("turn_id", "steer_id", "text")} == {
                "turn_id": turn_id,
                "steer_id": body["steer_id"],
                "text": "and bye",
            }
            # The model was sent the steer once, as the last message of its next request.
            last = mock.requests[-1]["messages"]
            assert last[-1] == {"role": "user", "content": "and bye"}
            assert sum(m.get("content") == "and bye" for m in last) == 1


async def test_the_queue_over_http(tmp_path: Path) -> None:
    async with serve_model([SHELL_CALL, Text(text="done")]) as mock:
        async with running_api(server_config(tmp_path, mock), mock) as api:
            sid, turn_id, _ = await _waiting(api)
            second = await api.client.prompt(sid, "second")
            async with httpx.AsyncClient(base_url=api.listening.url) as http:
                listed = await http.get(f"/api/session/{sid}/turn", params={"status": "queued"})
                assert listed.status_code == 200
                [queued] = listed.json()
                assert set(queued) == {"turn_id", "text", "created_at"}
                assert (queued["turn_id"], queued["text"]) == (second, "second")
                assert (
                    await http.get(f"/api/session/{sid}/turn", params={"status": "running"})
                ).status_code == 400
                assert (await http.delete(f"/api/session/{sid}/turn/{second}")).status_code == 204
                again = await http.delete(f"/api/session/{sid}/turn/{second}")
                assert again.status_code == 409 and again.json()["error"]["name"] == "TurnNotQueued"
                running = await http.delete(f"/api/session/{sid}/turn/{turn_id}")
                assert running.status_code == 409
                unknown = await http.delete(f"/api/session/{sid}/turn/turn_nope")
                assert unknown.status_code == 404 and unknown.json()["error"]["name"] == "TurnNotFound"
            await api.log.wait_for("session.turn.cancelled", sid)
            assert await api.client.queued_turns(sid) == []
            with pytest.raises(errors.TurnNotQueued):
                await api.client.cancel_turn(sid, second)


async def test_a_soft_stop_and_a_queue_cancel_over_http(tmp_path: Path) -> None:
    async with serve_model([SHELL_CALL, Text(text="done")]) as mock:
        async with running_api(server_config(tmp_path, mock), mock) as api:
            sid, _, request_id = await _waiting(api)
            queued = await api.client.prompt(sid, "later")
            answer = await _post(
                api, f"/api/session/{sid}/interrupt", {"when": "after_step", "queued": "cancel"}
            )
            assert answer.status_code == 200 and answer.json() == {"interrupted": True}
            assert api.log.of("session.turn.cancelled", sid) or await api.log.wait_for(
                "session.turn.cancelled", sid
            )
            await api.client.reply_permission(sid, request_id, "once")
            await api.log.wait_for("session.idle", sid)
            terminal = api.log.of("session.execution.interrupted", sid)[0]
            assert terminal["reason"] == {"type": "interrupt", "by": "api", "soft": True}
            assert api.log.of("session.turn.cancelled", sid)[0]["turn_id"] == queued
            assert len(mock.requests) == 1
            bad = await _post(api, f"/api/session/{sid}/interrupt", {"when": "later"})
            assert bad.status_code == 400
            plain = await _post(api, f"/api/session/{sid}/interrupt", None)
            assert plain.status_code == 200 and plain.json() == {"interrupted": False}


async def test_an_edited_approval_over_http(tmp_path: Path) -> None:
    async with serve_model([SHELL_CALL, Text(text="done")]) as mock:
        async with running_api(server_config(tmp_path, mock), mock) as api:
            sid, _, request_id = await _waiting(api)
            path = f"/api/session/{sid}/permission/{request_id}/reply"
            invalid = await _post(api, path, {"decision": "once", "input": {"command": 1}})
            assert invalid.status_code == 400 and invalid.json()["error"]["name"] == "InvalidInput"
            answer = await _post(api, path, {"decision": "once", "input": {"command": "echo edited"}})
            assert answer.status_code == 200
            assert answer.json()["request"]["input"] == {"command": "echo edited"}
            await api.log.wait_for("session.idle", sid)
            replied = api.log.of("permission.replied", sid)[0]
            assert replied["input"] == {"command": "echo edited"}
            tool = next(m for m in mock.requests[-1]["messages"] if m["role"] == "tool")
            assert "edited" in tool["content"] and '{"command":"echo edited"}' in tool["content"]


@pytest.mark.parametrize(
    "body", [0, [], "text", {"text": "x", "mode": "later"}, {"text": "x", "extra": 1}, {"mode": "steer"}]
)
async def test_a_prompt_body_the_schema_refuses_is_refused(tmp_path: Path, body: Any) -> None:
    async with serve_model([Text(text="done")]) as mock:
        async with running_api(server_config(tmp_path, mock), mock) as api:
            session = await api.client.create_session(title="t")
            answer = await _post(api, f"/api/session/{session.id}/prompt", body)
            assert answer.status_code == 400 and answer.json()["error"]["name"] == "InvalidRequest"
