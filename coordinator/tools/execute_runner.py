"""The program ``execute`` runs in a separate Python process: one script, its nested calls over a socket.

Started as ``python -I <this file> <fd>``, in its own process group, with the standard library only:
``fd`` is this process's end of a socket pair, the protocol channel (JSON lines, described in
``design/execute.md``). The coordinator sends ``start`` with the code; the script's ``print`` output
comes back as ``log`` messages, each ``tools.NAME(**input)`` as a ``call`` answered by a ``result``, and
the end as ``return`` or ``error``. Output written to the file descriptors 1 and 2 directly (by a child
process, say) goes to a pipe the coordinator reads as log lines too, so nothing the script writes can
corrupt the protocol.

It isolates a process; it is not a security sandbox.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import io
import itertools
import json
import linecache
import math
import os
import signal
import socket
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Coroutine
from typing import Any

SCRIPT_FILENAME = "<script>"
SCRIPT_FUNCTION = "__script__"
DEFAULT_LINE_BYTES = 4096
DEFAULT_MAX_LINES = 1000
DEFAULT_MAX_BYTES = 64 * 1024
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
DROP_REPORT_SECONDS = 0.25

_RUNNER_FILE = os.path.realpath(__file__)


class ToolError(Exception):
    """A nested tool call failed: ``type`` is the contract's error type, ``message`` says why."""

    def __init__(self, type: str, message: str) -> None:
        super().__init__(f"{type}: {message}")
        self.type = type
        self.message = message


def encode(message: dict[str, Any]) -> bytes:
    """One protocol line. ASCII-only JSON, so that any string, even a lone surrogate, can be sent."""
    return (json.dumps(message, allow_nan=False) + "\n").encode("ascii")


class Channel:
    """The protocol socket: whole lines out (from any thread), whole lines in (from the reader thread)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._incoming = sock.makefile("rb")
        self._lock = threading.Lock()

    def send(self, data: bytes) -> None:
        with self._lock:
            self._sock.sendall(data)

    def receive(self) -> dict[str, Any] | None:
        """The next message, or None when the coordinator closed its end."""
        line = self._incoming.readline()
        if not line:
            return None
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ValueError("a protocol message must be a JSON object")
        return message


class LogBudget:
    """Which lines of the script's output are sent: the first ones, within the coordinator's limits.

    The rest is only counted, and the counts go out as ``dropped`` messages (at most every
    ``DROP_REPORT_SECONDS``, and at the end), so a flood costs the script little and the coordinator
    nothing. Shared by stdout and stderr; ``lock`` guards it and their sinks.
    """

    def __init__(self, channel: Channel, start: dict[str, Any]) -> None:
        self.channel = channel
        self.line_bytes = int(start.get("line_bytes", DEFAULT_LINE_BYTES))
        self.max_lines = int(start.get("max_lines", DEFAULT_MAX_LINES))
        self.max_bytes = int(start.get("max_bytes", DEFAULT_MAX_BYTES))
        self.lock = threading.Lock()
        self.lines = 0
        self.size = 0
        self.dropped_lines = 0
        self.dropped_bytes = 0
        self._reported_at = -math.inf

    @property
    def full(self) -> bool:
        return self.dropped_lines > 0

    def add(self, head: bytes | bytearray, cut: int) -> None:
        """One whole line: its kept head and how many bytes were cut off it. Call under ``lock``."""
        line = bytes(head).decode("utf-8", "replace")
        if cut:
            line += f" [... {cut} bytes cut]"
        size = len(line.encode("utf-8", "replace"))
        if self.full or self.lines >= self.max_lines or self.size + size > self.max_bytes:
            self.drop(1, len(head) + cut)  # what the script wrote, as ``write`` counts it once full
            return
        self.lines += 1
        self.size += size
        self.channel.send(encode({"type": "log", "line": line}))

    def drop(self, lines: int, size: int) -> None:
        self.dropped_lines += lines
        self.dropped_bytes += size
        if time.monotonic() - self._reported_at >= DROP_REPORT_SECONDS:
            self.report()

    def report(self) -> None:
        """Send the counts of what was dropped so far, if anything was."""
        if self.dropped_lines:
            self._reported_at = time.monotonic()
            self.channel.send(
                encode({"type": "dropped", "lines": self.dropped_lines, "bytes": self.dropped_bytes})
            )


class LineSink(io.RawIOBase):
    """Where the script's ``sys.stdout`` or ``sys.stderr`` writes: bytes cut into lines for the budget.

    A line longer than the budget's ``line_bytes`` keeps its head and says how many bytes were cut, so
    a script that writes without newlines cannot grow this process's memory.
    """

    def __init__(self, budget: LogBudget) -> None:
        super().__init__()
        self._budget = budget
        self._current = bytearray()
        self._cut = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        with self._budget.lock:
            if self._budget.full:
                # Past the limits nothing more is kept: count, without cutting lines.
                newlines = chunk.count(b"\n")
                self._budget.drop(newlines, len(chunk) - newlines)
                self._current.clear()
                return len(chunk)
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                self._take(chunk[start:end])
                self._budget.add(self._current, self._cut)
                self._current.clear()
                self._cut = 0
                start = end + 1
            self._take(chunk[start:])
        return len(chunk)

    def send_rest(self) -> None:
        """Send an unfinished last line, if any."""
        with self._budget.lock:
            if self._current or self._cut:
                self._budget.add(self._current, self._cut)
                self._current.clear()
                self._cut = 0

    def _take(self, piece: bytes) -> None:
        room = max(self._budget.line_bytes - len(self._current), 0)
        self._current += piece[:room]
        self._cut += max(len(piece) - room, 0)


class Client:
    """The script's side of nested calls: one request id per call, answered by the reader thread."""

    def __init__(self, channel: Channel, loop: asyncio.AbstractEventLoop, max_message: int) -> None:
        self._channel = channel
        self._loop = loop
        self._max_message = max_message
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}

    async def call(self, name: str, input: dict[str, Any]) -> Any:
        if not isinstance(name, str) or not name:
            raise TypeError("a tool name must be a non-empty string")
        if not isinstance(input, dict):
            raise TypeError(f"the input of tool {name} must be a dict, not {type(input).__name__}")
        request_id = next(self._ids)
        # Encoded before it is registered: input that is not JSON raises here, in the script.
        data = encode({"type": "call", "id": request_id, "name": name, "input": input})
        if len(data) > self._max_message:
            raise ValueError(
                f"the input of tool {name} is {len(data)} bytes of JSON; at most {self._max_message}"
            )
        future: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._pending[request_id] = future
        try:
            self._channel.send(data)
            reply = await future
        finally:
            self._pending.pop(request_id, None)
        if reply.get("ok"):
            return reply.get("output")
        error = reply.get("error") or {}
        raise ToolError(str(error.get("type", "error")), str(error.get("message", "")))

    def deliver(self, reply: dict[str, Any]) -> None:
        future = self._pending.get(reply.get("id"))  # type: ignore[arg-type]
        # A call the script stopped awaiting (asyncio.wait_for) has a cancelled future: drop its reply.
        if future is not None and not future.done():
            future.set_result(reply)


