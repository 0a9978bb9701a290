"""``make soak``: sessions created, prompted and deleted in a loop with retention on, for minutes.

Not part of ``make bench`` or CI. ``WORKERS`` loops each create a session, run ``TURNS_PER_SESSION``
turns in it (the scripted model: a no-op tool call, then text), and keep it in a window of the
``WINDOW`` newest sessions; the oldest beyond the window is deleted. Retention keeps
``KEEP_SECONDS`` of events (``[store] keep_events_days`` as a fraction of a day, the real setting,
no test hook), so the events of the sessions still in the window are pruned by the background task
while the deletes remove whole sessions. One subscriber follows every event, as a server's page would.

Each minute it prints the turns done, this process's RSS and the database's size on disk (the file
and its WAL); at the end a summary. What should hold: RSS and the file size level off after the
first minutes instead of growing with the turns done.

Run: ``SOAK_MINUTES=30 make soak`` (default 30), or ``python -m bench.soak --minutes 1``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import attrs
import trio

from bench.harness import bench_config, quiet_logging, rss_kib, tool_then_text_script
from coordinator import Coordinator, open_coordinator
from coordinator.config import StoreConfig
from coordinator.models.scripted import ScriptedModel

WORKERS = 4
TURNS_PER_SESSION = 2
WINDOW = 3000
"""Sessions kept alive (their events are left to retention); older ones are deleted."""

KEEP_SECONDS = 20.0
"""Retention's window: events of settled turns older than this are pruned (every 10 s)."""


@attrs.define
class Tally:
    turns: int = 0
    created: int = 0
    deleted: int = 0
    events_seen: int = 0
    samples: list[dict[str, Any]] = attrs.Factory(list)


def disk_mib(db: Path) -> float:
    """The database's size on disk: the file and its write-ahead log."""
    total = sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists())
    return total / 2**20


def file_mib(path: Path) -> float:
    return path.stat().st_size / 2**20 if path.exists() else 0.0


async def run_turn(coordinator: Coordinator, session_id: str) -> None:
    """Prompt the session and wait for its ``session.idle``."""
    after = coordinator.published_seq
    turn_id = await coordinator.prompt(session_id, "go")
    subscription = coordinator.subscribe(after=after, session_id=session_id)
    try:
        async for event in subscription:
            if event.type == "session.idle" and event.payload["turn_id"] == turn_id:
                if event.payload["outcome"] != "succeeded":
                    raise RuntimeError(f"a soak turn ended {event.payload['outcome']}")
                return
    finally:
        await subscription.aclose()


async def worker(coordinator: Coordinator, window: deque[str], tally: Tally, until: float) -> None:
    while time.monotonic() < until:
        session = await coordinator.create_session("soak")
        tally.created += 1
        for _ in range(TURNS_PER_SESSION):
            await run_turn(coordinator, session.id)
            tally.turns += 1
        window.append(session.id)
        while len(window) > WINDOW:
            await coordinator.delete_session(window.popleft())
            tally.deleted += 1


async def follow_everything(coordinator: Coordinator, tally: Tally) -> None:
    async for _ in coordinator.subscribe(after=coordinator.published_seq):
        tally.events_seen += 1


def sample(coordinator: Coordinator, db: Path, tally: Tally, started: float) -> dict[str, Any]:
    read = coordinator.store.read
    row = {
        "minute": round((time.monotonic() - started) / 60, 1),
        "turns": tally.turns,
        "sessions_alive": tally.created - tally.deleted,
        "rss_mib": round(rss_kib() / 1024, 1),
        "db_mib": round(disk_mib(db), 2),
        "file_mib": round(file_mib(db), 2),
        "wal_mib": round(file_mib(Path(f"{db}-wal")), 2),
        "free_pages": read.page_counts()[0],
        "events_kept": _count_events(coordinator),
        "horizon": read.event_horizon(),
        "last_seq": read.last_seq(),
    }
    tally.samples.append(row)
    print("  ".join(f"{key}={value}" for key, value in row.items()), flush=True)
    return row


def _count_events(coordinator: Coordinator) -> int:
    return int(coordinator.store.read.sql.all("SELECT COUNT(*) FROM events")[0][0])


async def soak(folder: Path, minutes: float) -> Tally:
    config = bench_config(folder, "soak.sqlite")
    config = attrs.evolve(config, store=StoreConfig(keep_events_days=KEEP_SECONDS / 86400))
    model = ScriptedModel.from_json(tool_then_text_script(TURNS_PER_SESSION))
    db = Path(config.server.db)
    tally = Tally()
    window: deque[str] = deque()
    async with open_coordinator(config, model=model) as coordinator:
        started = time.monotonic()
        until = started + minutes * 60
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow_everything, coordinator, tally)
            async with trio.open_nursery() as workers:
                for _ in range(WORKERS):
                    workers.start_soon(worker, coordinator, window, tally, until)
                workers.start_soon(_sample_every_minute, coordinator, db, tally, started, until)
            sample(coordinator, db, tally, started)
            nursery.cancel_scope.cancel()
    return tally


async def _sample_every_minute(
    coordinator: Coordinator, db: Path, tally: Tally, started: float, until: float
) -> None:
    await trio.sleep(5)  # the first reading after warm-up: imports, caches, the first pages
    sample(coordinator, db, tally, started)
    while time.monotonic() + 60 <= until:
        await trio.sleep(60)
        sample(coordinator, db, tally, started)


def summary(tally: Tally, minutes: float) -> str:
    first, last = tally.samples[0], tally.samples[-1]
    rss = [s["rss_mib"] for s in tally.samples]
    size = [s["db_mib"] for s in tally.samples[1:]] or [first["db_mib"]]
    files = [s["file_mib"] for s in tally.samples[1:]] or [first["file_mib"]]
    return (
        f"soak: {minutes:g} min, {tally.turns} turns, {tally.created} sessions created, "
        f"{tally.deleted} deleted, {tally.events_seen} events followed\n"
        f"  RSS MiB: start {first['rss_mib']} end {last['rss_mib']} max {max(rss)}\n"
        f"  database MiB (file + WAL) after the first reading: min {min(size)} max {max(size)} "
        f"end {last['db_mib']}; the file alone: min {min(files)} max {max(files)} end {last['file_mib']}\n"
        f"  events kept at the end: {last['events_kept']} (horizon {last['horizon']}, last seq {last['last_seq']})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    default = float(os.environ.get("SOAK_MINUTES", "30"))
    parser.add_argument("--minutes", type=float, default=default, help=f"how long (default {default:g})")
    options = parser.parse_args(argv)
    quiet_logging()
    with tempfile.TemporaryDirectory(prefix="coordinator-soak-") as folder:
        tally = trio.run(soak, Path(folder), options.minutes)
    print(summary(tally, options.minutes), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
