"""The physical limit of our parts: a turn's commits, events and task spawns, with no coordinator.

First a few real turns are counted (store commits by SQLite's commit hook, events by their seq, task
spawns by a trio instrument); then a bare loop does exactly that much per turn: apsw transactions on
a WAL file in the same ``synchronous`` mode, inserting the same number of event rows, and the same
number of trio tasks spawned and joined. ``turns_per_s / baseline_turns_per_s`` is how close the
coordinator comes to what its parts allow.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import apsw
import attrs
import trio

from bench.harness import MODES, Sizes, median, tool_then_text_script
from bench.turns import run_turn, watched_coordinator

# Shaped like a real event row: a type, a session id, a time and a small JSON payload.
_PAYLOAD = json.dumps(
    {"turn_id": "turn_01a2368ad12bf6d2688c7fa3", "step_id": "step_01a2368ad12bf6d2688c7fa4"}
)
_SESSION = "ses_01a2368ad126fc5f182b479f"


@attrs.frozen(kw_only=True)
class TurnParts:
    """What one turn does to the store and the scheduler."""

    commits: int
    events: int
    spawns: int


class _SpawnCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1


async def count_turn_parts(workdir: Path, sizes: Sizes) -> TurnParts:
    """Commits, events and task spawns of one turn, counted over a few real turns."""
    turns = max(2, sizes.turns_per_session)
    async with watched_coordinator(workdir, "parts.sqlite", "normal", tool_then_text_script(turns + 1)) as (
        coordinator,
        watcher,
    ):
        session = await coordinator.create_session("parts")
        await run_turn(coordinator, watcher, session.id)  # imports and caches warm
        connection = coordinator.store.read.sql.db  # type: ignore[attr-defined]  (the SQLite backend's apsw connection)
        commits = 0

        def on_commit() -> bool:
            nonlocal commits
            commits += 1
            return False  # let the commit proceed

        spawns = _SpawnCounter()
        first_seq = coordinator.store.read.last_seq()
        connection.set_commit_hook(on_commit)
        trio.lowlevel.add_instrument(spawns)
        try:
            for _ in range(turns):
                await run_turn(coordinator, watcher, session.id)
        finally:
            trio.lowlevel.remove_instrument(spawns)
            connection.set_commit_hook(None)
        events = coordinator.store.read.last_seq() - first_seq
    return TurnParts(
        commits=round(commits / turns), events=round(events / turns), spawns=round(spawns.spawned / turns)
    )


def _open_bare(path: Path, mode: str) -> apsw.Connection:
    db = apsw.Connection(str(path))
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={mode.upper()}")
    db.execute(
        "CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, type TEXT NOT NULL, "
        "session_id TEXT, at TEXT NOT NULL, payload TEXT NOT NULL);"
        "CREATE INDEX IF NOT EXISTS events_by_session ON events(session_id, seq);"
    )
    return db


async def _bare_turns(db: apsw.Connection, parts: TurnParts, turns: int) -> float:
    """Turns per second of the bare loop."""
    # The events spread over the commits as evenly as they go.
    per_commit = [
        parts.events // parts.commits + (i < parts.events % parts.commits) for i in range(parts.commits)
    ]
    started = time.perf_counter()
    for _ in range(turns):
        for count in per_commit:
            db.execute("BEGIN IMMEDIATE")
            for _ in range(count):
                db.execute(
                    "INSERT INTO events(type, session_id, at, payload) VALUES (?, ?, ?, ?)",
                    ("session.step.started", _SESSION, "2026-01-01T00:00:00.000Z", _PAYLOAD),
                )
            db.execute("COMMIT")
        async with trio.open_nursery() as nursery:
            for _ in range(parts.spawns):
                nursery.start_soon(trio.lowlevel.checkpoint)
    return turns / (time.perf_counter() - started)


async def measure_baseline(workdir: Path, sizes: Sizes) -> dict[str, float]:
    """``baseline_turns_per_s`` in both modes, and the parts of a turn it was built from."""
    parts = await count_turn_parts(workdir, sizes)
    figures: dict[str, float] = {
        "turn_commits": parts.commits,
        "turn_events": parts.events,
        "turn_task_spawns": parts.spawns,
    }
    for mode in MODES:
        db = _open_bare(workdir / f"baseline-{mode}.sqlite", mode)
        try:
            await _bare_turns(db, parts, max(1, sizes.turns // 10))  # warm up
            rates = [await _bare_turns(db, parts, sizes.turns) for _ in range(sizes.repeats)]
        finally:
            db.close()
        figures["baseline_turns_per_s" + ("" if mode == "full" else "_normal")] = median(rates)
    return figures
