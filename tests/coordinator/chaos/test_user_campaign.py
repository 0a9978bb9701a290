"""The campaign over a user's own plugin, rules, timeouts and script (``coordinator chaos --config``).

The plugins are ``tests/coordinator/chaos/user_tools.py``: ``leaky`` leaves its helper process behind
when its call is stopped, ``tidy`` kills its helper's process group however the call ends.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from coordinator.chaos.campaign import execute_run, run_one, scratch_root
from coordinator.chaos.faults import Fault, Injection
from coordinator.chaos.processes import adopting_orphans
from coordinator.chaos.setup import Setup
from coordinator.errors import ConfigError
from tests.coordinator.test_cli import cli_env, coordinator

DEADLINE = 120.0
LEAK = "left a process running after its call c1 settled: sleep 60.021"


def write_files(folder: Path, tool: str) -> tuple[Path, Path]:
    """A config with the tool as a plugin that asks permission, and a script that calls it once."""
    config = folder / "chaos.toml"
    config.write_text(
        f'[[plugin]]\nentry = "tests.coordinator.chaos.user_tools:{tool}"\n\n'
        f'[[permission]]\naction = "{tool}"\nresource = "*"\neffect = "ask"\n'
    )
    script = folder / "script.json"
    calls = [{"id": "c1", "name": tool, "input": {"seconds": 0.2}}]
    script.write_text(json.dumps([{"tool_calls": calls}, {"text": "done"}]))
    return config, script


def _helpers() -> list[str]:
    """Helpers of ``user_tools`` still running that this test worker's tests started.

    Under xdist the other worker may run a test whose helpers live meanwhile (the leaky tool's, until
    its campaign kills them): a helper inherits its worker's ``PYTEST_XDIST_WORKER``, which tells
    them apart (the helpers of one worker's tests, run one after another, are all checked).
    """
    found = subprocess.run(["pgrep", "-f", "sleep 60.021"], capture_output=True, text=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return [pid for pid in found.stdout.split() if _worker_of(pid) in (worker, UNREADABLE)]


ENDED, UNREADABLE = "<ended>", "<unreadable>"


def _worker_of(pid: str) -> str:
    """The xdist worker a process was started under ("" for none)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except FileNotFoundError:
        return ENDED  # since pgrep found it: no helper of anyone's
    except OSError:
        return UNREADABLE
    for entry in environ.split(b"\0"):
        if entry.startswith(b"PYTEST_XDIST_WORKER="):
            return entry.partition(b"=")[2].decode()
    return ""


def _at(tmp_path: Path, tool: str, checkpoint: str, fault: Fault) -> tuple[Setup, tuple[Injection, ...]]:
    """The tool's setup, and a schedule with ``fault`` at the first ``checkpoint`` a quiet run passes."""
    config, script = write_files(tmp_path, tool)
    setup = Setup.load(config, script)
    with scratch_root() as scratch, adopting_orphans():
        quiet = execute_run(5, 0, root=Path(scratch), schedule=(), setup=setup)
    assert checkpoint in quiet.record.checkpoints, quiet.record.checkpoints
    return setup, (Injection(quiet.record.checkpoints.index(checkpoint) + 1, checkpoint, fault),)


@pytest.mark.parametrize("tool", ["leaky", "tidy"])
def test_a_plugins_declared_checkpoint_is_hit_by_injected_faults(tmp_path: Path, tool: str) -> None:
    """An interrupt held at ``checkpoint("helper-started")`` lands there: the leaky helper is caught."""
    point = f"plugin.{tool}.helper-started"
    setup, schedule = _at(tmp_path, tool, point, Fault("interrupt"))
    with scratch_root() as scratch, adopting_orphans():
        result = run_one(5, 0, root=Path(scratch), schedule=schedule, setup=setup)
    assert ("interrupt", point) in result.applied
    leaks = [v for v in result.violations if LEAK in v]
    assert leaks == ([f"invariant 6: tool leaky {LEAK}"] if tool == "leaky" else []), result.violations
    assert [v for v in result.violations if LEAK not in v] == []
    assert _helpers() == []  # the campaign killed what leaked


def test_a_tool_error_at_a_declared_checkpoint_is_raised_in_the_tool(tmp_path: Path) -> None:
    """``tool_error`` there raises out of ``checkpoint()``: the call fails with it; the tidy tool cleans up."""
    setup, schedule = _at(tmp_path, "tidy", "plugin.tidy.helper-started", Fault("tool_error"))
    with scratch_root() as scratch, adopting_orphans():
        run = execute_run(5, 0, root=Path(scratch), schedule=schedule, setup=setup)
    failed = [e.payload["error"] for e in run.view.events if e.type == "session.tool.failed"]
    assert {"type": "error", "message": "RuntimeError: chaos: the tool raised", "started": True} in failed
    assert run.record.violations == [] and run.leftovers == ()


def test_faults_land_while_a_plugin_awaits(tmp_path: Path) -> None:
    """A fault handed over at a plugin's own await (``plugin.TOOL.await``) stops it in that await."""
    setup, schedule = _at(tmp_path, "leaky", "plugin.leaky.await", Fault("interrupt"))
    with scratch_root() as scratch, adopting_orphans():
        result = run_one(5, 0, root=Path(scratch), schedule=schedule, setup=setup)
    assert ("interrupt", "plugin.leaky.await") in result.applied
    assert f"invariant 6: tool leaky {LEAK}" in result.violations, result.violations


def _chaos(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        coordinator("chaos", *args),
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )


def _rows(out: str) -> dict[str, int]:
    """The table's rows: checkpoint -> total faults that took effect there."""
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\S+)\s+(?:\d+\s+){8}(\d+)$", out, re.MULTILINE)}


