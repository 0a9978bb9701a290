"""Test parts for deletion and retention over HTTP: an embedded coordinator (so a test can run a
retention pass when it wants one) served by hypercorn on 127.0.0.1, its client, and raw SSE frames."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import apsw
import attrs
import httpx
import trio

from coordinator import Coordinator, open_coordinator
from coordinator.client import CoordinatorClient
from coordinator.config import StoreConfig
from coordinator.models.scripted import ScriptedModel
from coordinator.server.app import build_app
from tests.conftest import ASK_SHELL, make_config
from tests.coordinator.server.harness import WAIT_SECONDS, hypercorn_app

SHELL_THEN_TEXT = [
    {"tool_calls": [{"id": "call_shell", "name": "shell", "input": {"command": "echo hi"}}]},
    {"text": "done"},
]
"""Per session: the first request asks for a shell call (the rules make it ask), later ones answer."""

TEXT = [{"text": "done"}]

OLD = "2000-01-01T00:00:00.000Z"
"""A time older than any retention window."""


@attrs.frozen
class Served:
    coordinator: Coordinator
    client: CoordinatorClient
    url: str
    db: Path


@contextlib.asynccontextmanager
async def served(
    tmp_path: Path,
    *,
    keep_events_days: float = 0,
    script: list[dict[str, Any]] = SHELL_THEN_TEXT,
    resume: str = "auto",
) -> AsyncIterator[Served]:
    config = make_config(tmp_path, rules=ASK_SHELL, shutdown_grace=5, resume=resume)
    config = attrs.evolve(config, store=StoreConfig(keep_events_days=keep_events_days))
    model = ScriptedModel.from_json(script)
    async with (
        open_coordinator(config, model=model, synchronous="normal") as coordinator,
        hypercorn_app(build_app(coordinator, config)) as url,
        CoordinatorClient(url) as client,
    ):
        yield Served(coordinator=coordinator, client=client, url=url, db=Path(config.server.db))


async def wait_event(
    served: Served, session_id: str, type: str, turn_id: str | None = None
) -> dict[str, Any]:
    """The session's first event of ``type`` (of ``turn_id`` when given), once it is published."""
    with trio.fail_after(WAIT_SECONDS):
        async with contextlib.aclosing(served.coordinator.subscribe(session_id=session_id)) as events:
            async for event in events:
                if event.type == type and turn_id in (None, event.payload.get("turn_id")):
                    return event.to_dict()
    raise AssertionError("the stream ended")


async def run_turn(served: Served, session_id: str, text: str = "go") -> str:
    """Prompt over HTTP and wait for the turn's ``session.idle``; returns the turn id."""
    turn_id = await served.client.prompt(session_id, text)
    await wait_event(served, session_id, "session.idle", turn_id)
    return turn_id


async def run_shell_turn(served: Served, session_id: str, decision: str = "once") -> str:
    """A session's first turn of ``SHELL_THEN_TEXT``: its shell call asks, ``decision`` answers it."""
    turn_id = await served.client.prompt(session_id, "run it")
    asked = await wait_event(served, session_id, "permission.asked")
    await served.client.reply_permission(session_id, asked["request"]["id"], decision)
    await wait_event(served, session_id, "session.idle", turn_id)
    return turn_id


async def sse_frames(served: Served, path: str, **headers: str) -> list[dict[str, str]]:
    """Every frame of a stream that ends (``follow=false``), as its fields (``id``, ``event``, ``data``)."""
    async with httpx.AsyncClient(base_url=served.url, timeout=WAIT_SECONDS) as http:
        response = await http.get(path, headers=headers)
    assert response.status_code == 200, response.text
    frames = []
    for block in response.text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if fields:
            frames.append(fields)
    return frames


def age_events(db: Path, *, upto_seq: int) -> None:
    """Make the events up to ``upto_seq`` look written long ago, as if the server had run for years."""
    connection = apsw.Connection(str(db))
    try:
        connection.set_busy_timeout(5000)
        connection.execute("UPDATE events SET at = ? WHERE seq <= ?", (OLD, upto_seq))
    finally:
        connection.close()


def rows_naming(db: Path, session_id: str) -> dict[str, int]:
    """How many rows of each table name the session (parts through their messages)."""
    connection = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        counts = {
            table: int(
                connection.execute(
                    f"SELECT COUNT(*) FROM {table} WHERE {column} = ?", (session_id,)
                ).fetchall()[0][0]
            )
            for table, column in _SESSION_COLUMNS
        }
        counts["parts"] = int(
            connection.execute(
                "SELECT COUNT(*) FROM parts WHERE message_id IN (SELECT id FROM messages WHERE session_id = ?)",
                (session_id,),
            ).fetchall()[0][0]
        )
        return counts
    finally:
        connection.close()


_SESSION_COLUMNS = (
    ("sessions", "id"),
    ("turns", "session_id"),
    ("steps", "session_id"),
    ("messages", "session_id"),
    ("tool_calls", "session_id"),
    ("claims", "session_id"),
    ("permission_requests", "session_id"),
    ("forms", "session_id"),
    ("session_rules", "session_id"),
    ("events", "session_id"),
)
