"""``GET /metrics`` of a real server after a known sequence of turns and stops, scraped over HTTP.

Every counter is asserted by label, exactly: the sequence is two answered turns, a permission rejected,
an interrupt during a permission wait, a question dismissed, a step deadline and a model failure. The
gauges are read while the thing they count is live (a permission wait, a question form, a running
turn, an extra SSE stream) and again once it has ended.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

from coordinator.config import TimeoutsConfig
from tests.coordinator.server.harness import (
    QUESTION_CALL,
    SHELL_CALL,
    WAIT_SECONDS,
    Api,
    EventLog,
    running_api,
    server_config,
)
from tests.model_server import Hang, HttpError, Reply, Text, serve_model

TOKEN = "metrics-token"
STEP_LIMIT = 2.0
"""``[timeouts] step``: the hanging model's step times out after it; every other step takes ms."""

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _reply(index: int, body: dict[str, Any]) -> Reply:
    """By the prompt's first word: hi answers, run asks for a shell call, ask for a form, hang never
    finishes, fail is a model error. After a tool result, "done"."""
    last = body["messages"][-1]
    if last["role"] != "user":
        return Text(text="done")
    word = str(last["content"]).split()[0]
    replies: dict[str, Reply] = {
        "hi": Text(text="hello"),
        "run": SHELL_CALL,
        "ask": QUESTION_CALL,
        "hang": Hang(text="thinking"),
        "fail": HttpError(status=400, message="no such model"),
    }
    return replies[word]


@contextlib.asynccontextmanager
async def _metrics_api(tmp_path: Path) -> AsyncIterator[Api]:
    async with serve_model(_reply) as mock:
        config = server_config(tmp_path, mock, token=TOKEN)
        config = attrs.evolve(config, timeouts=TimeoutsConfig(step=STEP_LIMIT))
        async with running_api(config, mock) as api:
            yield api


async def _scrape(api: Api) -> Samples:
    """Every sample of ``GET /metrics``, parsed by ``prometheus_client``'s own parser."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=api.listening.url, headers=headers) as http:
        response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: value for (sample, labels), value in samples.items() if sample == name}


def _value(samples: Samples, name: str) -> float:
    return samples[(name, frozenset())]


async def _turn(api: Api, session_id: str, text: str, count: int = 1) -> None:
    """Prompt and wait for the session's ``count``-th ``session.idle``."""
    await api.client.prompt(session_id, text)
    await api.log.wait_for("session.idle", session_id, count)


async def _asked(api: Api, text: str, event: str) -> tuple[str, dict[str, Any]]:
    """A new session whose turn waits on a person: its id and the ``event`` that asked."""
    session = await api.client.create_session(title=text)
    await api.client.prompt(session.id, text)
    return session.id, await api.log.wait_for(event, session.id)


async def _wait_for_gauge(api: Api, name: str, value: float) -> None:
    """Scrape until gauge ``name`` reads ``value`` (the server notices a closed stream on its own)."""
    with trio.fail_after(WAIT_SECONDS):
        while _value(await _scrape(api), name) != value:  # noqa: ASYNC110 (another task of the server)
            await trio.sleep(0.02)


