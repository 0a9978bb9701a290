"""Principals: a server shared by a team, where nobody sees or answers someone else's session.

Two users and an admin against a real server, on both stores: each sees only its own sessions in
every list and stream; every route with another's ids answers 404, exactly as for ids that never
existed, and changes nothing; a decision records who made it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from coordinator.client import CoordinatorClient
from coordinator.config import PrincipalConfig
from coordinator.store import open_read_view
from tests.conftest import running
from tests.coordinator.server.harness import SHELL_CALL, server_config, serving, then_done
from tests.model_server import Text, serve_model

TOKENS = {"ada": "ada-secret", "bob": "bob-secret", "root": "root-secret"}
ROLES = {"ada": "user", "bob": "user", "root": "admin"}


def _principals() -> tuple[PrincipalConfig, ...]:
    return tuple(
        PrincipalConfig(name=name, token_sha256=hashlib.sha256(token.encode()).hexdigest(), role=ROLES[name])  # type: ignore[arg-type]
        for name, token in TOKENS.items()
    )


def _as(url: str, who: str) -> httpx.AsyncClient:
    token = TOKENS.get(who, who)
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=15)


async def _events(http: httpx.AsyncClient, path: str = "/api/event") -> list[dict[str, Any]]:
    text = (await http.get(path, params={"follow": "false"})).text
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


async def _asked(http: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    with trio.fail_after(15):
        while not (pending := (await http.get(f"/api/session/{sid}/permission")).json()):  # noqa: ASYNC110 (another process answers)
            await trio.sleep(0.02)
    request: dict[str, Any] = pending[0]
    return request


def _store(db: str) -> tuple[int, list[str]]:
    with open_read_view(db) as reader:
        events = reader.events_after(0, limit=100_000)
        sessions = reader.list_sessions()
    return len(events), [f"{s.id}:{s.status}:{s.last_outcome}" for s in sessions]


async def test_each_principal_sees_and_answers_only_its_own_sessions(tmp_path: Path) -> None:
    async with serve_model(then_done(SHELL_CALL)) as mock:
        config = attrs.evolve(server_config(tmp_path, mock), principal=_principals())
        async with serving(config) as listening:
            url = listening.url
            async with _as(url, "ada") as ada, _as(url, "bob") as bob, _as(url, "root") as root:
                a = (await ada.post("/api/session", json={"title": "ada's"})).json()
                b = (await bob.post("/api/session", json={"title": "bob's"})).json()
                assert (a["owner"], b["owner"]) == ("ada", "bob")
                await ada.post(f"/api/session/{a['id']}/prompt", json={"text": "go"})
                await bob.post(f"/api/session/{b['id']}/prompt", json={"text": "go"})
                a_request, b_request = await _asked(ada, a["id"]), await _asked(bob, b["id"])

                # Lists and streams: one's own only; the admin sees all.
                assert [s["id"] for s in (await ada.get("/api/session")).json()] == [a["id"]]
                assert [s["id"] for s in (await bob.get("/api/session")).json()] == [b["id"]]
                assert {s["id"] for s in (await root.get("/api/session")).json()} == {a["id"], b["id"]}
                assert [r["id"] for r in (await ada.get("/api/permission")).json()] == [a_request["id"]]
                assert {e["session_id"] for e in await _events(ada)} == {a["id"]}
                assert {e["session_id"] for e in await _events(root)} == {a["id"], b["id"]}
                assert (await ada.get("/api/node")).status_code == 403
                assert (await ada.get("/metrics")).json()["error"]["name"] == "Forbidden"
                assert (await root.get("/api/node")).status_code == 200
                assert (await root.get("/metrics")).status_code == 200

                # Every route with bob's ids under ada's token: 404 as for ids never made; nothing changes.
                before = _store(config.server.db)
                bid, rid = b["id"], b_request["id"]
                attempts = [
                    ("GET", f"/api/session/{bid}", None),
                    ("DELETE", f"/api/session/{bid}", None),
                    ("POST", f"/api/session/{bid}/prompt", {"text": "hijack"}),
                    ("POST", f"/api/session/{bid}/prompt", {"text": "steer", "mode": "steer"}),
                    ("POST", f"/api/session/{bid}/interrupt", None),
                    ("POST", f"/api/session/{bid}/resume", None),
                    ("GET", f"/api/session/{bid}/message", None),
                    ("GET", f"/api/session/{bid}/permission", None),
                    ("POST", f"/api/session/{bid}/permission/{rid}/reply", {"decision": "once"}),
                    ("GET", f"/api/session/{bid}/form", None),
                    ("GET", f"/api/session/{bid}/turn", None),
                    ("DELETE", f"/api/session/{bid}/turn/turn_x", None),
                    ("GET", f"/api/session/{bid}/event?follow=false", None),
                ]
                for method, path, body in attempts:
                    theirs = await ada.request(method, path, json=body)
                    never = await ada.request(method, path.replace(bid, "ses_never_made"), json=body)
                    assert theirs.status_code == never.status_code == 404, (method, path, theirs.text)
                    assert theirs.json() == {
                        "error": {
                            **never.json()["error"],
                            "message": f"no session {bid!r}",
                            "session_id": bid,
                        }
                    }, (method, path)
                assert _store(config.server.db) == before

                # A decision records who made it; an interrupt's reason names its principal.
                await ada.post(
                    f"/api/session/{a['id']}/permission/{a_request['id']}/reply", json={"decision": "once"}
                )
                assert (await bob.post(f"/api/session/{b['id']}/interrupt")).json() == {"interrupted": True}
                with trio.fail_after(15):
                    while len([e for e in await _events(root) if e["type"] == "session.idle"]) < 2:  # noqa: ASYNC110
                        await trio.sleep(0.05)
                stored = await _events(root)
                [replied] = [e for e in stored if e["type"] == "permission.replied"]
                assert (replied["request_id"], replied["by"]) == (a_request["id"], "ada")
                [stopped] = [e for e in stored if e["type"] == "session.execution.interrupted"]
                assert stopped["reason"] == {"type": "interrupt", "by": "api", "principal": "bob"}

                # A token of no principal is refused.
                async with _as(url, "nobody") as nobody:
                    assert (await nobody.get("/api/session")).status_code == 401


async def test_the_server_token_is_an_admin_and_a_sub_agent_belongs_to_its_parents_owner(
    tmp_path: Path,
) -> None:
    task = {
        "tool_calls": [{"id": "call_task", "name": "task", "input": {"prompt": "look", "title": "helper"}}]
    }
    script = {"*": [task, {"text": "parent done"}], "helper": [{"text": "child done"}]}
    config = attrs.evolve(server_config(tmp_path, token="the-token"), principal=_principals())
    async with running(config, script) as (coord, recorder):
        parent = await coord.create_session(title="parent", owner="ada")
        await coord.prompt(parent.id, "delegate")
        await recorder.wait_for("session.idle", 2)
        sessions = {s.title: s for s in await coord.list_sessions()}
        assert (sessions["parent"].owner, sessions["helper"].owner) == ("ada", "ada")
    async with (
        serving(config) as listening,
        _as(listening.url, "the-token") as admin,
        _as(listening.url, "ada") as ada,
    ):
        assert len((await admin.get("/api/session")).json()) == 2
        assert (await admin.get("/api/node")).status_code == 200
        assert {s["title"] for s in (await ada.get("/api/session")).json()} == {"parent", "helper"}
        async with _as(listening.url, "bob") as bob:
            assert (await bob.get("/api/session")).json() == []


async def test_a_users_live_stream_never_carries_anothers_events_deltas_included(tmp_path: Path) -> None:
    """Followed live with deltas while both sessions stream: ada's stream has ada's session only."""
    async with serve_model(then_done(Text(text="streamed words " * 20, chunk_delay=0.01))) as mock:
        config = attrs.evolve(server_config(tmp_path, mock), principal=_principals())
        async with serving(config) as listening, CoordinatorClient(listening.url, TOKENS["ada"]) as ada:
            seen: list[dict[str, Any]] = []

            async def follow() -> None:
                async for event in ada.events(after=0, deltas=True):
                    seen.append(event)

            async with trio.open_nursery() as nursery, _as(listening.url, "bob") as bob:
                nursery.start_soon(follow)
                mine = await ada.create_session(title="ada's")
                theirs = (await bob.post("/api/session", json={"title": "bob's"})).json()
                await bob.post(f"/api/session/{theirs['id']}/prompt", json={"text": "go"})
                await ada.prompt(mine.id, "go")
                with trio.fail_after(15):
                    while not any(e["type"] == "session.idle" for e in seen):  # noqa: ASYNC110
                        await trio.sleep(0.02)
                    async with _as(listening.url, "root") as root:
                        while len([e for e in await _events(root) if e["type"] == "session.idle"]) < 2:  # noqa: ASYNC110
                            await trio.sleep(0.02)
                await trio.sleep(0.2)
                nursery.cancel_scope.cancel()
            assert any(e["type"] == "session.text.delta" for e in seen)
            assert {e["session_id"] for e in seen} == {mine.id}
