"""Process-level chaos: the real server, driven over HTTP, stopped (SIGTERM) or killed (SIGKILL) at random.

A round starts ``python -m coordinator serve`` on a fresh database, with an MCP server of its own
(``coordinator/chaos/mcp_server.py``, whose process group must never outlive the coordinator that
started it), creates sessions and prompts over
HTTP, answers permission requests and forms as a person would, sometimes interrupts a turn, and at a
random moment sends SIGTERM (a graceful shutdown) or SIGKILL (a crash); then it starts the server again
on the same database, one to three times, and a last time until every turn has settled. The same
invariants as in-process are then checked from outside: over the database file, the servers' logs
(``reasonless_cancel``) and this process's children.

The server has two principals (users) and an admin token: sessions are made by either user, the
person at the keyboard answers as the admin, and each user follows the server's whole event stream
(deltas included) from every life of the server: no event of another's session may reach it
(invariant 15).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import attrs
import httpx
import trio

from coordinator import errors
from coordinator.chaos import processes
from coordinator.chaos.campaign import scratch_root
from coordinator.chaos.invariants import check_run
from coordinator.chaos.known import explain
from coordinator.chaos.record import PhaseRecord, RunRecord, read_view
from coordinator.client import CoordinatorClient
from coordinator.statuses import TurnStatus
from coordinator.store import open_read_view

CONFIG = """\
[server]
db = "{db}"
shutdown_grace = 5
token = "{admin}"

[[principal]]
name = "ada"
token_sha256 = "{ada}"

[[principal]]
name = "bob"
token_sha256 = "{bob}"

[model]
provider = "scripted"
script = "script.json"

[[plugin]]
entry = "coordinator.chaos.tools:slow"

[[mcp]]
name = "chaos"
command = ["{python}", "{mcp_server}"]

[[permission]]
action = "*"
effect = "allow"

