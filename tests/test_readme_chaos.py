"""The README's "Chaos-testing your own tools", run exactly as written: the files, the commands, the verdicts."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.coordinator.test_cli import cli_env, coordinator

README = Path(__file__).resolve().parents[1] / "README.md"
LEAK = "invariant 6: tool crunch left a process running after its call c1 settled: sleep 60"


def _section() -> str:
    text = README.read_text()
    start = text.index("## Chaos-testing your own tools")
    return text[start : text.index("\n## ", start + 1)]


def _blocks() -> list[tuple[str, str]]:
    """The section's fenced blocks, in order: (language, body)."""
    return [(m[1], m[2]) for m in re.finditer(r"^```(\w+)\n(.*?)^```$", _section(), re.MULTILINE | re.DOTALL)]


def _run(folder: Path, console: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """The console block's ``coordinator`` command, run in ``folder``, and the exit code it shows."""
    command = next(line[2:] for line in console.splitlines() if line.startswith("$ coordinator "))
    shown = int(console.split("$ echo $?\n")[1].split()[0])
    args = shlex.split(command)[1:]
    result = subprocess.run(
        coordinator(*args), cwd=folder, env=cli_env(), capture_output=True, text=True, timeout=180
    )
    return result, shown


@pytest.mark.slow
def test_the_readme_example_fails_for_the_leaky_plugin_and_holds_once_it_kills_its_group(
    tmp_path: Path,
) -> None:
    """Copied as the README says, the leaky tool fails the campaign (leak named, replayable); the fix passes."""
    blocks = _blocks()
    assert [language for language, _ in blocks] == ["python", "toml", "json", "console", "python", "console"]
    (leaky, config, script, failing, fixed, passing) = (body for _, body in blocks)
    (tmp_path / "mytools.py").write_text(leaky)
    (tmp_path / "chaos.toml").write_text(config)
    (tmp_path / "script.json").write_text(script)

    result, shown = _run(tmp_path, failing)
    assert (result.returncode, shown) == (1, 1), result.stdout + result.stderr
    assert LEAK in result.stdout
    shown_run = failing[failing.index("\nrun ") + 1 : failing.index("\n...\n$ echo")]
    assert shown_run in result.stdout  # the failing run as the README shows it, replay line included
    assert "plugin.crunch.await " in result.stdout and "plugin.crunch.helper-started " in result.stdout
    replay = re.findall(r"^  replay:   coordinator (.*)$", result.stdout, re.MULTILINE)[0]
    assert "--config chaos.toml --script script.json" in replay
    replayed = subprocess.run(
        coordinator(*shlex.split(replay)),
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert replayed.returncode == 1 and LEAK in replayed.stdout, replayed.stdout + replayed.stderr

    (tmp_path / "mytools.py").write_text(fixed)
    result, shown = _run(tmp_path, passing)
    assert (result.returncode, shown) == (0, 0), result.stdout + result.stderr
    assert "0 of 20 runs failed; every invariant held" in result.stdout
