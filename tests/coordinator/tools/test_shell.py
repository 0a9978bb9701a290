"""The shell tool and its process-group runner, against real subprocesses."""

from __future__ import annotations

import os
import signal
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from coordinator.errors import ToolFailure
from coordinator.tools.base import ToolContext
from coordinator.tools.process import (
    OUTPUT_LIMIT,
    RECENT_LIMIT,
    CapturedOutput,
    ProcessOutput,
    run_in_process_group,
    signal_group,
)
from coordinator.tools.shell import shell_tool
from tests.processes import wait_gone

# Generous: these bound real processes that should take milliseconds, so a slow machine never flakes.
PATIENCE = 10.0
GRACE = 0.2


@attrs.define(kw_only=True)
class RecordingContext(ToolContext):
    """Keeps every progress detail the shell remembers, in order."""

    seen: list[Any]

    def remember_progress(self, detail: Any) -> None:
        self.seen.append(detail)
        super().remember_progress(detail)


def make_context(workdir: Path, progress: list[Any]) -> ToolContext:
    return RecordingContext(
        session_id="s1", call_id="c1", workdir=workdir, report_progress=lambda detail: None, seen=progress
    )


def is_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (dead, waiting for a reaper) counts as dead."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state != "Z"


def exists(pid: int) -> bool:
    """True while ``pid`` has a process table entry, zombie or not: false once it has been reaped."""
    return Path(f"/proc/{pid}").exists()


async def read_pid(path: Path) -> int:
    """Wait until the script has written its pid file (written whole, through a rename)."""
    pid_file = trio.Path(path)
    with trio.fail_after(PATIENCE):
        # Another process writes the file, so there is no trio.Event to wait on: poll.
        while not await pid_file.exists():  # noqa: ASYNC110
            await trio.sleep(0.01)
    return int(await pid_file.read_text())


def write_pid(name: str, pid: str = "$$") -> str:
    """Shell text that writes ``pid`` to ``name`` atomically."""
    return f"echo {pid} > {name}.tmp && mv {name}.tmp {name}"


async def run_until_pid_files(tool_input: dict[str, Any], ctx: ToolContext, *names: str) -> list[int]:
    """Run the shell tool, stop it from outside once the script wrote its pid files; return the pids."""
    pids: list[int] = []
    tool = shell_tool(term_grace=GRACE)

    async def stop_when_started(scope: trio.CancelScope) -> None:
        for name in names:
            pids.append(await read_pid(ctx.workdir / name))
        scope.cancel()

    with trio.fail_after(PATIENCE):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stop_when_started, scope)
                await tool.run(ctx, tool_input)
        assert scope.cancelled_caught
    return pids


async def test_result_has_exit_code_stdout_and_stderr(tmp_path: Path) -> None:
    """The model reads both streams and the exit code of the command it ran, in the session's folder."""
    progress: list[Any] = []
    result = await shell_tool().run(make_context(tmp_path, progress), {"command": "pwd; echo oops >&2"})
    assert result == {"exit_code": 0, "stdout": f"{tmp_path}\n", "stderr": "oops\n"}


async def test_nonzero_exit_is_a_normal_result(tmp_path: Path) -> None:
    """A failing command is information for the model, not a failed tool call."""
    result = await shell_tool().run(make_context(tmp_path, []), {"command": "echo no; exit 3"})
    assert result == {"exit_code": 3, "stdout": "no\n", "stderr": ""}


async def test_killed_command_reports_negative_signal(tmp_path: Path) -> None:
    """A command killed by a signal says which one, as Python's negative return code."""
    result = await shell_tool().run(make_context(tmp_path, []), {"command": "kill -KILL $$"})
    assert result["exit_code"] == -signal.SIGKILL


async def test_output_over_the_limit_is_truncated_and_never_blocks(tmp_path: Path) -> None:
    """A chatty command finishes (far more than a pipe buffer) and its result stays bounded."""
    size = 1_000_000
    command = f"head -c {size} /dev/zero | tr '\\0' a; head -c {size} /dev/zero | tr '\\0' b >&2"
    with trio.fail_after(PATIENCE):
        result = await shell_tool().run(make_context(tmp_path, []), {"command": command})
    trailer = f"\n[... {size - OUTPUT_LIMIT} bytes truncated]"
    assert result["exit_code"] == 0
    assert result["stdout"] == "a" * OUTPUT_LIMIT + trailer
    assert result["stderr"] == "b" * OUTPUT_LIMIT + trailer


