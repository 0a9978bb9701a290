"""The execute actor and its runner without a coordinator: log keeping, compiling, the protocol."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from coordinator.errors import ToolFailure
from coordinator.records import ToolError
from coordinator.tools import execute_runner as runner
from coordinator.tools import execute_script as execute
from coordinator.tools.base import CallResult, ToolContext
from coordinator.tools.execute import MAX_LINE_BYTES, MAX_LOG_BYTES, MAX_LOG_LINES, LineSplitter, LogCollector


def test_line_splitter_joins_chunks_and_cuts_long_lines() -> None:
    """Lines split across reads come out whole; a long one keeps its head and says what was cut."""
    splitter = LineSplitter()
    assert splitter.feed(b"one\r\ntw") == ["one"]
    assert splitter.feed(b"o\n" + b"z" * (MAX_LINE_BYTES + 10)) == ["two"]
    assert splitter.feed(b"zz\nrest") == ["z" * MAX_LINE_BYTES + " [... 12 bytes cut]"]
    assert splitter.finish() == ["rest"]
    assert splitter.finish() == []


def test_log_collector_keeps_the_first_lines_and_notes_the_rest_once() -> None:
    """The kept head is contiguous; what was dropped, here or by the runner, is counted in one last line."""
    collector = LogCollector()
    for n in range(MAX_LOG_LINES + 5):
        collector.add(f"{n:04d}")
    collector.runner_dropped(7, 70)
    collector.runner_dropped(3, 30)  # totals only grow: a late, smaller report changes nothing
    collector.add_note()
    collector.add_note()
    kept = list(collector.pending)
    assert kept[:-1] == [f"{n:04d}" for n in range(MAX_LOG_LINES)]
    assert kept[-1] == (
        "[... 12 more lines (90 bytes) dropped: the log keeps the first 1000 lines and 64 KiB]"
    )


def test_log_collector_stops_at_the_byte_limit_and_recuts_overlong_lines() -> None:
    """No line beyond the limit is kept, even one that would fit, so the log stays a head of the output."""
    collector = LogCollector()
    collector.add("a" * (MAX_LINE_BYTES * 3))
    for _ in range(MAX_LOG_BYTES // 1000):
        collector.add("b" * 1000)
    collector.add("short")
    kept = list(collector.pending)
    assert kept[0] == "a" * MAX_LINE_BYTES + f" [... {MAX_LINE_BYTES * 2} bytes cut]"
    assert sum(len(line) for line in kept) <= MAX_LOG_BYTES
    assert "short" not in kept


def test_compile_script_keeps_line_numbers_and_allows_await_and_return() -> None:
    """Tracebacks must point at the model's own lines: the wrapper adds none."""
    namespace: dict[str, Any] = {}
    function = runner.load_script(
        "x = 1\nawait asyncio.sleep(0)\nreturn x + 1\n", {**namespace, "asyncio": asyncio}
    )
    assert asyncio.run(function()) == 2
    with pytest.raises(SyntaxError) as raised:
        runner.compile_script("a = 1\nb = = 2\n")
    assert raised.value.lineno == 2
    with pytest.raises(SyntaxError, match="'yield' is not allowed"):
        runner.load_script("yield 1\n", {})


def test_script_traceback_hides_the_runner_frames() -> None:
    """A failed nested call raised inside the runner must read as the script's own line."""

    class FailingClient:
        async def call(self, name: str, input: dict[str, Any]) -> Any:
            await asyncio.sleep(0)
            raise runner.ToolError("denied", "no")

    code = "def helper():\n    return tools.shell(command='x')\nawait helper()\n"
    namespace = {"tools": runner.Tools(FailingClient()), "ToolError": runner.ToolError}  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    try:
        outcome = runner.run_script(loop, runner.load_script(code, namespace))
    finally:
        loop.close()
    assert outcome["type"] == "error"
    text = outcome["traceback"]
    assert 'File "<script>", line 3, in __script__' in text
    assert "execute_runner.py" not in text
    assert text.endswith("ToolError: denied: no\n")


@pytest.mark.parametrize(
    ("code", "last_line"),
    [
        ("import sys\nsys.exit(3)\n", "SystemExit: 3\n"),
        (
            "asyncio.current_task().cancel()\nawait asyncio.sleep(1)\n",
            "CancelledError: the script cancelled its own task\n",
        ),
        ("return {1}\n", None),
    ],
)
def test_whatever_ends_the_script_is_its_reported_outcome(code: str, last_line: str | None) -> None:
    """``sys.exit``, a self-cancel or a non-JSON result must come back as the script's error, not crash the runner."""
    loop = asyncio.new_event_loop()
    try:
        outcome = runner.run_script(loop, runner.load_script(code, {"asyncio": asyncio}))
    finally:
        loop.close()
    assert outcome["type"] == "error"
    if last_line is None:
        assert outcome["traceback"].startswith("TypeError: the script's return value is not JSON-able (set)")
    else:
        assert outcome["traceback"].endswith(last_line)
        assert "asyncio" not in outcome["traceback"].replace("asyncio.", "")