[[permission]]
action = "shell"
effect = "ask"
"""
SCRIPT = [
    {"tool_calls": [{"id": "a", "name": "slow", "input": {"seconds": 0.3}}], "delay": 0.1},
    {"tool_calls": [{"id": "b", "name": "shell", "input": {"command": "sleep 0.2"}}]},
    {
        "tool_calls": [
            {"id": "c", "name": "question", "input": {"questions": [{"id": "q", "prompt": "Go on?"}]}}
        ]
    },
    {
        "tool_calls": [
            {"id": "d", "name": "slow", "input": {"seconds": 0.2}},
            {"id": "e", "name": "slow", "input": {"seconds": 0.4}},
        ]
    },
    {"tool_calls": [{"id": "f", "name": "chaos__wait", "input": {"seconds": 0.3}}]},
    {"text": "done"},
]
MCP_SERVER_FILE = Path(__file__).with_name("mcp_server.py")  # run as a file: no package to import
START_SECONDS = 30.0  # for a server to print where it listens
SETTLE_SECONDS = 30.0  # for the last server to settle every turn
STOP_SECONDS = 15.0  # for a server to exit after SIGTERM (its shutdown grace is 5s)
POLL_SECONDS = 0.05
_FAULTS = {"SIGTERM": "shutdown", "SIGKILL": "crash"}
# Who drives a round: the admin answers and interrupts; each user makes and prompts its own sessions.
TOKENS = {"admin": "chaos-admin-token", "ada": "chaos-ada-token", "bob": "chaos-bob-token"}
USERS = ("ada", "bob")


@attrs.frozen(kw_only=True)
class RoundResult:
    """What a round did to the server and which invariants failed."""

    number: int
    signals: tuple[str, ...]
    violations: tuple[str, ...]
    applied: tuple[tuple[str, str], ...]  # (fault, where), as the in-process campaign reports them
    phases: tuple[str, ...]
    seconds: float


def run_process_chaos(numbers: list[int], seed: int, *, out: TextIO) -> bool:
    """Run rounds ``numbers``; print one line each, the violations and a replay line; True when every
    invariant held."""
    results = []
    with scratch_root() as scratch, processes.adopting_orphans():
        for number in numbers:
            result = trio.run(run_round, seed, number, Path(scratch))
            results.append(result)
            kills = " ".join(result.signals)
            verdict = "ok" if not result.violations else f"{len(result.violations)} violation(s)"
            out.write(f"process round {number} (seed {seed}): {kills}, {result.seconds:.1f}s: {verdict}\n")
            names, _ = explain(result)
            for name in names:
                out.write(f"  known: {name}\n")
            for violation in result.violations:
                out.write(f"  {violation}\n")
            if result.violations:
                out.write(f"  replay:   coordinator chaos --runs 0 --seed {seed} --round {number}\n")
    return all(not r.violations for r in results)


async def run_round(seed: int, number: int, root: Path) -> RoundResult:
    """One round: start, drive, stop or kill, restart... then check. See the module docstring."""
    started = time.perf_counter()
    rng = random.Random(f"{seed}:process:{number}")
    folder = root / f"round-{number}"
    folder.mkdir()
    digests = {name: hashlib.sha256(TOKENS[name].encode()).hexdigest() for name in USERS}
    (folder / "config.toml").write_text(
        CONFIG.format(
            db=folder / "db.sqlite",
            admin=TOKENS["admin"],
            python=sys.executable,
            mcp_server=MCP_SERVER_FILE,
            **digests,
        )
    )
    (folder / "script.json").write_text(json.dumps(SCRIPT))
    record = RunRecord(track_intents=False)
    owners: dict[str, str] = {}  # session id -> the user that made it
    signals = [rng.choice(("SIGTERM", "SIGKILL")) for _ in range(rng.choice((1, 2, 3)))]
    for life, sent in enumerate([*signals, None]):
        await _live(record, owners, folder, life, sent, rng)
    view = record.phases[-1].view
    violations = check_run(record, view, leftovers=await orphans())
    interrupts = [("interrupt", "http") for _ in record.interrupted_sessions]
    return RoundResult(
        number=number,
        signals=tuple(signals),
        violations=tuple(dict.fromkeys(str(v) for v in violations)),
        applied=(*((_FAULTS[s], "signal") for s in signals), *interrupts),
        phases=tuple(p.end for p in record.phases),
        seconds=time.perf_counter() - started,
    )


async def _live(
    record: RunRecord, owners: dict[str, str], folder: Path, life: int, sent: str | None, rng: random.Random
) -> None:
    """One server's life: start it, drive it, and stop it with ``sent`` (None: once all has settled)."""
    db = folder / "db.sqlite"
    first_seq = _read(db, lambda read: read.last_seq()) if db.exists() else 0
    log_path = folder / f"server-{life}.log"
    with log_path.open("wb") as log:
        proc, url = await _start(folder, log)
        seen: dict[str, list[dict[str, Any]]] = {user: [] for user in USERS}
        try:
            async with CoordinatorClient(url, TOKENS["admin"], timeout=5) as client:
                async with trio.open_nursery() as nursery:
                    for user in USERS:
                        nursery.start_soon(_follow, url, user, seen[user])
                    if life == 0:
                        await _prompt(url, record, owners, rng)
                    nursery.start_soon(_respond, client, record)
                    if sent is None:
                        await _until_settled(record, db)
                    else:
                        await _wander(client, record, rng)
                    nursery.cancel_scope.cancel()
        finally:
            code = None
            with trio.move_on_after(STOP_SECONDS + 5, shield=True):
                code = await _stop(proc, sent or "SIGTERM")
    for user in USERS:
        sessions = {e["session_id"] for e in seen[user] if e.get("session_id") is not None}
        strangers = sorted(s for s in sessions if owners.get(s) != user)
        if strangers:
            record.violate(
                15, f"server {life}: {user}'s event stream carried other sessions' events: {strangers}"
            )
    lines = log_path.read_text(errors="replace").splitlines()
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    record.reasonless += [e for e in entries if e.get("event") == "reasonless_cancel"]
    instance = next((e["instance_id"] for e in entries if e.get("event") == "coordinator_started"), "")
    if sent != "SIGKILL" and code != 0:
        record.violate(6, f"server {life} exited with {code} after SIGTERM")
    view = _read(db, lambda read: read_view(read, record.sessions, list(record.turns)))
    end = "crash" if sent == "SIGKILL" else ("done" if sent is None else "shutdown")
    record.phases.append(
        PhaseRecord(
            number=life,
            end=end,
            instance_id=instance,
            first_seq=first_seq,
            shutdown=sent != "SIGKILL",
            store_failed=False,
            view=view,
        )
    )
    await orphans()  # reap what a killed server's tools left (they end by themselves)


