"""The README's embedding snippets work as printed: each runs in a fresh folder, twice.

The second run finds the first run's session in the database and must show only its own turn's
events, ending at its own ``session.idle``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import REPO, server_env

README = REPO / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def snippet(imports: str) -> str:
    [block] = [b for b in python_blocks() if imports in b]
    return block


@pytest.mark.parametrize(
    "imports", ["from coordinator import open_coordinator", "from coordinator.aio import"]
)
def test_the_embedding_snippet_runs_as_printed_and_again(imports: str, tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text(snippet(imports))
    outputs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "main.py"],
            cwd=tmp_path,
            env=server_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.splitlines())
    for lines in outputs:
        types = [line.split(" ", 1)[0] for line in lines]
        assert types == [
            "session.created",
            "session.turn.started",
            "session.step.started",
            "session.step.succeeded",
            "session.execution.succeeded",
            "session.idle",
        ], lines
        assert "You said: hello" in lines[3]
