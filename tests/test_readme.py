"""The README's walk-through, run line by line with bash against a real server, as a newcomer would.

Each ``$ `` line of the marked console block runs in bash in a fresh folder, with the virtualenv's
``bin`` first on PATH (what ``. .venv/bin/activate`` does); the lines under it are what it must print,
``…`` standing for any text. Variables a line assigns (``S=$(...)``) carry over to the next lines.
The server line (``... &``) starts ``coordinator serve`` on a free port instead of 4096, and every
later ``4096`` (in commands, expected output and the config file) is that port; ``kill %1`` stops it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from tests.coordinator.test_cli import DEADLINE, cli_env, read_line

README = Path(__file__).resolve().parents[1] / "README.md"
MARKER = "<!-- walk-through: run by tests/test_readme.py -->"
ASSIGNMENT = re.compile(r"^([A-Z]\w*)=\$\(")


@attrs.frozen
class Step:
    command: str
    expected: tuple[str, ...]


def walk_through() -> list[Step]:
    """The steps of the README's marked console block."""
    text = README.read_text()
    block = text[text.index(MARKER) :].split("```console\n", 1)[1].split("\n```", 1)[0]
    steps: list[Step] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append(Step(command=line[2:], expected=()))
        else:
            steps[-1] = attrs.evolve(steps[-1], expected=(*steps[-1].expected, line))
    return steps


def matches(pattern: str, line: str) -> bool:
    """``line`` is ``pattern`` with each ``…`` standing for any text."""
    regex = ".*".join(re.escape(part) for part in pattern.split("…"))
    return re.fullmatch(regex, line) is not None


def run_step(step: Step, cwd: Path, env: dict[str, str], variables: dict[str, str]) -> list[str]:
    """Run one command in bash with the variables so far; returns its output lines (stdout and stderr)."""
    assigned = ASSIGNMENT.match(step.command)
    script = step.command
    if assigned:  # print the value the line assigned, so that the next lines see it
        script += f'\nprintf "%s" "${assigned[1]}" >&3'
    result = subprocess.run(
        ["bash", "-c", f"exec 3>{cwd / '.assigned'}\n{script}"],
        cwd=cwd,
        env={**env, **variables},
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    if assigned:
        value = (cwd / ".assigned").read_text()
        assert value, f"{step.command!r} assigned nothing; stderr: {result.stderr}"
        variables[assigned[1]] = value
    return (result.stdout + result.stderr).splitlines()


@pytest.mark.slow
def test_the_readme_walk_through_runs_as_written(tmp_path: Path) -> None:
    """A newcomer copies these lines: each must work and print what the README says it prints."""
    steps = walk_through()
    assert steps[0].command.startswith("coordinator init") and steps[-1].command == "kill %1"
    env = cli_env(PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    variables: dict[str, str] = {}
    server: subprocess.Popen[bytes] | None = None
    port = ""
    try:
        for step in steps:
            command = step.command.replace("4096", port) if port else step.command
            if command.endswith("&"):
                server = start_server(command, tmp_path, env)
                port = read_line(server).rsplit(":", 1)[1]
                output = [f"coordinator listening on http://127.0.0.1:{port}"]
                config = tmp_path / "coordinator.toml"
                config.write_text(config.read_text().replace("port = 4096", f"port = {port}"))
            elif command == "kill %1":
                assert server is not None
                server.send_signal(signal.SIGTERM)
                assert server.wait(timeout=DEADLINE) == 0
                output = []
            else:
                output = run_step(attrs.evolve(step, command=command), tmp_path, env, variables)
            expected = [line.replace("4096", port) if port else line for line in step.expected]
            assert len(output) == len(expected), (step.command, output)
            for pattern, line in zip(expected, output, strict=True):
                assert matches(pattern, line), (step.command, pattern, line)
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait()
        if server is not None and server.stdout is not None:
            server.stdout.close()
    assert set(variables) == {"S", "R"}


def start_server(command: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The README's ``coordinator serve ... 2>serve.log &`` on a free port, its stdout to the test."""
    words = command.removesuffix("&").split()
    assert words[:2] == ["coordinator", "serve"] and words[-1] == "2>serve.log", words
    argv = [sys.executable, "-m", "coordinator", *words[1:-1], "--port", "0"]
    with (cwd / "serve.log").open("wb") as log:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=log)
