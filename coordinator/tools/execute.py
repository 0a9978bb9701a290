"""The built-in ``execute`` tool: Python code that calls other tools, run in a separate process.

The process and its protocol are ``coordinator/tools/execute_script.py``, which runs the script through the ``run_script``
its tool context offers (a tool that ``runs_nested_calls``); this module holds the tool's spec, the
check of its input, and what is kept of a script's output (``logs``), within these limits:

- the first ``MAX_LOG_LINES`` lines and ``MAX_LOG_BYTES`` bytes (UTF-8, newlines not counted) are
  kept; the rest is counted, and one last line says how many lines and bytes were dropped;
- a line keeps its first ``MAX_LINE_BYTES`` bytes and ends with ``[... N bytes cut]``.

The runner applies the same limits to what the script prints and sends only counts beyond them, so a
flood costs the coordinator nothing; output written to the file descriptors directly (by a child
process) is cut and counted here. On a stop, the counts are those the runner had reported (it reports at
most every quarter of a second).
"""

from __future__ import annotations

import collections
from typing import Any

import attrs

from coordinator.errors import ToolFailure
from coordinator.models.base import ToolSpec
from coordinator.records import NestedCall
from coordinator.tools.base import Capabilities, Tool, ToolContext, any_resource

MAX_LOG_LINES = 1000
MAX_LOG_BYTES = 64 * 1024
MAX_LINE_BYTES = 4096

# Room for the " [... N bytes cut]" that a cut line ends with.
_CUT_NOTE_BYTES = 32


@attrs.frozen(kw_only=True)
class ExecuteResult:
    """A finished script: what it returned, printed and called; all three always."""

    result: Any
    logs: list[str]
    calls: list[NestedCall]


@attrs.define
class LineSplitter:
    """Cuts the bytes of the output pipe into lines of at most ``MAX_LINE_BYTES`` bytes."""

    current: bytearray = attrs.Factory(bytearray)
    cut: int = 0

    def feed(self, data: bytes | bytearray) -> list[str]:
        lines = []
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            self._take(data[start:end])
            lines.append(self._line())
            start = end + 1
        self._take(data[start:])
        return lines

    def finish(self) -> list[str]:
        """The unfinished last line, if any."""
        return [self._line()] if self.current or self.cut else []

    def _take(self, piece: bytes | bytearray) -> None:
        room = max(MAX_LINE_BYTES - len(self.current), 0)
        self.current += piece[:room]
        self.cut += max(len(piece) - room, 0)

    def _line(self) -> str:
        text = self.current.decode("utf-8", "replace").removesuffix("\r")
        if self.cut:
            text += f" [... {self.cut} bytes cut]"
        self.current = bytearray()
        self.cut = 0
        return text


@attrs.define
class LogCollector:
    """Which lines are kept (the first ones, within the limits) and how much was dropped.

    The runner applies the same limits to what the script prints and only reports counts of what it
    dropped; this applies them to everything the coordinator receives. ``pending`` holds kept lines not
    yet handed to ``write_log``.
    """

    pending: collections.deque[str] = attrs.Factory(collections.deque)
    kept_lines: int = 0
    kept_bytes: int = 0
    dropped_lines: int = 0
    dropped_bytes: int = 0
    runner_dropped_lines: int = 0
    runner_dropped_bytes: int = 0
    noted: bool = False

    def add(self, line: str) -> None:
        encoded = line.encode("utf-8", "replace")
        # The runner cuts its lines itself and says so; only a line beyond that is cut again here.
        if len(encoded) > MAX_LINE_BYTES + _CUT_NOTE_BYTES:
            cut = len(encoded) - MAX_LINE_BYTES
            line = encoded[:MAX_LINE_BYTES].decode("utf-8", "ignore") + f" [... {cut} bytes cut]"
            encoded = line.encode("utf-8", "replace")
        full = self.kept_lines >= MAX_LOG_LINES or self.kept_bytes + len(encoded) > MAX_LOG_BYTES
        if self.dropped_lines or full:
            self.dropped_lines += 1
            self.dropped_bytes += len(encoded)
            return
        self.kept_lines += 1
        self.kept_bytes += len(encoded)
        self.pending.append(line)

    def runner_dropped(self, lines: Any, size: Any) -> None:
        """The runner's running totals of what it dropped (a ``dropped`` message)."""
        if isinstance(lines, int) and isinstance(size, int):
            self.runner_dropped_lines = max(self.runner_dropped_lines, lines)
            self.runner_dropped_bytes = max(self.runner_dropped_bytes, size)

    def add_note(self) -> None:
        """Append the last line, saying what was dropped, once, if anything was."""
        lines = self.dropped_lines + self.runner_dropped_lines
        if self.noted or not lines:
            return
        self.noted = True
        size = self.dropped_bytes + self.runner_dropped_bytes
        self.pending.append(
            f"[... {lines} more lines ({size} bytes) dropped: the log keeps the first {MAX_LOG_LINES} "
            f"lines and {MAX_LOG_BYTES // 1024} KiB]"
        )


_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {
            "type": "string",
            "description": "Python statements; `await` and `return` work at the top level.",
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}


_DESCRIPTION = (
    "Run Python code as the body of an async function, in a separate Python process (the same "
    "interpreter, the session's working directory, a minimal environment). Call other tools from it "
    'with `await tools.NAME(**input)`, e.g. `out = await tools.shell(command="ls")`, or '
    '`await tools.call("NAME", {...})`: each is a real tool call (permission rules and timeouts '
    "apply) and returns that tool's result. A failed call raises `ToolError` (attributes `type` and "
    "`message`), which the code may catch. Run calls concurrently with `await asyncio.gather(...)`; "
    "`asyncio`, `tools` and `ToolError` are predefined. `print(...)` lines are returned as `logs` "
    f"(the first {MAX_LOG_LINES} lines and {MAX_LOG_BYTES // 1024} KiB, "
    f"each line cut at {MAX_LINE_BYTES} bytes). `return X` (X JSON-able) sets `result`. "
    "The result is {result, logs, calls}: `calls` lists every nested call with its name, input, "
    "status and output. If the code raises, or the call is stopped or times out, the error comes with "
    "`partial: {logs, calls}`: what was printed and every nested call that finished, with its output, "
    "so finished work need not be redone. `execute` itself cannot be called from the code."
)


def script_code(input: dict[str, Any]) -> str:
    """The script of an ``execute`` input. **Raises:** ``ToolFailure`` naming what is wrong."""
    code = input.get("code")
    if not isinstance(code, str):
        raise ToolFailure(type="error", message="execute: 'code' must be a string")
    unknown = sorted(set(input) - {"code"})
    if unknown:
        raise ToolFailure(type="error", message=f"execute: unknown parameter(s): {', '.join(unknown)}")
    return code


async def _run(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    code = script_code(input)
    if ctx.run_script is None:
        raise ToolFailure(type="error", message="execute runs only as a top-level tool call")
    return await ctx.run_script(code)


def execute_tool() -> Tool:
    """The ``execute`` tool; its scripts run in ``coordinator/tools/execute_script.py``."""
    return Tool(
        spec=ToolSpec(name="execute", description=_DESCRIPTION, parameters=_PARAMETERS),
        resource=any_resource,
        run=_run,
        deadline_scope="execute",
        # Not nestable: a nested execute would nest processes without bound.
        capabilities=Capabilities(keeps_partial_result=True, runs_nested_calls=True, nestable=False),
    )
