"""Test parts for the HTTP server: a real server on 127.0.0.1 port 0, a client, and an event log."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from coordinator.client import CoordinatorClient, parse_sse
from coordinator.config import Config, ModelConfig
from coordinator.records import Rule
from coordinator.server.serve import Listening, serve
from tests.conftest import ASK_SHELL, make_config
from tests.model_server import Call, MockModel, Reply, Text, ToolCalls

WAIT_SECONDS = 15
"""Deadline of any wait for an event: a hang fails the test instead of stalling the suite."""

SHELL_CALL = ToolCalls(calls=(Call(id="call_shell", name="shell", input={"command": "echo hi"}),))
QUESTION_CALL = ToolCalls(
    calls=(
        Call(
            id="call_question",
            name="question",
            input={"questions": [{"id": "q1", "prompt": "Go on?", "options": ["yes", "no"]}]},
        ),
    )
)


def then_done(first: Reply) -> Any:
    """Replies answering a user prompt with ``first`` and anything after a tool result with text."""

    def reply(index: int, body: dict[str, Any]) -> Reply:
        return first if body["messages"][-1]["role"] == "user" else Text(text="done")

    return reply


def server_config(
    tmp_path: Path, mock: MockModel | None = None, *, token: str = "", rules: tuple[Rule, ...] = ASK_SHELL
) -> Config:
    """A config on ``tmp_path`` listening on a free port, answered by ``mock`` when given."""
    config = make_config(tmp_path, rules=rules, port=0, token=token, shutdown_grace=5)
    if mock is None:
        return config
    model = ModelConfig(
        provider="openai", base_url=mock.base_url, name="mock", api_key_env="COORDINATOR_TEST_NO_KEY"
    )
    return attrs.evolve(config, model=model)


@contextlib.asynccontextmanager
async def serving(config: Config) -> AsyncIterator[Listening]:
    """The server of ``config`` until the block ends, then a graceful shutdown (reason shutdown)."""
    async with trio.open_nursery() as nursery:
        listening: Listening = await nursery.start(serve, config)
        try:
            yield listening
        finally:
            nursery.cancel_scope.cancel()


@attrs.define
class EventLog:
    """Every event a followed stream delivered, in order, and a way to wait for one."""

    events: list[dict[str, Any]] = attrs.Factory(list)
    ended: bool = False
    _changed: trio.Event = attrs.Factory(trio.Event)

    def add(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def types(self, session_id: str | None = None) -> list[str]:
        return [e["type"] for e in self.events if session_id is None or e["session_id"] == session_id]

    def of(self, type: str, session_id: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e["type"] == type and (session_id is None or e["session_id"] == session_id)
        ]

    async def wait_for(self, type: str, session_id: str | None = None, count: int = 1) -> dict[str, Any]:
        with trio.fail_after(WAIT_SECONDS):
            while len(self.of(type, session_id)) < count:
                await self._changed.wait()
        return self.of(type, session_id)[count - 1]

    async def wait_until_count(self, count: int) -> None:
        with trio.fail_after(WAIT_SECONDS):
            while len(self.events) < count:
                await self._changed.wait()

    async def wait_ended(self) -> None:
        with trio.fail_after(WAIT_SECONDS):
            while not self.ended:
                await self._changed.wait()

    async def follow_once(self, url: str, path: str = "/api/event") -> None:
        """Record one raw stream of ``path`` (no reconnection) until the server ends it."""
        async with (
            httpx.AsyncClient(base_url=url, timeout=None) as http,
            http.stream("GET", path) as response,
        ):
            lines = response.aiter_lines()
            async with contextlib.aclosing(lines), contextlib.aclosing(parse_sse(lines)) as events:
                async for event in events:
                    self.add(event)
        self.ended = True
        self._notify()

    async def follow(self, client: CoordinatorClient, **kwargs: Any) -> None:
        """Record ``client.events(**kwargs)`` until it ends or this task is cancelled."""
        async with contextlib.aclosing(client.events(**kwargs)) as events:  # type: ignore[type-var]
            async for event in events:
                self.add(event)
        self.ended = True
        self._notify()


@attrs.frozen
class Api:
    """A running server, a client of it, and the log of its whole event stream from seq 0."""

    listening: Listening
    client: CoordinatorClient
    log: EventLog
    config: Config
    mock: MockModel


@contextlib.asynccontextmanager
async def running_api(config: Config, mock: MockModel) -> AsyncIterator[Api]:
    async with serving(config) as listening, CoordinatorClient(listening.url, config.server.token) as client:
        log = EventLog()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.follow, client)
            yield Api(listening=listening, client=client, log=log, config=config, mock=mock)
            nursery.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def hypercorn_app(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI ``app`` on 127.0.0.1 port 0 until the block ends; yields its base URL."""
    config = HypercornConfig()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 1.0
    config.loglevel = "WARNING"
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            partial(hypercorn_serve, app, config, shutdown_trigger=stop.wait, mode="asgi")
        )
        try:
            yield binds[0]
        finally:
            stop.set()
