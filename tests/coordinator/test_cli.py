"""The command line as a user runs it: real ``python -m coordinator`` processes, signals and exit codes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import apsw
import attrs
import httpx
import pytest

from coordinator.config import load_config
from coordinator.store import open_store

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 30.0
"""Seconds a process may take to start, answer or exit before the test fails."""


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COORDINATOR_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def coordinator(*args: str) -> list[str]:
    return [sys.executable, "-m", "coordinator", *args]


def run_cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        coordinator(*args), cwd=tmp_path, env=cli_env(**env), capture_output=True, text=True, timeout=DEADLINE
    )


@attrs.frozen
class Served:
    process: subprocess.Popen[bytes]
    url: str
    stderr: Path


def read_line(process: subprocess.Popen[bytes]) -> str:
    """The next line the process prints on stdout, waiting at most ``DEADLINE``."""
    assert process.stdout is not None
    line = b""
    deadline = time.monotonic() + DEADLINE
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            if not selector.select(max(0.0, deadline - time.monotonic())):
                raise AssertionError(f"no line from the process within {DEADLINE}s; got {line!r}")
            byte = os.read(process.stdout.fileno(), 1)
            if not byte:
                raise AssertionError(f"the process closed stdout (exit {process.wait()}); got {line!r}")
            line += byte
    return line.decode().rstrip("\n")


@contextlib.contextmanager
def serving(tmp_path: Path, *args: str, **env: str) -> Iterator[Served]:
    """``coordinator serve`` on a free port in ``tmp_path``, killed if the test did not stop it."""
    stderr = tmp_path / "serve.stderr"
    with stderr.open("wb") as sink:
        process = subprocess.Popen(
            coordinator("serve", "--db", str(tmp_path / "db.sqlite"), "--port", "0", *args),
            cwd=tmp_path,
            env=cli_env(**env),
            stdout=subprocess.PIPE,
            stderr=sink,
        )
    try:
        announced = read_line(process)
        assert announced.startswith("coordinator listening on http://127.0.0.1:"), announced
        url = announced.rsplit(" ", 1)[1]
        assert httpx.get(f"{url}/health", timeout=DEADLINE).json() == {"status": "ok"}
        yield Served(process=process, url=url, stderr=stderr)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_serve_shuts_down_cleanly_on_a_signal(tmp_path: Path, signum: signal.Signals) -> None:
    """An operator's SIGTERM or Ctrl-C is a graceful shutdown, which supervisors expect to exit 0."""
    with serving(tmp_path) as served:
        created = httpx.post(f"{served.url}/api/session", json={"title": "kept"}, timeout=DEADLINE)
        assert created.status_code == 201
        served.process.send_signal(signum)
        assert served.process.wait(timeout=DEADLINE) == 0
    logged = [json.loads(line)["event"] for line in served.stderr.read_text().splitlines()]
    assert logged[-3:] == ["signal_received", "server_stopping", "server_stopped"]
    with serving(tmp_path) as again:
        sessions = httpx.get(f"{again.url}/api/session", timeout=DEADLINE).json()
        assert [s["title"] for s in sessions] == ["kept"]
        again.process.send_signal(signal.SIGTERM)
        assert again.process.wait(timeout=DEADLINE) == 0


def test_a_bad_config_key_exits_2_with_one_line_naming_it(tmp_path: Path) -> None:
    """A typo in the config must stop the start with a message that points at the key."""
    (tmp_path / "coordinator.toml").write_text("[server]\nprot = 4097\n")
    result = run_cli(tmp_path, "serve", "--config", "coordinator.toml")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "coordinator.toml: [server].prot" in result.stderr and "unknown key" in result.stderr
    assert result.stdout == ""


def test_a_config_error_found_while_starting_exits_2(tmp_path: Path) -> None:
    """A missing model script is only found when the coordinator opens; it is still a config error."""
    (tmp_path / "coordinator.toml").write_text('[model]\nprovider = "scripted"\nscript = "missing.json"\n')
    result = run_cli(tmp_path, "serve", "--config", "coordinator.toml", "--db", "db.sqlite", "--port", "0")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "missing.json" in result.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("serve", "--port", "many"), "--port"),
        (("serve", "--port", "70000"), "[server].port"),
        (("serve", "--colour"), "--colour"),
        (("frobnicate",), "frobnicate"),
        (("events", "--after", "x"), "--after"),
        (("reply", "ses_x", "per_x", "maybe"), "invalid choice: 'maybe'"),
        (("prompt", "ses_x"), "TEXT"),
    ],
)
def test_bad_usage_exits_2_with_one_line(tmp_path: Path, args: tuple[str, ...], fragment: str) -> None:
    """Usage errors are one line on stderr, not a usage dump, so that scripts can log them."""
    result = run_cli(tmp_path, *args)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("coordinator: error: ") and fragment in result.stderr


