"""The command line's logs (``configure_logging``): a traceback, never the frames' locals."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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