@pytest.mark.slow
def test_the_command_holds_over_a_well_behaved_plugin(tmp_path: Path) -> None:
    """``coordinator chaos --config --script``: exit 0, the plugin's awaits among the table's checkpoints."""
    write_files(tmp_path, "tidy")
    result = _chaos(tmp_path, "--config", "chaos.toml", "--script", "script.json", "--runs", "12")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 of 12 runs failed; every invariant held" in result.stdout
    rows = _rows(result.stdout)
    assert {"plugin.tidy.await", "plugin.tidy.helper-started", "tool.start", "total"} <= set(rows), (
        result.stdout
    )
    assert rows["plugin.tidy.await"] + rows["plugin.tidy.helper-started"] > 0, result.stdout
    assert _helpers() == []


@pytest.mark.slow
def test_the_command_fails_over_a_leaky_plugin_and_its_replay_reproduces_it(tmp_path: Path) -> None:
    """Exit 1, the leak named with its tool, and a replay line (with --config, --script) that fails alike."""
    write_files(tmp_path, "leaky")
    result = _chaos(tmp_path, "--config", "chaos.toml", "--script", "script.json", "--runs", "12")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"invariant 6: tool leaky {LEAK}" in result.stdout
    replays = re.findall(r"^  replay:   (.*)$", result.stdout, re.MULTILINE)
    assert replays and all("--config chaos.toml --script script.json" in line for line in replays)
    assert all("--only" in line and "--schedule" in line for line in replays)
    command = shlex.split(replays[0])
    assert command[:2] == ["coordinator", "chaos"]
    replayed = _chaos(tmp_path, *command[2:])
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "1 of 1 runs failed" in replayed.stdout
    assert f"invariant 6: tool leaky {LEAK}" in replayed.stdout
    assert _helpers() == []


@pytest.mark.parametrize(
    ("config", "script", "fragment"),
    [
        ('[[plugin]]\nentry = "no_such_module:tool"\n', '[{"text": "hi"}]', "cannot import no_such_module"),
        ("", '[{"tool_calls": [{"id": "c", "name": "shell", "input": {}}]}]', "the last item calls tools"),
        ("", '{"text": "hi"}', "expected a list of items"),
    ],
)
def test_a_config_or_script_the_campaign_cannot_use_is_refused_before_any_run(
    tmp_path: Path, config: str, script: str, fragment: str
) -> None:
    """A bad plugin or script is one ConfigError (the command exits 2 with one line), not a failing run."""
    (tmp_path / "chaos.toml").write_text(config)
    (tmp_path / "script.json").write_text(script)
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        Setup.load(tmp_path / "chaos.toml", tmp_path / "script.json")


def test_the_command_exits_2_on_a_config_it_cannot_use(tmp_path: Path) -> None:
    result = _chaos(tmp_path, "--config", "missing.toml", "--runs", "1")
    assert result.returncode == 2
    assert result.stderr.startswith("coordinator: error: ") and "missing.toml" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("fault", ["shutdown", "crash"])
def test_a_users_manual_resume_policy_does_not_stop_the_campaign_checking_resumes(
    tmp_path: Path, fault: str
) -> None:
    """The campaign checks that a restart resumes every suspended or crashed turn once, so its
    restarts resume whatever the user's ``[server] resume`` says: with "manual" every restarted turn
    would stay parked."""
    config, script = write_files(tmp_path, "tidy")
    config.write_text('[server]\nresume = "manual"\n\n' + config.read_text())
    setup = Setup.load(config, script)
    assert setup.config.server.resume == "manual"
    point = "plugin.tidy.helper-started"
    with scratch_root() as scratch, adopting_orphans():
        quiet = execute_run(5, 0, root=Path(scratch), schedule=(), setup=setup)
        schedule = (Injection(quiet.record.checkpoints.index(point) + 1, point, Fault(fault)),)
        result = run_one(5, 0, root=Path(scratch), schedule=schedule, setup=setup)
    assert (fault, point) in result.applied
    assert result.violations == ()
