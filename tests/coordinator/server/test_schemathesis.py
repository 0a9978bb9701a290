"""The OpenAPI document against the real server: schemathesis runs every operation with every check.

The server runs with a token, and holds real sessions, a pending permission request and a pending form
before the run begins, so that generated paths sometimes name things that exist (a dictionary of real
ids) and the checks reach the 200s and 409s, not only the 404s. Any finding fails the test with its
reproduction.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import schemathesis
import trio
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import Status, events

from coordinator.client import CoordinatorClient
from coordinator.config import PrincipalConfig
from coordinator.server.serve import serve
from tests.coordinator.server.harness import QUESTION_CALL, SHELL_CALL, EventLog, server_config
from tests.model_server import Reply, Text, serve_model

TOKEN = "schemathesis-token"
"""``[server] token``: an admin, who sees every session."""
USER_TOKEN = "schemathesis-user-token"
"""A ``[[principal]]`` of role user (``ada``), who made the sessions: the run as a person of a team."""
EXAMPLES = 12
"""Generated cases an operation a phase: bounded, so the run takes seconds, not minutes."""


@attrs.frozen
class Target:
    url: str
    session_ids: list[str]
    request_id: str
    form_id: str


def _reply(index: int, body: dict[str, Any]) -> Reply:
    """A form for a prompt starting "ask", a shell call (which asks permission) for any other."""
    last = body["messages"][-1]
    if last["role"] != "user":
        return Text(text="done")
    return QUESTION_CALL if str(last["content"]).startswith("ask") else SHELL_CALL


async def _prepare(url: str) -> Target:
    """Sessions with a pending permission request and a pending form, as a person would leave them."""
    async with CoordinatorClient(url, USER_TOKEN) as client, trio.open_nursery() as nursery:
        log = EventLog()
        nursery.start_soon(log.follow, client)
        shell = await client.create_session(title="shell")
        form = await client.create_session(title="form")
        await client.prompt(shell.id, "run it")
        await client.prompt(form.id, "ask me")
        request = (await log.wait_for("permission.asked", shell.id))["request"]["id"]
        form_id = (await log.wait_for("form.asked", form.id))["form"]["id"]
        nursery.cancel_scope.cancel()
    return Target(url=url, session_ids=[shell.id, form.id], request_id=request, form_id=form_id)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """A server, on its own trio run in a thread (schemathesis calls it synchronously)."""
    tmp_path: Path = tmp_path_factory.mktemp("schemathesis")
    started: queue.Queue[tuple[Target, trio.lowlevel.TrioToken, trio.CancelScope] | BaseException] = (
        queue.Queue()
    )

    async def run() -> None:
        try:
            async with serve_model(_reply) as mock, trio.open_nursery() as nursery:
                ada = PrincipalConfig(
                    name="ada", token_sha256=hashlib.sha256(USER_TOKEN.encode()).hexdigest()
                )
                config = attrs.evolve(server_config(tmp_path, mock, token=TOKEN), principal=(ada,))
                listening = await nursery.start(serve, config)
                prepared = await _prepare(listening.url)
                started.put((prepared, trio.lowlevel.current_trio_token(), nursery.cancel_scope))
        except BaseException as exc:
            started.put(exc)
            raise

    thread = threading.Thread(target=trio.run, args=(run,), name="schemathesis-server")
    thread.start()
    got = started.get(timeout=60)
    if isinstance(got, BaseException):
        thread.join(timeout=30)
        raise AssertionError("the server did not start") from got
    prepared, trio_token, scope = got
    try:
        yield prepared
    finally:
        trio.from_thread.run_sync(scope.cancel, trio_token=trio_token)
        thread.join(timeout=30)


def _config(target: Target, token: str) -> SchemathesisConfig:
    return SchemathesisConfig.from_dict(
        {
            "seed": 14,
            "base-url": target.url,
            "headers": {"Authorization": f"Bearer {token}"},
            "request-timeout": 5,
            "max-stream-events": 5,
            "checks": {"enabled": True},
            "generation": {"max-examples": EXAMPLES, "deterministic": True},
            "dictionaries": {
                "sessions": {"values": target.session_ids},
                "requests": {"values": [target.request_id]},
                "forms": {"values": [target.form_id]},
            },
            "parameters": {
                "path.sid": {"dictionary": "sessions", "probability": 0.5},
                "path.rid": {"dictionary": "requests", "probability": 0.5},
                "path.fid": {"dictionary": "forms", "probability": 0.5},
                # A followed stream never ends; schemathesis would wait out its timeout on each one.
                "query.follow": "false",
            },
            "operations": [
                {
                    # The answers must name the form's own questions, which no schema can say.
                    "include-operation-id": "submit_form",
                    "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]}},
                },
                {
                    # An edited input must fit the tool's own input schema (InvalidInput), which the
                    # document cannot say either: it is the tool's, not the API's.
                    "include-operation-id": "reply_permission",
                    "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]}},
                },
            ],
        }
    )


ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx"]
"""What ``positive_data_acceptance`` expects by default."""


def _findings(event: events.EngineEvent) -> list[str]:
    """Each failed check of a finished scenario (its curl command and the answer), or an error."""
    if isinstance(event, events.ScenarioFinished | events.FuzzScenarioFinished):
        return [
            _describe(event.recorder, case_id, check)
            for case_id, checks in event.recorder.checks.items()
            for check in checks
            if check.status == Status.FAILURE and check.failure_info is not None
        ]
    if isinstance(event, events.NonFatalError):
        return [f"{event.label}: error: {event.value!r}"]
    if isinstance(event, events.FatalError):
        return [f"fatal: {event.exception!r}"]
    return []


def _describe(recorder: Any, case_id: str, check: Any) -> str:
    interaction = recorder.interactions.get(case_id)
    response = interaction.response if interaction is not None else None
    answered = "" if response is None else f" -> {response.status_code} {response.content[:300]!r}"
    failure = check.failure_info
    return f"{recorder.label}: {check.name}: {failure.failure.title}: {failure.code_sample}{answered}"


@pytest.mark.slow
@pytest.mark.parametrize("token", [TOKEN, USER_TOKEN], ids=["admin", "user"])
def test_schemathesis_finds_nothing_in_any_operation(target: Target, token: str) -> None:
    """The document must say exactly what the server does: every check over every operation, no
    finding, for an admin and for a user (who meets 403 on the admin's routes)."""
    config = _config(target, token)
    schema = schemathesis.openapi.from_url(f"{target.url}/openapi.json", config=config)
    operations = {f"{op.method.upper()} {op.path}" for op in (r.ok() for r in schema.get_all_operations())}
    # Every route but the document itself, which schemathesis leaves out as the schema it loaded.
    assert len(operations) == 22 and "GET /openapi.json" not in operations, sorted(operations)
    findings: list[str] = []
    tested: set[str] = set()
    requests = 0
    for event in schemathesis.engine.from_schema(schema).execute():
        findings += _findings(event)
        if isinstance(event, events.ScenarioFinished):
            requests += len(event.recorder.interactions)
        if isinstance(event, events.ScenarioFinished) and event.status != Status.SKIP:
            tested.add(event.recorder.label)
    assert findings == [], "\n".join(dict.fromkeys(findings))
    assert operations <= tested, operations - tested
    print(f"schemathesis: {requests} requests over {len(tested)} operations")  # the figure, with -s