class Tools:
    """``tools`` in the script: ``await tools.NAME(**input)`` or ``await tools.call("NAME", {...})``."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def call(self, name: str, input: dict[str, Any] | None = None) -> Coroutine[Any, Any, Any]:
        return self._client.call(name, {} if input is None else input)

    def __getattr__(self, name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
        if name.startswith("_"):
            raise AttributeError(name)

        def call_tool(*args: Any, **input: Any) -> Coroutine[Any, Any, Any]:
            if args:
                raise TypeError(f"tools.{name} takes keyword arguments only: tools.{name}(**input)")
            return self._client.call(name, input)

        call_tool.__name__ = name
        return call_tool


def compile_script(code: str) -> types.CodeType:
    """A module whose one statement is ``async def __script__():`` with ``code`` as its body.

    The code's own line numbers are kept, and its source is registered for tracebacks.

    Raises:
        SyntaxError: the code does not parse or compile as a function body.
    """
    parsed = ast.parse(code, SCRIPT_FILENAME)
    wrapper = ast.parse(f"async def {SCRIPT_FUNCTION}():\n    pass\n", SCRIPT_FILENAME)
    function = wrapper.body[0]
    assert isinstance(function, ast.AsyncFunctionDef)
    if parsed.body:
        function.body = parsed.body
    linecache.cache[SCRIPT_FILENAME] = (len(code), None, code.splitlines(keepends=True), SCRIPT_FILENAME)
    return compile(wrapper, SCRIPT_FILENAME, "exec")


def load_script(code: str, namespace: dict[str, Any]) -> Callable[[], Coroutine[Any, Any, Any]]:
    """The script as an async function whose globals are ``namespace``.

    Raises:
        SyntaxError: see ``compile_script``; also for a ``yield``, which would make it a generator.
    """
    exec(compile_script(code), namespace)
    function = namespace[SCRIPT_FUNCTION]
    if inspect.isasyncgenfunction(function):
        raise SyntaxError("'yield' is not allowed in a script: it is the body of a function that returns")
    return function  # type: ignore[no-any-return]


def script_traceback(exc: BaseException) -> str:
    """The traceback of an exception the script raised: its own frames and what it called, not the runner's."""
    report = traceback.TracebackException.from_exception(exc)
    _drop_runner_frames(report, set())
    return "".join(report.format())