def _read(db: Path, reader: Any) -> Any:
    with open_read_view(str(db)) as view:
        return reader(view)


async def _start(folder: Path, log: Any) -> tuple[trio.Process, str]:
    command = [
        sys.executable,
        "-m",
        "coordinator",
        "serve",
        "--config",
        str(folder / "config.toml"),
        "--port",
        "0",
    ]
    proc = await trio.lowlevel.open_process(
        command, cwd=folder, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=environment()
    )
    assert proc.stdout is not None
    seen = b""
    with trio.fail_after(START_SECONDS):
        while b"listening on " not in seen or not seen.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"the server exited before listening: {seen!r}")
            seen += chunk
    url = seen.decode().split("listening on ", 1)[1].split()[0]
    return proc, url


def environment() -> dict[str, str]:
    """This environment, with the checkout importable (the plugin lives in ``coordinator.chaos``)."""
    checkout = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{checkout}{os.pathsep}{path}" if path else checkout}


async def _stop(proc: trio.Process, sent: str) -> int | None:
    proc.send_signal(getattr(signal, sent))
    with trio.move_on_after(STOP_SECONDS):
        return await proc.wait()
    proc.kill()
    return await proc.wait()


async def _prompt(url: str, record: RunRecord, owners: dict[str, str], rng: random.Random) -> None:
    for index in range(rng.choice((1, 2, 3))):
        user = USERS[index % len(USERS)]
        async with CoordinatorClient(url, TOKENS[user], timeout=5) as client:
            session = await client.create_session("process chaos")
            owners[session.id] = user
            record.sessions.append(session.id)
            for n in range(rng.choice((1, 2))):
                record.turns[await client.prompt(session.id, f"prompt {n}")] = session.id


async def _follow(url: str, user: str, seen: list[dict[str, Any]]) -> None:
    """The user's whole event stream, deltas included, from the server's first event, until cancelled."""
    async with CoordinatorClient(url, TOKENS[user], timeout=5) as client:
        try:
            async for event in client.events(after=0, deltas=True):
                seen.append(event)
        except (httpx.HTTPError, errors.ClientError):
            pass  # the server stops: what it sent is checked


async def _wander(client: CoordinatorClient, record: RunRecord, rng: random.Random) -> None:
    """Let the server work a random while, sometimes interrupting a session on the way."""
    await trio.sleep(rng.uniform(0.1, 1.5))
    if record.sessions and rng.random() < 0.3:
        session_id = rng.choice(record.sessions)
        try:
            if await client.interrupt(session_id):
                record.interrupted_sessions.add(session_id)
        except (httpx.HTTPError, errors.ClientError):
            pass
        await trio.sleep(rng.uniform(0, 0.5))


async def _respond(client: CoordinatorClient, record: RunRecord) -> None:
    """Answer every pending permission (once) and form (submitted), polling, until cancelled."""
    while True:
        try:
            for request in await client.pending_permissions():
                await _quietly(client.reply_permission(request.session_id, request.id, "once"))
            for session_id in record.sessions:
                for form in await client.pending_forms(session_id):
                    answers = {q.id: "yes" for q in form.questions}
                    await _quietly(client.submit_form(session_id, form.id, answers))
        except (httpx.HTTPError, errors.ClientError):
            pass  # the server is stopping, or a request was settled meanwhile
        await trio.sleep(POLL_SECONDS)


async def _quietly(call: Any) -> None:
    try:
        await call
    except errors.ClientError:
        pass  # settled meanwhile: a stop revoked it


async def _until_settled(record: RunRecord, db: Path) -> None:
    with trio.move_on_after(SETTLE_SECONDS):
        while True:
            rows = _read(db, lambda read: [read.get_turn(t) for t in record.turns])
            if all(row is not None and row.status == TurnStatus.SETTLED for row in rows):
                return
            await trio.sleep(POLL_SECONDS * 4)
    record.violate(1, f"the last server did not settle every turn within {SETTLE_SECONDS:g}s")


async def orphans() -> list[str]:
    """Children left after the servers exited (killed servers' tools end by themselves): reaped."""
    for _ in range(40):
        if not processes.leftovers():
            return []
        await trio.sleep(POLL_SECONDS)
    return processes.leftovers()
