"""The HTTP API against a real server on 127.0.0.1: every route, the reported seeds, errors and auth."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from coordinator import errors
from coordinator.client import CoordinatorClient
from coordinator.config import Config
from coordinator.metrics import Metrics
from coordinator.server.app import OPERATIONS, build_app
from coordinator.server.schema import Validator
from tests.coordinator.server.harness import (
    SHELL_CALL,
    Api,
    hypercorn_app,
    running_api,
    server_config,
    serving,
)
from tests.model_server import serve_model

DECLINED_SEQUENCE = [
    "session.created",
    "session.turn.started",
    "session.step.started",
    "session.tool.started",
    "permission.asked",
    "permission.replied",
    "session.tool.failed",
    "session.step.failed",
    "session.execution.interrupted",
    "session.idle",
]


async def _pending_request(api: Api, title: str = "t") -> tuple[str, dict[str, Any]]:
    """A new session whose turn waits on a permission request: (session id, the request)."""
    session = await api.client.create_session(title=title)
    await api.client.prompt(session.id, "say hi")
    asked = await api.log.wait_for("permission.asked", session.id)
    return session.id, asked["request"]


async def test_seed_000_reject_is_a_declined_stop_that_a_restart_never_resumes(tmp_path: Path) -> None:
    """Seed 000 as reported: a reject over HTTP must end the turn as declined, not as a resumable stop."""
    async with serve_model([SHELL_CALL]) as mock:
        config = server_config(tmp_path, mock)
        async with running_api(config, mock) as api:
            session_id, request = await _pending_request(api, title="seed 000")
            replied = await api.client.reply_permission(session_id, request["id"], "reject")
            assert replied.status == "replied" and replied.decision == "reject"
            await api.log.wait_for("session.idle", session_id)
            assert api.log.types(session_id) == DECLINED_SEQUENCE
            terminal = api.log.of("session.execution.interrupted")[0]
            assert terminal["reason"] == {"type": "declined", "via": "permission", "call_id": "call_shell"}
            assert api.log.of("session.idle")[0]["outcome"] == "declined"
            info = await api.client.get_session(session_id)
            assert (info.status, info.claim, info.last_outcome) == ("idle", None, "declined")
        assert len(mock.requests) == 1
        async with serving(config) as listening, CoordinatorClient(listening.url) as client:
            # Let anything a wrong recovery would start run: the model request it would send is local.
            await trio.testing.wait_all_tasks_blocked(cushion=0.1)
            info = await client.get_session(session_id)
            assert (info.status, info.claim, info.last_outcome) == ("idle", None, "declined")
            stored = [event["type"] async for event in client.events(follow=False)]
        assert "session.execution.resumed" not in stored
        assert stored == DECLINED_SEQUENCE
        assert len(mock.requests) == 1


async def test_seed_003_interrupt_revokes_the_pending_request_and_a_late_reply_is_409(shell_api: Api) -> None:
    """Seed 003 as reported: a reply after an interrupt must say how the request was settled, never 404."""
    api = shell_api
    session_id, request = await _pending_request(api)
    assert await api.client.interrupt(session_id) is True
    assert await api.client.interrupt(session_id) is False
    revoked = await api.log.wait_for("permission.revoked", session_id)
    assert revoked["request_id"] == request["id"]
    assert revoked["reason"] == {"type": "interrupt", "by": "api"}
    await api.log.wait_for("session.idle", session_id)
    assert api.log.types(session_id)[4:] == [
        "permission.asked",
        "permission.revoked",
        "session.tool.failed",
        "session.step.failed",
        "session.execution.interrupted",
        "session.idle",
    ]
    assert await api.client.pending_permissions(session_id) == []
    assert await api.client.pending_permissions() == []
    with pytest.raises(errors.PermissionAlreadySettled) as caught:
        await api.client.reply_permission(session_id, request["id"], "once")
    assert caught.value.request_id == request["id"]
    assert caught.value.settlement == {"status": "revoked", "reason": {"type": "interrupt", "by": "api"}}
    raw = await _raw(
        api, "POST", f"/api/session/{session_id}/permission/{request['id']}/reply", b'{"decision":"once"}'
    )
    assert raw.status_code == 409
    assert raw.json()["error"]["name"] == "PermissionAlreadySettled"
    info = await api.client.get_session(session_id)
    assert (info.status, info.claim, info.last_outcome) == ("idle", None, "interrupted")
    assert await api.client.interrupt(session_id) is False


async def test_a_reply_to_a_request_never_issued_is_404(shell_api: Api) -> None:
    """An unknown request id, or one of another session, is "not found", unlike a settled one."""
    api = shell_api
    session_id, request = await _pending_request(api)
    other = await api.client.create_session(title="other")
    with pytest.raises(errors.PermissionNotFound) as caught:
        await api.client.reply_permission(session_id, "per_never_issued", "once")
    assert caught.value.request_id == "per_never_issued"
    with pytest.raises(errors.PermissionNotFound):
        await api.client.reply_permission(other.id, request["id"], "once")
    assert [r.id for r in await api.client.pending_permissions(session_id)] == [request["id"]]


async def test_of_two_concurrent_replies_exactly_one_wins(shell_api: Api) -> None:
    """Two people answering at once must not both decide: one 200, the other 409 with the settlement."""
    api = shell_api
    session_id, request = await _pending_request(api)
    outcomes: list[Any] = []

    async def reply() -> None:
        try:
            outcomes.append(await api.client.reply_permission(session_id, request["id"], "reject"))
        except errors.PermissionAlreadySettled as exc:
            outcomes.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reply)
        nursery.start_soon(reply)
    won = [o for o in outcomes if not isinstance(o, Exception)]
    lost = [o for o in outcomes if isinstance(o, errors.PermissionAlreadySettled)]
    assert len(won) == 1 and len(lost) == 1
    assert lost[0].settlement == {"status": "replied", "decision": "reject"}
    await api.log.wait_for("session.idle", session_id)
    assert len(api.log.of("permission.replied")) == 1


async def test_session_routes_answer_as_the_contract_says(done_api: Api) -> None:
    """Create, list, get, prompt (202), interrupt when idle, and the history after a whole turn."""
    api = done_api
    created = await _raw(api, "POST", "/api/session", b'{"title": "first"}')
    assert created.status_code == 201
    session = created.json()
    assert set(session) == {"id", "title", "status", "claim", "last_outcome", "created_at", "parent"}
    assert (session["title"], session["status"], session["claim"], session["last_outcome"]) == (
        "first",
        "idle",
        None,
        None,
    )
    assert session["parent"] is None
    untitled = await _raw(api, "POST", "/api/session", b"")
    assert untitled.status_code == 201 and untitled.json()["title"] == ""
    listed = await api.client.list_sessions()
    assert [s.id for s in listed] == [untitled.json()["id"], session["id"]]  # newest first
    assert (await api.client.get_session(session["id"])).title == "first"
    assert await api.client.interrupt(session["id"]) is False

    prompted = await _raw(api, "POST", f"/api/session/{session['id']}/prompt", b'{"text": "say hi"}')
    assert prompted.status_code == 202
    turn_id = prompted.json()["turn_id"]
    asked = await api.log.wait_for("permission.asked", session["id"])
    pending = await api.client.pending_permissions()
    assert [r.id for r in pending] == [asked["request"]["id"]]
    assert pending[0].action == "shell" and pending[0].resource == "echo hi"
    replied = await _raw(
        api,
        "POST",
        f"/api/session/{session['id']}/permission/{asked['request']['id']}/reply",
        b'{"decision":"once"}',
    )
    assert replied.status_code == 200
    assert replied.json()["request"]["status"] == "replied"
    idle = await api.log.wait_for("session.idle", session["id"])
    assert idle == {**idle, "turn_id": turn_id, "outcome": "succeeded"}

    history = await _raw(api, "GET", f"/api/session/{session['id']}/message")
    assert history.status_code == 200
    messages = history.json()
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant"]
    assert messages[0]["parts"] == [{"type": "text", "text": "say hi", "status": "complete"}]
    tool = messages[1]["parts"][-1]
    assert (tool["type"], tool["name"], tool["state"]) == ("tool", "shell", "succeeded")
    assert tool["output"]["exit_code"] == 0 and tool["output"]["stdout"].strip() == "hi"
    assert messages[2]["parts"] == [{"type": "text", "text": "done", "status": "complete"}]
    assert [m.role for m in await api.client.history(session["id"])] == ["user", "assistant", "assistant"]


async def test_form_routes_submit_dismiss_and_settle(form_api: Api) -> None:
    """A form is answered once; a second answer is 409 with how it was settled; dismissals stop or not."""
    api = form_api
    session = await api.client.create_session(title="form")
    await api.client.prompt(session.id, "ask me")
    asked = await api.log.wait_for("form.asked", session.id)
    form_id = asked["form"]["id"]
    pending = await api.client.pending_forms(session.id)
    assert [f.id for f in pending] == [form_id]
    assert [q.id for q in pending[0].questions] == ["q1"]
    with pytest.raises(errors.InvalidRequest):
        await api.client.submit_form(session.id, form_id, {"q1": "maybe"})
    with pytest.raises(errors.FormNotFound) as not_found:
        await api.client.submit_form(session.id, "frm_never_issued", {"q1": "yes"})
    assert not_found.value.form_id == "frm_never_issued"
    submitted = await api.client.submit_form(session.id, form_id, {"q1": "yes"})
    assert (submitted.status, submitted.answers) == ("submitted", {"q1": "yes"})
    with pytest.raises(errors.FormAlreadySettled) as settled:
        await api.client.submit_form(session.id, form_id, {"q1": "no"})
    assert settled.value.settlement == {"status": "submitted"}
    assert (await api.log.wait_for("session.idle", session.id))["outcome"] == "succeeded"

    await api.client.prompt(session.id, "ask again")
    second = (await api.log.wait_for("form.asked", session.id, count=2))["form"]["id"]
    feedback = await api.client.dismiss_form(session.id, second, message="not now")
    assert feedback.status == "cancelled"
    assert (await api.log.wait_for("session.idle", session.id, count=2))["outcome"] == "succeeded"

    await api.client.prompt(session.id, "and again")
    third_form = (await api.log.wait_for("form.asked", session.id, count=3))["form"]
    third = third_form["id"]
    dismissed = await _raw(api, "DELETE", f"/api/session/{session.id}/form/{third}")
    assert dismissed.status_code == 200 and dismissed.json()["status"] == "cancelled"
    assert (await api.log.wait_for("session.idle", session.id, count=3))["outcome"] == "declined"
    terminal = api.log.of("session.execution.interrupted", session.id)[-1]
    assert terminal["reason"] == {"type": "declined", "via": "question", "call_id": third_form["call_id"]}
    again = await _raw(api, "DELETE", f"/api/session/{session.id}/form/{third}")
    assert again.status_code == 409
    assert again.json()["error"]["name"] == "FormAlreadySettled"


BAD_INPUT = [
    ("POST", "/api/session", b"{not json", "InvalidRequest", "not valid JSON"),
    ("POST", "/api/session", b"[1, 2]", "InvalidRequest", "expected an object"),
    ("POST", "/api/session", b'{"title": 5}', "InvalidRequest", "body.title"),
    ("POST", "/api/session", b'{"title": "x", "colour": "red"}', "InvalidRequest", "body.colour"),
    ("POST", "/api/session", b"\xff\xfe", "InvalidRequest", "UTF-8"),
    ("POST", "/api/session", b'{"title": NaN}', "InvalidRequest", "not valid JSON"),
    ("POST", "/api/session", b'{"title": "\\ud800"}', "InvalidRequest", "lone surrogate"),
    ("POST", "/api/session", b"[" * 100_000, "InvalidRequest", "not valid JSON"),
    ("POST", "/api/session/{sid}/prompt", b"", "InvalidRequest", "empty body"),
    ("POST", "/api/session/{sid}/prompt", b"{}", "InvalidRequest", "body.text: missing"),
    ("POST", "/api/session/{sid}/prompt", b'{"text": 12}', "InvalidRequest", "body.text"),
    ("POST", "/api/session/{sid}/prompt", b'{"text": ""}', "InvalidRequest", "body.text"),
    ("POST", "/api/session/{sid}/prompt", b'{"text": "hi", "mode": "later"}', "InvalidRequest", "body.mode"),
    ("POST", "/api/session/{sid}/interrupt", b'{"when": "soon"}', "InvalidRequest", "body.when"),
    ("POST", "/api/session/{sid}/interrupt", b"0", "InvalidRequest", "body"),
    ("POST", "/api/session/{sid}/prompt", b'{"text": "hi", "x": 1}', "InvalidRequest", "body.x"),
    ("POST", "/api/session/{sid}/permission/per_x/reply", b'{"decision": "maybe"}', "InvalidRequest", "body.decision"),
    ("POST", "/api/session/{sid}/permission/per_x/reply", b'{"decision": true}', "InvalidRequest", "body.decision"),
    ("POST", "/api/session/{sid}/permission/per_x/reply", b'{"decision": "once", "message": 3}', "InvalidRequest", "body.message"),
    ("POST", "/api/session/{sid}/permission/per_x/reply", b'{"decision": "once"}', "PermissionNotFound", "per_x"),
    ("POST", "/api/session/{sid}/form/frm_x", b'{"answers": {"q1": {"a": 1}}}', "InvalidRequest", "body.answers.q1"),
    ("POST", "/api/session/{sid}/form/frm_x", b'{"answers": []}', "InvalidRequest", "body.answers"),
    ("POST", "/api/session/{sid}/form/frm_x", b'{"answers": {"q1": "yes"}}', "FormNotFound", "frm_x"),
    ("DELETE", "/api/session/{sid}/form/frm_x", b"", "FormNotFound", "frm_x"),
    ("GET", "/api/session/ses_unknown", b"", "SessionNotFound", "ses_unknown"),
    ("POST", "/api/session/ses_unknown/prompt", b'{"text": "hi"}', "SessionNotFound", "ses_unknown"),
    ("POST", "/api/session/ses_unknown/interrupt", b"", "SessionNotFound", "ses_unknown"),
    ("POST", "/api/session/ses_unknown/resume", b"", "SessionNotFound", "ses_unknown"),
    ("POST", "/api/session/{sid}/resume", b"", "NothingToResume", "no suspended turn"),
    ("GET", "/api/session/ses_unknown/message", b"", "SessionNotFound", "ses_unknown"),
    ("GET", "/api/session/ses_unknown/permission", b"", "SessionNotFound", "ses_unknown"),
    ("GET", "/api/session/ses_unknown/form", b"", "SessionNotFound", "ses_unknown"),
    ("GET", "/api/session/ses_unknown/event", b"", "SessionNotFound", "ses_unknown"),
    ("GET", "/api/event?after=-1", b"", "InvalidRequest", "query.after"),
    ("GET", "/api/event?after=99999999999999999999", b"", "InvalidRequest", "query.after"),
    ("GET", "/api/event?after=" + "9" * 5000, b"", "InvalidRequest", "query.after"),
    ("GET", "/api/event?after=1&follow=perhaps", b"", "InvalidRequest", "query.follow"),
    ("GET", "/api/nowhere", b"", "RouteNotFound", "/api/nowhere"),
    ("PUT", "/api/session", b"", "MethodNotAllowed", "PUT"),
]  # fmt: skip

STATUS = {
    "InvalidRequest": 400,
    "SessionNotFound": 404,
    "PermissionNotFound": 404,
    "FormNotFound": 404,
    "RouteNotFound": 404,
    "MethodNotAllowed": 405,
    "NothingToResume": 409,
}


async def test_bad_input_gets_a_named_4xx_and_the_server_keeps_serving(shell_api: Api) -> None:
    """Every malformed request is refused with a JSON error naming what is wrong; none is a 500."""
    session = await shell_api.client.create_session(title="target")
    for method, template, body, name, fragment in BAD_INPUT:
        response = await _raw(shell_api, method, template.replace("{sid}", session.id), body)
        error = response.json()["error"]
        assert (response.status_code, error["name"]) == (STATUS[name], name), (template, body, error)
        assert fragment in error["message"], (template, body, error)
    assert (await _raw(shell_api, "GET", "/health")).json() == {"status": "ok"}
    assert [s.id for s in await shell_api.client.list_sessions()] == [session.id]


async def test_a_text_over_one_mebibyte_and_a_body_over_four_are_refused_by_name(shell_api: Api) -> None:
    """A huge prompt is a 400 naming the field; a huge body is refused without being held in memory,
    whether its length is declared or not."""
    session = await shell_api.client.create_session(title="big")
    path = f"/api/session/{session.id}/prompt"
    long_text = await _raw(shell_api, "POST", path, json.dumps({"text": "x" * ((1 << 20) + 1)}).encode())
    assert long_text.status_code == 400
    assert long_text.json()["error"]["message"] == "body.text: longer than 1048576 characters"
    huge = json.dumps({"text": "x" * (6 << 20)}).encode()

    async def chunks() -> Any:
        for start in range(0, len(huge), 65536):
            yield huge[start : start + 65536]

    for content in (huge, chunks()):
        response = await _raw(shell_api, "POST", path, content)
        assert response.status_code == 400
        assert response.json()["error"]["name"] == "InvalidRequest"
        assert "4 MiB" in response.json()["error"]["message"]
    assert (await _raw(shell_api, "GET", "/health")).status_code == 200
    assert shell_api.log.of("session.turn.started") == []


async def test_a_configured_token_guards_every_api_route_but_not_health(tmp_path: Path) -> None:
    """Without the bearer token an /api request is a 401 JSON error; probes and the document stay open."""
    async with serve_model([SHELL_CALL]) as mock:
        config = server_config(tmp_path, mock, token="s3cret")
        async with serving(config) as listening, httpx.AsyncClient(base_url=listening.url) as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
                refused = await http.get("/api/session", headers=headers)
                assert refused.status_code == 401
                assert refused.json()["error"]["name"] == "Unauthorized"
                assert refused.headers["www-authenticate"] == "Bearer"
            assert (await http.post("/api/session", json={})).status_code == 401
            assert (await http.get("/api/event", params={"follow": "false"})).status_code == 401
            assert (await http.get("/health")).json() == {"status": "ok"}
            assert (await http.get("/openapi.json")).status_code == 200
            allowed = await http.get("/api/session", headers={"Authorization": "Bearer s3cret"})
            assert (allowed.status_code, allowed.json()) == (200, [])
            async with CoordinatorClient(listening.url, token="s3cret") as client:
                session = await client.create_session(title="authorised")
                assert [e["type"] async for e in client.events(follow=False)] == ["session.created"]
            async with CoordinatorClient(listening.url) as anonymous:
                with pytest.raises(errors.Unauthorized):
                    await anonymous.get_session(session.id)


class _Failing:
    """Stands in for the coordinator to make the handlers meet failures the real one cannot force."""

    metrics = Metrics()  # the server counts its answers in the coordinator's series

    async def list_sessions(self) -> Any:
        raise RuntimeError("secret detail of the failure")

    async def get_session(self, session_id: str) -> Any:
        # A ClientError that crossed a nursery arrives wrapped in a group of one.
        raise ExceptionGroup(
            "from a nursery", [errors.SessionNotFound(message="gone", session_id=session_id)]
        )


async def test_an_unexpected_failure_is_a_500_internal_error_without_its_details() -> None:
    """A bug must not leak a traceback to clients, and must not stop the server answering others."""
    app = build_app(_Failing(), Config())  # type: ignore[arg-type]
    async with hypercorn_app(app) as url, httpx.AsyncClient(base_url=url) as http:
        failed = await http.get("/api/session")
        assert failed.status_code == 500
        assert failed.json() == {
            "error": {"name": "InternalError", "message": "internal error; the server log has the details"}
        }
        assert "secret" not in failed.text
        wrapped = await http.get("/api/session/ses_x")
        assert wrapped.status_code == 404
        assert wrapped.json()["error"] == {
            "name": "SessionNotFound",
            "message": "gone",
            "session_id": "ses_x",
        }
        assert (await http.get("/health")).status_code == 200


CONTRACT_ROUTES = {
    ("get", "/api/mcp"),
    ("get", "/health"),
    ("get", "/openapi.json"),
    ("get", "/metrics"),
    ("post", "/api/session"),
    ("get", "/api/session"),
    ("get", "/api/session/{sid}"),
    ("delete", "/api/session/{sid}"),
    ("post", "/api/session/{sid}/prompt"),
    ("post", "/api/session/{sid}/interrupt"),
    ("post", "/api/session/{sid}/resume"),
    ("get", "/api/session/{sid}/turn"),
    ("delete", "/api/session/{sid}/turn/{tid}"),
    ("get", "/api/session/{sid}/message"),
    ("get", "/api/node"),
    ("get", "/api/permission"),
    ("get", "/api/session/{sid}/permission"),
    ("post", "/api/session/{sid}/permission/{rid}/reply"),
    ("get", "/api/session/{sid}/form"),
    ("post", "/api/session/{sid}/form/{fid}"),
    ("delete", "/api/session/{sid}/form/{fid}"),
    ("get", "/api/event"),
    ("get", "/api/session/{sid}/event"),
}


async def test_openapi_document_lists_every_route_with_schemas_that_match_the_wire(shell_api: Api) -> None:
    """The document is generated, so it must cover every route and describe what the server sends."""
    doc = await shell_api.client.openapi()
    assert doc["openapi"] == "3.1.0"
    assert {(m, p) for p, item in doc["paths"].items() for m in item} == CONTRACT_ROUTES
    assert {(op.method.lower(), op.path) for op in OPERATIONS} == CONTRACT_ROUTES
    components = doc["components"]["schemas"]
    for ref in _refs(doc):
        assert ref.removeprefix("#/components/schemas/") in components, ref
    reply = doc["paths"]["/api/session/{sid}/permission/{rid}/reply"]["post"]
    assert reply["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ReplyBody"
    }
    assert components["ReplyBody"]["properties"]["decision"]["enum"] == ["once", "always", "reject"]
    assert components["ReplyBody"]["required"] == ["decision"]
    # Every request body is an object with exactly the fields the server takes.
    for operation in OPERATIONS:
        if operation.body is not None:
            body = components[operation.body.__name__]
            assert body["type"] == "object" and body["additionalProperties"] is False, operation.path
    assert set(reply["responses"]) == {"200", "400", "403", "404", "409", "415", "421", "500"}
    resume = doc["paths"]["/api/session/{sid}/resume"]["post"]
    assert set(resume["responses"]) == {"202", "403", "404", "409", "415", "421", "500", "503"}
    assert resume["responses"]["202"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ResumeAccepted"
    }
    assert resume["responses"]["409"]["description"] == "NothingToResume"
    settled = components["PermissionAlreadySettled"]["properties"]["error"]
    assert settled["properties"]["name"] == {"const": "PermissionAlreadySettled"}
    assert "settlement" in settled["properties"]

    validator = Validator(components)
    session_id, request = await _pending_request(shell_api)
    samples = {
        ("/api/session/{sid}", "get"): f"/api/session/{session_id}",
        ("/api/session", "get"): "/api/session",
        ("/api/session/{sid}/permission", "get"): f"/api/session/{session_id}/permission",
        ("/api/session/{sid}/message", "get"): f"/api/session/{session_id}/message",
        ("/health", "get"): "/health",
    }
    for (path, method), url in samples.items():
        schema = doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]
        validator.check((await _raw(shell_api, "GET", url)).json(), schema, "response")
    assert request["status"] == "pending"


def _refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        own = [value["$ref"]] if "$ref" in value else []
        return own + [ref for item in value.values() for ref in _refs(item)]
    if isinstance(value, list):
        return [ref for item in value for ref in _refs(item)]
    return []


async def _raw(api: Api, method: str, path: str, content: Any = b"") -> httpx.Response:
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(base_url=api.listening.url, timeout=30) as http:
        return await http.request(method, path, content=content or None, headers=headers)


async def test_every_answer_is_counted_by_its_route_template_and_status(shell_api: Api) -> None:
    """``coordinator_http_requests_total{route, status}``: the route's template, never an id (a series
    each); a path no route has is ``unmatched``; the event stream counts when it opens."""
    session_id, _ = await _pending_request(shell_api)
    await _raw(shell_api, "GET", f"/api/session/{session_id}")
    await _raw(shell_api, "GET", "/api/session/ses_nope")
    await _raw(shell_api, "GET", "/api/nothing/here")
    text = (await _raw(shell_api, "GET", "/metrics")).text
    counts = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith("coordinator_http_requests_total{")
    }
    assert counts['coordinator_http_requests_total{route="/api/session",status="201"}'] == 1
    assert counts['coordinator_http_requests_total{route="/api/session/{sid}",status="200"}'] == 1
    assert counts['coordinator_http_requests_total{route="/api/session/{sid}",status="404"}'] == 1
    assert counts['coordinator_http_requests_total{route="unmatched",status="404"}'] == 1
    assert counts['coordinator_http_requests_total{route="/api/event",status="200"}'] >= 1  # the log's
    assert not any(session_id in key for key in counts)
    assert 'coordinator_http_request_seconds_count{route="/api/session/{sid}/prompt"} 1.0' in text