def test_tools_take_keyword_input_only() -> None:
    """``tools.shell("ls")`` is a mistake a model makes; say how to call instead of a bare TypeError."""
    tools = runner.Tools(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"tools\.shell takes keyword arguments only"):
        tools.shell("ls")
    with pytest.raises(AttributeError):
        tools.__wrapped__  # noqa: B018


class FakeChannel:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, data: bytes) -> None:
        self.sent.append(json.loads(data))


def test_runner_sends_the_first_lines_then_only_counts() -> None:
    """A flood costs one ``dropped`` report, not a message a line."""
    channel = FakeChannel()
    budget = runner.LogBudget(channel, {"max_lines": 2, "max_bytes": 100, "line_bytes": 10})  # type: ignore[arg-type]
    sink = runner.LineSink(budget)
    sink.write(b"one\ntwo\n" + b"x\n" * 1000 + b"0123456789abc")
    sink.send_rest()
    with budget.lock:
        budget.report()
    assert channel.sent[:2] == [{"type": "log", "line": "one"}, {"type": "log", "line": "two"}]
    # The unfinished last line counts too; bytes are what the script wrote, newlines not counted.
    assert channel.sent[-1] == {"type": "dropped", "lines": 1001, "bytes": 1000 + 13}
    assert len(channel.sent) <= 4


def make_context(tmp_path: Path, call_nested: Any = None) -> ToolContext:
    context = ToolContext(session_id="ses", call_id="call", workdir=tmp_path, report_progress=lambda _: None)

    async def write_log(line: str) -> None:
        context.logs.append(line)
        await trio.lowlevel.checkpoint()

    async def no_calls(name: str, input: Any) -> CallResult:
        await trio.lowlevel.checkpoint()
        raise AssertionError("no nested call expected")

    context.write_log = write_log
    context.call_nested = call_nested or no_calls
    return context


async def test_runner_has_a_clean_environment_and_the_session_workdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Secrets in the coordinator's environment must not reach a script; its cwd is the session's."""
    monkeypatch.setenv("OPENAI_API_KEY", "secret")
    code = "import os, sys\nreturn [sorted(os.environ), os.getcwd(), sys.flags.isolated]\n"
    output = await execute.run(make_context(tmp_path), code)
    names, cwd, isolated = output["result"]
    # Python's own locale coercion may add LC_CTYPE; nothing else is added.
    assert set(names) <= {"PATH", "LANG", "LC_ALL", "LC_CTYPE"} and "PATH" in names
    assert cwd == str(tmp_path) and isolated == 1


async def test_replies_are_matched_to_concurrent_calls_by_id(tmp_path: Path) -> None:
    """Calls finishing in the reverse order of their requests still answer the right awaits."""

    async def call_nested(name: str, input: Any) -> CallResult:
        await trio.sleep(input["delay"])
        return CallResult(call_id=f"call.{input['n']}", status="succeeded", output=input["n"])

    code = (
        "calls = [tools.wait(n=n, delay=0.05 * (5 - n)) for n in range(5)]\n"
        "return await asyncio.gather(*calls)\n"
    )
    output = await execute.run(make_context(tmp_path, call_nested), code)
    assert output["result"] == [0, 1, 2, 3, 4]


async def test_failed_nested_call_raises_tool_error_in_the_script(tmp_path: Path) -> None:
    """The script sees the failure's type and message and may go on."""

    async def call_nested(name: str, input: Any) -> CallResult:
        await trio.lowlevel.checkpoint()
        return CallResult(call_id="call.1", status="failed", error=ToolError(type="denied", message="no"))

    code = (
        "try:\n    await tools.shell(command='x')\nexcept ToolError as e:\n    return [e.type, e.message]\n"
    )
    output = await execute.run(make_context(tmp_path, call_nested), code)
    assert output["result"] == ["denied", "no"]


async def test_garbage_on_the_protocol_channel_fails_the_call_and_kills_the_runner(tmp_path: Path) -> None:
    """A script that writes to the protocol socket itself breaks only its own call."""
    code = "import os, sys\nprint(os.getpid())\nos.write(int(sys.argv[1]), b'not json\\n')\nawait asyncio.sleep(600)\n"
    context = make_context(tmp_path)
    with pytest.raises(ToolFailure, match="malformed message"):
        await execute.run(context, code)
    with pytest.raises(ProcessLookupError):
        os.kill(int(context.logs[0]), 0)


async def test_runner_ends_its_group_when_the_coordinator_is_gone() -> None:
    """A coordinator killed with -9 must not leave a script spinning: the runner's reader thread sees it."""
    ours, theirs = socket.socketpair()
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-I", str(execute.RUNNER_PATH), str(theirs.fileno())],
        pass_fds=(theirs.fileno(),),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    theirs.close()
    try:
        # A busy loop that never awaits: only a thread can notice the channel closing.
        start = {"type": "start", "code": "while True:\n    pass\n"}
        ours.sendall(json.dumps(start).encode() + b"\n")
        ours.close()
        with trio.fail_after(10):
            assert await proc.wait() == -signal.SIGKILL
    finally:
        with trio.move_on_after(5, shield=True):
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
