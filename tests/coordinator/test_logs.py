"""The command line's logs (``configure_logging``): a traceback, never the frames' locals."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.logs import STRUCTURED
from tests.conftest import make_config, running

# Run in a child: logging's configuration is global to the process.
PROGRAM = """
import io, sys
from coordinator.log_output import configure_logging
from coordinator.logs import get_logger

class Terminal(io.StringIO):
    def isatty(self):
        return True

out = Terminal() if sys.argv[1] == "terminal" else io.StringIO()
configure_logging(out)

def call_the_model(prompt):
    headers = {"Authorization": "Bearer sk-not-for-logs"}
    raise ConnectionError("the model is unreachable")

try:
    call_the_model("a prompt not for logs")
except ConnectionError:
    get_logger("coordinator.models").exception("model_request_failed", model="mock")
sys.stdout.write(out.getvalue())
"""


@pytest.mark.parametrize("stream", ["terminal", "pipe"])
def test_a_logged_exception_has_its_traceback_and_none_of_the_frames_locals(stream: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, stream], capture_output=True, text=True, timeout=60, check=True
    )
    out = done.stdout
    assert "model_request_failed" in out and "call_the_model" in out
    assert "ConnectionError" in out and "the model is unreachable" in out
    assert "sk-not-for-logs" not in out and "a prompt not for logs" not in out
    if stream == "pipe":
        line = json.loads(out)
        assert line["exception"][0]["exc_type"] == "ConnectionError"
        assert all("locals" not in frame or not frame["locals"] for frame in line["exception"][0]["frames"])


async def test_an_embedding_program_s_logging_config_receives_the_lines(tmp_path: Path) -> None:
    """No configuration of the library's own: the records reach the host's handler, with the fields
    as the record's ``structured`` attribute and in its message."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    host = logging.getLogger()
    handler, level = Keep(), host.level
    host.addHandler(handler)
    host.setLevel(logging.INFO)
    try:
        async with running(make_config(tmp_path), [{"text": "done"}]) as (coord, recorder):
            session = await coord.create_session()
            await coord.prompt(session.id, "go")
            await recorder.wait_for("session.idle")
    finally:
        host.removeHandler(handler)
        host.setLevel(level)
    [succeeded] = [r for r in records if getattr(r, STRUCTURED, {}).get("event") == "turn_succeeded"]
    assert succeeded.name == "coordinator.actors.session" and succeeded.levelno == logging.INFO
    assert getattr(succeeded, STRUCTURED)["session_id"] == session.id
    assert (
        succeeded.getMessage().startswith("turn_succeeded ")
        and f"session_id={session.id}" in succeeded.getMessage()
    )
    assert succeeded.pathname.endswith("coordinator/actors/session.py")