async def test_metrics_count_every_outcome_and_reason_after_a_known_sequence(
    tmp_path: Path, backend: str
) -> None:
    """An operator's dashboard must show exactly what happened: one count a settled turn, by outcome
    and by reason, one stop duration a stop, and gauges that fall back once a wait or a turn ends."""
    async with _metrics_api(tmp_path) as api:
        answered = await api.client.create_session(title="answered")
        await _turn(api, answered.id, "hi there")
        await _turn(api, answered.id, "hi again", count=2)

        rejected, asked = await _asked(api, "run it", "permission.asked")
        live = await _scrape(api)
        assert _by_label(live, "coordinator_pending_waits", "kind") == {"permission": 1, "question": 0}
        assert _value(live, "coordinator_turns_running") == 1
        await api.client.reply_permission(rejected, asked["request"]["id"], "reject")
        await api.log.wait_for("session.idle", rejected)
        settled = await _scrape(api)
        assert _by_label(settled, "coordinator_pending_waits", "kind") == {"permission": 0, "question": 0}
        assert _value(settled, "coordinator_turns_running") == 0

        interrupted, _ = await _asked(api, "run that", "permission.asked")
        assert await api.client.interrupt(interrupted) is True
        await api.log.wait_for("session.idle", interrupted)

        dismissed, asked = await _asked(api, "ask me", "form.asked")
        live = await _scrape(api)
        assert _by_label(live, "coordinator_pending_waits", "kind") == {"permission": 0, "question": 1}
        await api.client.dismiss_form(dismissed, asked["form"]["id"])
        await api.log.wait_for("session.idle", dismissed)

        for text in ("hang on", "fail now"):
            session = await api.client.create_session(title=text)
            await _turn(api, session.id, text)

        samples = await _scrape(api)
    outcomes = [e["outcome"] for e in api.log.of("session.idle")]
    assert outcomes == [
        "succeeded",
        "succeeded",
        "declined",
        "interrupted",
        "declined",
        "timed_out",
        "failed",
    ]
    assert _by_label(samples, "coordinator_turns_total", "outcome") == {
        "succeeded": 2,
        "declined": 2,
        "interrupted": 1,
        "timed_out": 1,
        "failed": 1,
        "suspended": 0,
    }
    assert _by_label(samples, "coordinator_stops_total", "reason") == {
        "declined": 2,
        "interrupt": 1,
        "timeout": 1,
        "error": 1,
        "shutdown": 0,
    }
    assert _value(samples, "coordinator_stop_seconds_count") == 5
    assert _value(samples, "coordinator_stop_seconds_sum") > 0
    assert _by_label(samples, "coordinator_pending_waits", "kind") == {"permission": 0, "question": 0}
    assert _value(samples, "coordinator_turns_running") == 0
    assert _value(samples, "coordinator_store_commit_seconds_count") > 0
    if backend == "sqlite":  # the server syncs the WAL (FULL); a PostgreSQL commit flushes inside itself
        assert _value(samples, "coordinator_store_sync_seconds_count") > 0


async def test_event_subscribers_counts_an_open_stream_until_its_client_leaves(tmp_path: Path) -> None:
    """A leaking stream shows as a gauge that only grows: it must fall back when a client disconnects."""
    async with _metrics_api(tmp_path) as api:
        await api.client.create_session(title="something to replay")
        await api.log.wait_for("session.created")
        assert _value(await _scrape(api), "coordinator_event_subscribers") == 1  # the harness's own
        second = EventLog()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(second.follow, api.client)
            await second.wait_for("session.created")  # the stream has subscribed once it sent one
            assert _value(await _scrape(api), "coordinator_event_subscribers") == 2
            nursery.cancel_scope.cancel()  # the client leaves
        await _wait_for_gauge(api, "coordinator_event_subscribers", 1)


async def test_metrics_need_the_token_when_one_is_set(tmp_path: Path) -> None:
    """The metrics name what the server is doing; the edge rules of the API apply to them too."""
    async with _metrics_api(tmp_path) as api, httpx.AsyncClient(base_url=api.listening.url) as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            refused = await http.get("/metrics", headers=headers)
            assert refused.status_code == 401
            assert refused.json()["error"]["name"] == "Unauthorized"
        foreign = await http.get(
            "/metrics", headers={"Authorization": f"Bearer {TOKEN}", "Host": "evil.example"}
        )
        assert foreign.status_code == 421
        assert (await http.get("/health")).status_code == 200
        document = (await http.get("/openapi.json")).json()
    operation = document["paths"]["/metrics"]["get"]
    assert operation["security"] == [{"bearer": []}]
    assert operation["responses"]["200"]["content"] == {"text/plain": {"schema": {"type": "string"}}}
    assert set(operation["responses"]) == {"200", "401", "403", "421", "500"}