def test_a_taken_port_exits_2_with_one_line_before_anything_else(tmp_path: Path) -> None:
    """A port another program holds: one line naming it, exit 2, and nothing printed before it (no
    log line of a coordinator that started for nothing)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = run_cli(tmp_path, "serve", "--db", "db.sqlite", "--port", port)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"coordinator: error: port {port} on 127.0.0.1 is already in use (another server?); pick another with --port"
    ]
    assert not (tmp_path / "db.sqlite").exists()


@pytest.mark.parametrize(
    "db", ["mysql://u@h/d", "postgresql+psycopg://u@h/d", "postgresql:/typo", "sqlite:db", "http://x", " "]
)
def test_a_db_that_is_neither_a_path_nor_a_postgresql_url_exits_2_with_one_line(
    tmp_path: Path, db: str
) -> None:
    """``--db`` and ``[server] db`` take a filesystem path or a postgresql:// (postgres://) URL: anything
    else is one line naming the value and what is accepted, before anything starts."""
    result = run_cli(tmp_path, "serve", "--db", db, "--port", "0")
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert "a filesystem path" in line and "postgresql://" in line
    assert db.strip() == "" or repr(db) in line
    (tmp_path / "c.toml").write_text(f'[server]\ndb = "{db}"\n')
    from_file = run_cli(tmp_path, "serve", "--config", "c.toml", "--port", "0")
    assert from_file.returncode == 2 and len(from_file.stderr.splitlines()) == 1
    assert "[server].db" in from_file.stderr
    assert not any(path.name.startswith(("postgresql", "mysql", "sqlite")) for path in tmp_path.iterdir())


@pytest.mark.slow
def test_events_prints_the_stored_events_as_json_lines(tmp_path: Path) -> None:
    """``coordinator events`` without --follow prints what is stored, one JSON object a line, and exits."""
    with serving(tmp_path) as served:
        for title in ("a", "b"):
            httpx.post(f"{served.url}/api/session", json={"title": title}, timeout=DEADLINE)
        result = run_cli(tmp_path, "events", "--url", served.url)
        after_first = run_cli(tmp_path, "events", "--url", served.url, "--after", "1")
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=DEADLINE) == 0
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(e["seq"], e["type"], e["session"]["title"]) for e in events] == [
        (1, "session.created", "a"),
        (2, "session.created", "b"),
    ]
    assert [json.loads(line)["seq"] for line in after_first.stdout.splitlines()] == [2]


@pytest.mark.slow
def test_events_follow_prints_live_events_and_the_token_comes_from_the_environment(tmp_path: Path) -> None:
    """--follow streams new events as they happen; COORDINATOR_TOKEN protects the API and opens it."""
    with serving(tmp_path, COORDINATOR_TOKEN="s3cret") as served:
        assert httpx.get(f"{served.url}/api/session", timeout=DEADLINE).status_code == 401
        refused = run_cli(tmp_path, "events", "--url", served.url)
        assert refused.returncode == 1 and "Unauthorized" in refused.stderr
        follower = subprocess.Popen(
            coordinator("events", "--url", served.url, "--follow"),
            cwd=tmp_path,
            env=cli_env(COORDINATOR_TOKEN="s3cret"),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            headers = {"Authorization": "Bearer s3cret"}
            httpx.post(f"{served.url}/api/session", json={"title": "live"}, headers=headers, timeout=DEADLINE)
            event = json.loads(read_line(follower))
            assert (event["type"], event["session"]["title"]) == ("session.created", "live")
            follower.send_signal(signal.SIGINT)
            assert follower.wait(timeout=DEADLINE) == 0
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
            assert follower.stdout is not None
            follower.stdout.close()
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=DEADLINE) == 0


def test_version_and_a_bare_command_teach_instead_of_failing(tmp_path: Path) -> None:
    """A newcomer's first two tries: both must answer, not print an error."""
    version = run_cli(tmp_path, "--version")
    assert (version.returncode, version.stdout.strip()) == (0, "coordinator 0.1.0")
    bare = run_cli(tmp_path)
    assert bare.returncode == 0 and bare.stderr == ""
    assert bare.stdout.startswith("usage: coordinator")
    for command in ("serve", "init", "sessions", "prompt", "reply", "interrupt", "resume", "events", "demo"):
        assert command in bare.stdout, command


def test_init_writes_the_shipped_example_and_refuses_to_overwrite_it(tmp_path: Path) -> None:
    """The example must be a config the server accepts, and init must never clobber a user's edits."""
    shipped = (REPO / "coordinator" / "coordinator.example.toml").read_text()
    written = run_cli(tmp_path, "init")
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "coordinator.example.toml").read_text() == shipped
    config = load_config(tmp_path / "coordinator.example.toml")
    assert (config.server.host, config.server.port, config.model.provider) == ("127.0.0.1", 4096, "scripted")
    assert [(r.action, r.effect) for r in config.permission] == [("*", "allow"), ("shell", "ask")]
    (tmp_path / "coordinator.example.toml").write_text("# mine\n")
    refused = run_cli(tmp_path, "init")
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    assert "coordinator.example.toml: exists; pass --force" in refused.stderr
    assert (tmp_path / "coordinator.example.toml").read_text() == "# mine\n"
    forced = run_cli(tmp_path, "init", "--force")
    assert forced.returncode == 0 and (tmp_path / "coordinator.example.toml").read_text() == shipped
    assert run_cli(tmp_path, "init", "coordinator.toml").returncode == 0
    assert (tmp_path / "coordinator.toml").read_text() == shipped


