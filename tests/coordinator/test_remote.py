"""The CLI commands that talk to a running server (``sessions``, ``prompt``, ``reply``, ``interrupt``, ``resume``,
``events --session``), as real processes against a real ``coordinator serve``."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.coordinator.test_cli import DEADLINE, cli_env, coordinator, run_cli, serving


@pytest.mark.slow
def test_the_remote_commands_find_the_server_by_the_config_and_the_token_by_the_environment(
    tmp_path: Path,
) -> None:
    """A person runs these beside `serve`: the config names the server, COORDINATOR_TOKEN lets them in."""
    with serving(tmp_path, COORDINATOR_TOKEN="s3cret") as served:
        port = served.url.rsplit(":", 1)[1]
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "coordinator.toml").write_text(f"[server]\nport = {port}\n")
        refused = run_cli(elsewhere, "sessions")
        assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1
        assert f"{served.url}: Unauthorized" in refused.stderr

        token = {"COORDINATOR_TOKEN": "s3cret"}
        assert run_cli(elsewhere, "sessions", **token).stdout == ""
        headers = {"Authorization": "Bearer s3cret"}
        session = httpx.post(f"{served.url}/api/session", json={"title": "cli"}, headers=headers).json()
        listed = run_cli(elsewhere, "sessions", **token)
        assert listed.stdout == f"{session['id']}\tidle\t-\tcli\n"
        as_json = run_cli(elsewhere, "sessions", "--json", **token)
        assert json.loads(as_json.stdout)["id"] == session["id"]

        prompted = run_cli(elsewhere, "prompt", session["id"], "hello", **token)
        assert prompted.returncode == 0 and prompted.stdout.startswith("turn_")
        until = run_cli(
            elsewhere, "events", "--session", session["id"], "--follow", "--until", "session.idle", **token
        )
        events = [json.loads(line) for line in until.stdout.splitlines()]
        assert [e["type"] for e in events][-2:] == ["session.execution.succeeded", "session.idle"]
        assert {e["session_id"] for e in events} == {session["id"]}
        assert events[1]["turn_id"] == prompted.stdout.strip()
        with_deltas = run_cli(elsewhere, "events", "--session", session["id"], "--deltas", **token)
        assert with_deltas.returncode == 0 and len(with_deltas.stdout.splitlines()) >= len(events)
        interrupted = run_cli(elsewhere, "interrupt", session["id"], **token)
        assert (interrupted.returncode, interrupted.stdout) == (0, "false\n")
        idle = run_cli(elsewhere, "resume", session["id"], **token)
        assert idle.returncode == 1 and len(idle.stderr.splitlines()) == 1
        assert f"NothingToResume: session '{session['id']}' has no suspended turn" in idle.stderr

        unknown = run_cli(elsewhere, "prompt", "ses_unknown", "hi", **token)
        assert unknown.returncode == 1 and len(unknown.stderr.splitlines()) == 1
        assert "SessionNotFound: no session 'ses_unknown'" in unknown.stderr
        reply = run_cli(elsewhere, "reply", session["id"], "per_unknown", "once", **token)
        assert reply.returncode == 1 and "PermissionNotFound" in reply.stderr
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=DEADLINE) == 0
    gone = run_cli(elsewhere, "sessions", **token)
    assert gone.returncode == 1 and len(gone.stderr.splitlines()) == 1
    assert "cannot reach the server at" in gone.stderr


@pytest.mark.slow
def test_steering_the_queue_and_a_soft_stop_from_the_command_line(tmp_path: Path) -> None:
    """``prompt --steer|--interrupt``, ``queue``, ``cancel``, ``interrupt --after-step`` and
    ``reply --input``: a person steers a running turn and manages its queue without curl."""
    (tmp_path / "coordinator.toml").write_text(
        '[[permission]]\naction = "*"\nresource = "*"\neffect = "allow"\n\n'
        '[[permission]]\naction = "shell"\nresource = "*"\neffect = "ask"\n'
    )
    with serving(tmp_path, "--config", str(tmp_path / "coordinator.toml")) as served:
        session = httpx.post(f"{served.url}/api/session", json={"title": "cli"}).json()

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return run_cli(tmp_path, *args, "--url", served.url)

        sid = session["id"]
        turn_id = cli("prompt", sid, "run: echo first").stdout.strip()
        asked = cli("events", "--session", sid, "--follow", "--until", "permission.asked")
        request_id = json.loads(asked.stdout.splitlines()[-1])["request"]["id"]

        steered = cli("prompt", sid, "and more", "--steer", "--expect", turn_id)
        assert steered.returncode == 0
        steer_turn, steer_id = steered.stdout.strip().split("\t")
        assert steer_turn == turn_id and steer_id.startswith("steer")
        mismatch = cli("prompt", sid, "x", "--steer", "--expect", "turn_other")
        assert mismatch.returncode == 1 and "TurnMismatch" in mismatch.stderr

        later = cli("prompt", sid, "later").stdout.strip()
        dropped = cli("prompt", sid, "dropped").stdout.strip()
        listed = cli("queue", sid).stdout.splitlines()
        assert [line.split("\t")[0] for line in listed] == [later, dropped]
        assert listed[0].split("\t")[2] == "later"
        assert cli("cancel", sid, dropped).stdout == f"cancelled {dropped}\n"
        again = cli("cancel", sid, dropped)
        assert again.returncode == 1 and "TurnNotQueued" in again.stderr

        soft = cli("interrupt", sid, "--after-step")
        assert (soft.returncode, soft.stdout) == (0, "true\n")
        bad_input = cli("reply", sid, request_id, "once", "--input", "not json")
        assert bad_input.returncode == 2 and len(bad_input.stderr.splitlines()) == 1
        edited = cli("reply", sid, request_id, "once", "--input", '{"command": "echo edited"}')
        assert json.loads(edited.stdout)["input"] == {"command": "echo edited"}

        idle = cli("events", "--session", sid, "--follow", "--until", "session.idle")
        events = [json.loads(line) for line in idle.stdout.splitlines()]
        assert [e["type"] for e in events][-2:] == ["session.execution.interrupted", "session.idle"], (
            " ".join(e["type"] for e in events)
        )
        assert events[-2]["reason"] == {"type": "interrupt", "by": "api", "soft": True}
        assert [e["type"] for e in events if e["type"].startswith("session.turn.")] == [
            "session.turn.started",
            "session.turn.cancelled",
        ]
        # The soft stop came first: the steer waits no more; it and "later" run as turns of their own.
        assert cli("queue", sid, "--json").returncode == 0
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=DEADLINE) == 0


@pytest.mark.slow
def test_a_person_drives_a_session_from_the_command_line_alone(tmp_path: Path) -> None:
    """``session new``, ``prompt SID -``, ``pending``, ``answer``, ``reply``, ``events --pretty`` and
    ``events --from-now``: the walk-through needs no curl and no Python."""
    question = {"id": "q1", "prompt": "Go on?", "options": ["yes", "no"]}
    script = [
        {"tool_calls": [{"id": "call_q", "name": "question", "input": {"questions": [question]}}]},
        {"tool_calls": [{"id": "call_sh", "name": "shell", "input": {"command": "echo hi"}}]},
        {"text": "done"},
    ]
    (tmp_path / "script.json").write_text(json.dumps(script))
    (tmp_path / "coordinator.toml").write_text(
        '[model]\nprovider = "scripted"\nscript = "script.json"\n\n'
        '[[permission]]\naction = "*"\nresource = "*"\neffect = "allow"\n\n'
        '[[permission]]\naction = "shell"\nresource = "*"\neffect = "ask"\n'
    )
    with serving(tmp_path, "--config", str(tmp_path / "coordinator.toml")) as served:

        def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
            command = [*coordinator(*args), "--url", served.url]
            return subprocess.run(
                command,
                cwd=tmp_path,
                env=cli_env(),
                input=stdin,
                capture_output=True,
                text=True,
                timeout=DEADLINE,
            )

        created = cli("session", "new", "--title", "walk")
        sid = created.stdout.strip()
        assert created.returncode == 0 and created.stdout == f"{sid}\n" and sid.startswith("ses_")
        turn_id = cli("prompt", sid, "-", stdin="go on\n").stdout.strip()
        assert turn_id.startswith("turn_")
        cli("events", "--session", sid, "--follow", "--until", "form.asked")
        [form_line] = cli("pending").stdout.splitlines()
        kind, form_id, form_session, asks = form_line.split("\t")
        assert (kind, form_session, asks) == ("form", sid, "Go on?")
        assert cli("pending", sid).stdout.splitlines() == [form_line]
        bad = cli("answer", sid, form_id, "q1")
        assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr
        answered = cli("answer", sid, form_id, "q1=yes")
        assert json.loads(answered.stdout)["answers"] == {"q1": "yes"}

        cli("events", "--session", sid, "--follow", "--until", "permission.asked")
        [permission_line] = cli("pending").stdout.splitlines()
        kind, request_id, _, asks = permission_line.split("\t")
        assert (kind, asks) == ("permission", "shell: echo hi")
        assert cli("reply", sid, request_id, "once").returncode == 0
        cli("events", "--session", sid, "--follow", "--until", "session.idle")
        assert cli("pending").stdout == ""

        pretty = cli("events", "--session", sid, "--pretty").stdout.splitlines()
        assert pretty[1].split()[:3] == ["2", "session.turn.started", '"go']
        assert pretty[-1].split()[1:] == ["session.idle", "outcome", "succeeded"]
        assert all(not line.lstrip().startswith("{") for line in pretty)

        # From now on: the replay is skipped; only the next turn's events come.
        following = subprocess.Popen(
            [*coordinator("events", "--session", sid, "--follow", "--from-now", "--until", "session.idle"),
             "--url", served.url],
            cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            time.sleep(1.0)  # the stream is open: its live end is now
            cli("prompt", sid, "again")
            out, _ = following.communicate(timeout=DEADLINE)
        finally:
            following.kill()
        types = [json.loads(line)["type"] for line in out.splitlines()]
        assert types[0] == "session.turn.started" and types[-1] == "session.idle"
        assert "session.created" not in types
