"""The built-in ``shell`` tool: run a command with ``/bin/sh -c`` in the session's working directory."""

from __future__ import annotations

import math
from typing import Any

import attrs
import trio

from coordinator.errors import ToolFailure
from coordinator.models.base import ToolSpec
from coordinator.tools.base import Tool, ToolContext
from coordinator.tools.process import OUTPUT_LIMIT, ProcessOutput, run_in_process_group
from coordinator.tools.process_group import TERM_GRACE

PROGRESS_INTERVAL = 0.5
"""Seconds between two progress reports of a running command (reports ride on output chunks)."""

_DESCRIPTION = (
    "Run a shell command with /bin/sh -c in the session's working directory. The result is "
    "{exit_code, stdout, stderr}; a non-zero exit code is a normal result (-N when signal N killed "
    f"the command). Each stream keeps its first {OUTPUT_LIMIT // 1024} KiB and ends with a line "
    "'[... N bytes truncated]' when more was printed. Processes the command leaves in the background "
    "are killed when it exits. 'timeout' (seconds) bounds the call: on expiry every process of the "
    "command is killed and the call fails with type 'timeout'."
)

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The command line, run by /bin/sh -c."},
        "description": {"type": "string", "description": "What the command does, in a few words."},
        "timeout": {"type": "number", "exclusiveMinimum": 0, "description": "Seconds before it is killed."},
    },
    "required": ["command"],
    "additionalProperties": False,
}


def shell_tool(*, default_timeout: float | None = None, term_grace: float = TERM_GRACE) -> Tool:
    """The ``shell`` tool.

    Args:
        default_timeout: seconds that bound a call whose input has no ``timeout``; ``None``: no bound
            of its own (the coordinator's ``timeouts.tool`` still applies).
        term_grace: seconds a stopped command gets between SIGTERM and SIGKILL.
    """

    async def run(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
        command, timeout = _parse_input(input)
        return await _run_command(ctx, command, timeout or default_timeout, term_grace)

    return Tool(
        spec=ToolSpec(name="shell", description=_DESCRIPTION, parameters=_PARAMETERS),
        resource=shell_resource,
        run=run,
    )


def shell_resource(input: dict[str, Any]) -> str:
    """The resource permission rules match a shell call against: its command."""
    command = input.get("command")
    return command if isinstance(command, str) else ""


def _parse_input(input: dict[str, Any]) -> tuple[str, float | None]:
    command = input.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ToolFailure(type="error", message="shell: 'command' must be a non-empty string")
    description = input.get("description")
    if description is not None and not isinstance(description, str):
        raise ToolFailure(type="error", message="shell: 'description' must be a string")
    timeout = input.get("timeout")
    if timeout is None:
        return command, None
    # bool is an int to Python but never a duration to a model.
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ToolFailure(type="error", message="shell: 'timeout' must be a number of seconds")
    if not (timeout > 0 and math.isfinite(timeout)):
        raise ToolFailure(type="error", message="shell: 'timeout' must be a positive number of seconds")
    return command, float(timeout)


async def _run_command(
    ctx: ToolContext, command: str, time_limit: float | None, term_grace: float
) -> dict[str, Any]:
    """Run ``command`` until it exits, ``time_limit`` expires, or the call is stopped.

    **Cancellation:** every process of the command is killed and reaped; what it printed so far is
    reported as progress (with ``stopped: True``) before the ``Cancelled`` propagates.

    **Raises:** ``ToolFailure`` of type ``timeout`` (with the output so far as ``partial``) when
    ``time_limit`` expires, of type ``error`` when ``/bin/sh`` cannot start in the working directory.
    """
    output = ProcessOutput()
    reporter = _ProgressReporter(ctx)
    try:
        with trio.move_on_after(time_limit if time_limit is not None else math.inf) as deadline:
            result = await run_in_process_group(
                command,
                shell=True,
                cwd=ctx.workdir,
                output=output,
                on_output=reporter,
                term_grace=term_grace,
                records=ctx.process_groups,
            )
    except OSError as exc:
        raise ToolFailure(
            type="error", message=f"shell: cannot start /bin/sh in {ctx.workdir}: {exc}"
        ) from exc
    except BaseException:
        ctx.remember_progress({**output.texts(), "stopped": True})
        raise
    if deadline.cancelled_caught:
        raise ToolFailure(
            type="timeout", message=f"command timed out after {time_limit:g}s", partial=output.texts()
        )
    return {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr}


@attrs.define
class _ProgressReporter:
    """Reports the latest output at most every ``PROGRESS_INTERVAL`` seconds; cheap per chunk."""

    ctx: ToolContext
    last: float = -math.inf

    def __call__(self, output: ProcessOutput) -> None:
        now = trio.current_time()
        if now - self.last < PROGRESS_INTERVAL:
            return
        self.last = now
        self.ctx.remember_progress(
            {**output.tails(), "stdout_bytes": output.stdout.total, "stderr_bytes": output.stderr.total}
        )