def test_serve_refuses_a_non_loopback_host_without_a_token(tmp_path: Path) -> None:
    """Anyone who reaches a tokenless server on the network could run its shell tool: refuse it."""
    refused = run_cli(tmp_path, "serve", "--host", "0.0.0.0", "--db", "db.sqlite")
    assert refused.returncode == 2 and refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "refusing to serve 0.0.0.0 without a token" in refused.stderr and "--insecure" in refused.stderr
    assert not (tmp_path / "db.sqlite").exists()
    # 203.0.113.1 (TEST-NET-3) is no address of this machine: getting as far as binding it shows that the
    # token check let the start go on, and no socket is ever opened.
    for args, env in ((("--insecure",), {}), ((), {"COORDINATOR_TOKEN": "s3cret"})):
        started = run_cli(tmp_path, "serve", "--host", "203.0.113.1", "--db", "db.sqlite", *args, **env)
        assert started.returncode == 1, started.stderr
        assert "cannot listen on 203.0.113.1" in started.stderr.splitlines()[-1]


def _damage_events_page(db: Path) -> None:
    """A database whose events table has a page of garbage, as a failing disk leaves it."""
    with open_store(str(db)) as store:
        for _ in range(200):
            store.read.sql.run(
                "INSERT INTO events(type, session_id, at, payload) VALUES ('x', NULL, 'now', ?)", ("y" * 200,)
            )
    connection = apsw.Connection(str(db))
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = connection.execute("SELECT rootpage FROM sqlite_master WHERE name = 'events'").fetchall()[0][0]
    page_size = connection.execute("PRAGMA page_size").fetchall()[0][0]
    connection.close()
    with db.open("r+b") as file:
        file.seek((root - 1) * page_size)
        file.write(b"\xa5" * page_size)


@pytest.mark.parametrize("damage", ["corrupt events page", "not a database"])
def test_a_store_that_cannot_be_read_is_one_line_at_start(tmp_path: Path, damage: str) -> None:
    """A damaged database must say which file and what SQLite found, not print a traceback."""
    db = tmp_path / "damaged.sqlite"
    if damage == "not a database":
        db.write_text("these are my notes, not a database\n" * 100)
    else:
        _damage_events_page(db)
    result = run_cli(tmp_path, "serve", "--db", str(db), "--port", "0")
    assert result.returncode == 1 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    line = result.stderr.strip()
    assert line.startswith(f"coordinator: error: {db}: ")
    assert ("CorruptError" if damage != "not a database" else "NotADBError") in line


def test_serving_tunes_the_collector_of_its_own_process_only() -> None:
    """``coordinator serve`` freezes what start-up built and collects the youngest generation less
    often; the embedding API (``open_coordinator``) never touches its host's collector."""
    import gc

    from coordinator.server.serve import SERVING_GC_THRESHOLDS, tune_gc_for_serving

    before = gc.get_threshold()
    try:
        tune_gc_for_serving()
        assert gc.get_threshold() == SERVING_GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
    source = (REPO / "coordinator" / "_open.py").read_text() + (
        REPO / "coordinator" / "_coordinator.py"
    ).read_text()
    assert "gc." not in source


def test_principal_add_prints_a_token_once_and_keeps_only_its_hash(tmp_path: Path) -> None:
    """``coordinator principal add NAME``: the token on stdout, the entry (its SHA-256) in the config
    the server reads; a taken or malformed name is one line, exit 2, and changes nothing."""
    config = tmp_path / "coordinator.toml"
    config.write_text("[server]\nport = 4096\n")
    added = run_cli(tmp_path, "principal", "add", "ada")
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert len(token) >= 32 and token not in config.read_text()
    loaded = load_config(config).principal
    assert [(p.name, p.role) for p in loaded] == [("ada", "user")]
    assert loaded[0].token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    admin = run_cli(tmp_path, "principal", "add", "root", "--role", "admin", "--config", str(config))
    assert admin.returncode == 0 and [p.role for p in load_config(config).principal] == ["user", "admin"]
    text = config.read_text()
    for bad in (
        ("principal", "add", "ada"),
        ("principal", "add", "Not Valid"),
        ("principal", "add", "token"),
    ):
        refused = run_cli(tmp_path, *bad)
        assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert config.read_text() == text
