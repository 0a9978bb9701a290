"""Property-based fuzzing of the JSON routes: whatever a client sends, never a 500, always a named error."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.records import Rule
from coordinator.server.serve import serve
from tests.coordinator.server.harness import server_config

# Shell calls are denied so that a fuzzed prompt beginning with "run:" runs nothing (the demo model
# turns such a prompt into a shell call).
DENY_SHELL = (
    Rule(action="*", resource="*", effect="allow"),
    Rule(action="shell", resource="*", effect="deny"),
)

FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=2)
    | st.sampled_from(["once", "always", "reject", "q1", "yes", ""])
)
keys = st.text(max_size=8) | st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=1)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)


def near_valid(keys: list[str]) -> st.SearchStrategy[Any]:
    """Objects that use the route's own keys with arbitrary values, sometimes with an extra key."""
    return st.fixed_dictionaries({}, optional={key: json_values for key in keys} | {"extra": json_values})


def body_of(keys: list[str]) -> st.SearchStrategy[bytes]:
    encoded = st.one_of(json_values, near_valid(keys)).map(lambda value: json.dumps(value).encode())
    return st.one_of(encoded, st.binary(max_size=40))


ROUTES = {
    "create_session": ("/api/session", ["title"]),
    "prompt": ("/api/session/{sid}/prompt", ["text"]),
    "reply": ("/api/session/{sid}/permission/per_unknown/reply", ["decision", "message"]),
    "form": ("/api/session/{sid}/form/frm_unknown", ["answers"]),
}


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server for the whole module, on its own trio run in a thread (hypothesis runs sync tests)."""
    config = server_config(tmp_path_factory.mktemp("fuzz"), rules=DENY_SHELL)
    started: queue.Queue[tuple[str, trio.lowlevel.TrioToken, trio.CancelScope]] = queue.Queue()

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            listening = await nursery.start(serve, config)
            started.put((listening.url, trio.lowlevel.current_trio_token(), nursery.cancel_scope))

    thread = threading.Thread(target=trio.run, args=(run,), name="fuzz-server")
    thread.start()
    url, token, scope = started.get(timeout=30)
    try:
        yield url
    finally:
        trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def http(server_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_url, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def session_id(http: httpx.Client) -> str:
    return str(http.post("/api/session", json={"title": "fuzz"}).json()["id"])


def assert_answered_properly(response: httpx.Response) -> None:
    """A 2xx with JSON, or a 4xx whose JSON names the error; never a 5xx."""
    assert response.status_code < 500, response.text
    body = response.json()
    if response.status_code >= 400:
        assert isinstance(body["error"]["name"], str) and body["error"]["name"]
        assert isinstance(body["error"]["message"], str)


@pytest.mark.parametrize("route", sorted(ROUTES))
@FUZZ
@given(data=st.data())
def test_random_bodies_never_cause_a_server_error(
    route: str, http: httpx.Client, session_id: str, data: st.DataObject
) -> None:
    """A malformed body is the client's fault: it must get a named 4xx, never a 500."""
    template, keys = ROUTES[route]
    body = data.draw(body_of(keys), label="body")
    headers = {"content-type": "application/json"}
    response = http.post(template.replace("{sid}", session_id), content=body, headers=headers)
    assert_answered_properly(response)


@FUZZ
@given(
    sid=st.text(min_size=1, max_size=20),
    suffix=st.sampled_from(["", "/message", "/permission", "/form", "/interrupt"]),
)
def test_random_ids_in_paths_are_never_a_server_error(http: httpx.Client, sid: str, suffix: str) -> None:
    """Ids are opaque strings: any text, once encoded into the path, is found or a 404, never a 500."""
    method = "POST" if suffix == "/interrupt" else "GET"
    response = http.request(method, f"/api/session/{quote(sid, safe='')}{suffix}")
    assert_answered_properly(response)
    if response.status_code >= 400:
        # An id holding "/" can name another route ("x/form/y" is a form's path, which has no GET).
        assert response.json()["error"]["name"] in {"SessionNotFound", "RouteNotFound", "MethodNotAllowed"}


def test_the_server_still_serves_after_the_fuzzing(http: httpx.Client, session_id: str) -> None:
    """No fuzzed request may have broken the server for the requests after it."""
    assert http.get("/health").json() == {"status": "ok"}
    assert http.get(f"/api/session/{session_id}").json()["title"] == "fuzz"