async def test_backgrounded_grandchild_does_not_keep_a_finished_command_open(tmp_path: Path) -> None:
    """A server started with `&` holds the pipes open; the call still ends when the command does."""
    command = f"sleep 300 & {write_pid('grandchild.pid', '$!')}; echo done"
    with trio.fail_after(PATIENCE):
        result = await shell_tool().run(make_context(tmp_path, []), {"command": command})
    assert result == {"exit_code": 0, "stdout": "done\n", "stderr": ""}
    assert await wait_gone(int((tmp_path / "grandchild.pid").read_text()))


async def test_process_that_left_the_group_does_not_keep_the_call_open(tmp_path: Path) -> None:
    """A daemon in its own session survives the group kill; its open pipe is abandoned after a drain."""
    daemon = f"setsid sh -c '{write_pid('daemon.pid')}; exec sleep 300' &"
    command = f"{daemon} while [ ! -e daemon.pid ]; do sleep 0.01; done; echo done"
    try:
        with trio.fail_after(PATIENCE):
            result = await shell_tool().run(make_context(tmp_path, []), {"command": command})
        assert result == {"exit_code": 0, "stdout": "done\n", "stderr": ""}
    finally:
        os.kill(int((tmp_path / "daemon.pid").read_text()), signal.SIGKILL)


async def test_stop_kills_child_and_grandchild_and_keeps_partial_output(tmp_path: Path) -> None:
    """An interrupted call leaves no process behind, and what it printed reaches the partial result."""
    progress: list[Any] = []
    ctx = make_context(tmp_path, progress)
    script = f"echo started; echo warming >&2; sleep 300 & {write_pid('grandchild.pid', '$!')}; "
    script += f"{write_pid('child.pid')}; wait"
    child, grandchild = await run_until_pid_files({"command": script}, ctx, "child.pid", "grandchild.pid")
    assert not exists(child), "the shell was not reaped"
    assert await wait_gone(grandchild)
    assert progress[-1] == {"stdout": "started\n", "stderr": "warming\n", "stopped": True}


async def test_stop_kills_grandchild_that_ignores_sigterm(tmp_path: Path) -> None:
    """SIGTERM is a request; after the grace period SIGKILL ends the whole group anyway."""
    progress: list[Any] = []
    ctx = make_context(tmp_path, progress)
    script = f'trap "" TERM; echo stubborn; sleep 300 & {write_pid("grandchild.pid", "$!")}; '
    script += f"{write_pid('child.pid')}; wait"
    started = trio.current_time()
    child, grandchild = await run_until_pid_files({"command": script}, ctx, "child.pid", "grandchild.pid")
    assert trio.current_time() - started >= GRACE
    assert not exists(child), "the shell was not reaped"
    assert await wait_gone(grandchild)
    assert progress[-1]["stdout"] == "stubborn\n"
    assert progress[-1]["stopped"] is True


async def test_own_timeout_fails_the_call_with_partial_output(tmp_path: Path) -> None:
    """A shell call's own timeout is a typed failure the model sees, with what the command printed."""
    ctx = make_context(tmp_path, [])
    command = f"{write_pid('child.pid')}; echo before; sleep 300 & wait"
    with trio.fail_after(PATIENCE), pytest.raises(ToolFailure) as failure:
        await shell_tool(term_grace=GRACE).run(ctx, {"command": command, "timeout": 0.3})
    assert failure.value.type == "timeout"
    assert failure.value.message == "command timed out after 0.3s"
    assert failure.value.partial == {"stdout": "before\n", "stderr": ""}
    assert not exists(int((tmp_path / "child.pid").read_text()))


async def test_default_timeout_applies_when_the_input_has_none(tmp_path: Path) -> None:
    """A configured default bounds calls whose model did not say how long they may take."""
    tool = shell_tool(default_timeout=0.2, term_grace=GRACE)
    with trio.fail_after(PATIENCE), pytest.raises(ToolFailure) as failure:
        await tool.run(make_context(tmp_path, []), {"command": "sleep 300"})
    assert failure.value.type == "timeout"