def _drop_runner_frames(report: traceback.TracebackException, seen: set[int]) -> None:
    if id(report) in seen:
        return
    seen.add(id(report))
    frames = list(report.stack)
    # What called the script (this runner, the event loop) comes before its first frame.
    first = next((i for i, frame in enumerate(frames) if frame.filename == SCRIPT_FILENAME), 0)
    frames = [frame for frame in frames[first:] if os.path.realpath(frame.filename) != _RUNNER_FILE]
    report.stack = traceback.StackSummary.from_list(frames)
    chained = [report.__cause__, report.__context__, *(getattr(report, "exceptions", None) or [])]
    for other in chained:
        if other is not None:
            _drop_runner_frames(other, seen)


def syntax_error_text(exc: Exception) -> str:
    """Why the script could not be compiled: the error alone (no frame of it ever ran)."""
    return "".join(traceback.format_exception_only(type(exc), exc))


def run_script(
    loop: asyncio.AbstractEventLoop,
    function: Callable[[], Coroutine[Any, Any, Any]],
    max_message: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> dict[str, Any]:
    """Run the script on ``loop``; its outcome as the ``return`` or ``error`` message.

    Whatever ends the script is its outcome to report, not to propagate: an exception, ``SystemExit``
    (which asyncio lets escape the loop), even a cancellation of its own task.
    """
    task = loop.create_task(function())
    task.add_done_callback(lambda _: loop.stop())
    try:
        loop.run_forever()
    except (SystemExit, KeyboardInterrupt) as exc:
        return {"type": "error", "traceback": script_traceback(exc)}
    if task.cancelled():
        return {"type": "error", "traceback": "CancelledError: the script cancelled its own task\n"}
    failure = task.exception()
    if failure is not None:
        return {"type": "error", "traceback": script_traceback(failure)}
    value = task.result()
    outcome = {"type": "return", "value": value}
    try:
        size = len(encode(outcome))
    except (TypeError, ValueError) as exc:
        text = f"TypeError: the script's return value is not JSON-able ({type(value).__name__}): {exc}\n"
        return {"type": "error", "traceback": text}
    if size > max_message:
        text = f"ValueError: the script's return value is {size} bytes of JSON; at most {max_message} can be sent\n"
        return {"type": "error", "traceback": text}
    return outcome


def _read_replies(channel: Channel, loop: asyncio.AbstractEventLoop, client: Client) -> None:
    """The reader thread: hand replies to the loop; when the coordinator is gone, end the group.

    A thread, not a task, so that a script busy in a loop without awaits still dies with its
    coordinator instead of running on as an orphan.
    """
    try:
        while (message := channel.receive()) is not None:
            if message.get("type") == "result":
                loop.call_soon_threadsafe(client.deliver, message)
    except Exception:  # a broken channel is a gone coordinator
        pass
    _end_group()


def _end_group() -> None:
    if os.getpgid(0) == os.getpid():
        os.killpg(0, signal.SIGKILL)
    os._exit(1)


def _capture_output(budget: LogBudget) -> list[io.TextIOWrapper[Any]]:
    """Point ``sys.stdout`` and ``sys.stderr`` at sinks; text reaches them a line at a time."""
    streams = [
        io.TextIOWrapper(
            io.BufferedWriter(LineSink(budget)),
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=True,
        )
        for _ in range(2)
    ]
    sys.stdout, sys.stderr = streams
    return streams


def _flush_output(streams: list[io.TextIOWrapper[Any]], budget: LogBudget) -> None:
    """Send what the script's streams still hold, then the final counts of what was dropped."""
    for stream in streams:
        try:
            stream.flush()
        except (ValueError, OSError):  # the script closed it: what it held is gone with it
            continue
        sink = stream.buffer.raw
        assert isinstance(sink, LineSink)
        sink.send_rest()
    with budget.lock:
        budget.report()


def _outcome(channel: Channel, start: dict[str, Any], loop: asyncio.AbstractEventLoop) -> dict[str, Any]:
    max_message = int(start.get("max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES))
    client = Client(channel, loop, max_message)
    namespace: dict[str, Any] = {
        "__name__": SCRIPT_FUNCTION,
        "tools": Tools(client),
        "ToolError": ToolError,
        "asyncio": asyncio,
    }
    try:
        function = load_script(str(start.get("code", "")), namespace)
    except Exception as exc:  # SyntaxError, or ValueError for a null byte in the source
        return {"type": "error", "traceback": syntax_error_text(exc)}
    threading.Thread(target=_read_replies, args=(channel, loop, client), daemon=True).start()
    return run_script(loop, function, max_message)


def main(argv: list[str]) -> None:
    channel = Channel(socket.socket(fileno=int(argv[1])))
    start = channel.receive()
    if start is None or start.get("type") != "start":
        _end_group()
        return
    budget = LogBudget(channel, start)
    streams = _capture_output(budget)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    outcome = _outcome(channel, start, loop)
    _flush_output(streams, budget)
    channel.send(encode(outcome))
    # Leave at once: the script's leftover tasks, threads and executors must not hold the call open.
    for stream in (sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