async def test_progress_reports_the_latest_output_while_running(tmp_path: Path) -> None:
    """A client watching a long command sees its output before it ends."""
    progress: list[Any] = []
    ctx = make_context(tmp_path, progress)
    await shell_tool().run(ctx, {"command": "echo tick; sleep 0.2; echo tock"})
    assert progress[0] == {"stdout": "tick\n", "stderr": "", "stdout_bytes": 5, "stderr_bytes": 0}


@pytest.mark.parametrize(
    "tool_input",
    [
        {},
        {"command": ""},
        {"command": "   "},
        {"command": 3},
        {"command": "true", "timeout": 0},
        {"command": "true", "timeout": -1},
        {"command": "true", "timeout": "5"},
        {"command": "true", "timeout": True},
        {"command": "true", "timeout": float("nan")},
        {"command": "true", "description": 7},
    ],
)
async def test_invalid_input_fails_with_type_error(tmp_path: Path, tool_input: dict[str, Any]) -> None:
    """A malformed call is reported to the model as an error, and nothing runs."""
    with pytest.raises(ToolFailure) as failure:
        await shell_tool().run(make_context(tmp_path, []), tool_input)
    assert failure.value.type == "error"


async def test_missing_workdir_fails_with_type_error(tmp_path: Path) -> None:
    """A session folder that vanished is a tool error, not an internal one."""
    with pytest.raises(ToolFailure) as failure:
        await shell_tool().run(make_context(tmp_path / "gone", []), {"command": "true"})
    assert failure.value.type == "error"


def test_resource_is_the_command() -> None:
    """Permission rules match a shell call by the command it runs."""
    tool = shell_tool()
    assert tool.name == "shell"
    assert tool.resource({"command": "rm -rf build", "description": "clean"}) == "rm -rf build"


async def test_failing_output_callback_still_kills_and_reaps(tmp_path: Path) -> None:
    """An error while reading output is a stop like any other: the process does not outlive it."""

    def explode(output: ProcessOutput) -> None:
        raise ValueError("callback failed")

    command = f"{write_pid('child.pid')}; echo hello; sleep 300"
    with trio.fail_after(PATIENCE), pytest.RaisesGroup(ValueError, flatten_subgroups=True):
        await run_in_process_group(command, shell=True, cwd=tmp_path, on_output=explode, term_grace=GRACE)
    assert not exists(int((tmp_path / "child.pid").read_text()))


async def test_caller_owned_output_is_readable_after_a_stop(tmp_path: Path) -> None:
    """The runner writes into the caller's buffers, so a stop loses nothing already printed."""
    output = ProcessOutput.with_limits(stdout_limit=4, stderr_limit=100)
    command = f"echo 0123456789; {write_pid('child.pid')}; sleep 300"
    with trio.move_on_after(PATIENCE) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(run_in_process_group, command, shell=True, cwd=tmp_path, output=output)
            )
            await read_pid(tmp_path / "child.pid")
            scope.cancel()
    assert scope.cancelled_caught
    assert output.stdout.text() == "0123\n[... 7 bytes truncated]"


def test_signal_group_reports_a_group_that_is_gone() -> None:
    """Signalling a group whose processes all exited is not an error."""
    assert signal_group(2**22 - 1, signal.SIGTERM) is False


def test_captured_output_keeps_the_head_and_counts_the_rest() -> None:
    """The result shows the start of the output; the trailer says how much is missing."""
    captured = CapturedOutput(limit=5)
    captured.append(b"abc")
    captured.append(b"defgh")
    assert captured.text() == "abcde\n[... 3 bytes truncated]"
    assert captured.total == 8


def test_captured_output_tail_follows_the_latest_bytes() -> None:
    """Progress shows what the command prints now, even past the head limit."""
    captured = CapturedOutput(limit=1)
    captured.append(b"x" * RECENT_LIMIT)
    captured.append(b"end")
    assert captured.tail() == "x" * (RECENT_LIMIT - 3) + "end"


def test_captured_output_replaces_invalid_utf8() -> None:
    """Binary output, or a character cut at the limit, never breaks the result."""
    captured = CapturedOutput(limit=4)
    captured.append("héé".encode())
    assert captured.text() == "hé\ufffd\n[... 1 bytes truncated]"
