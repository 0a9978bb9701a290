"""The ``execute`` tool's script: runs one script in its own Python process and serves its nested tool calls.

The script runs under ``coordinator/tools/execute_runner/``, a folder Python runs (``sys.executable -I``,
a clean environment, its own process group, the session's working directory). The two talk JSON lines over a
socket pair whose far end is passed to the runner as an extra file descriptor; the script's own stdout
and stderr are a separate pipe. ``design/execute.md`` describes the protocol.

It runs as the ``run_script`` of the context of a tool that ``runs_nested_calls`` (built by
``coordinator/actors/tool_services.py``). Everything the script did is kept through the tool context as it
happens: each log line through ``write_log`` and each settled nested call through ``call_nested``, so
a stop loses none of it.

Limits (the output limits are in ``coordinator.tools.execute``, with the tool's description):

- A message from the runner (a nested call's input, the return value) is at most
  ``MAX_MESSAGE_BYTES``; a longer one fails the call.
- A stop kills the process group: SIGTERM, ``TERM_GRACE`` seconds, SIGKILL, then reaps the runner;
  the cleanup is bounded (``REAP_SECONDS``, ``DRAIN_SECONDS``, ``FLUSH_SECONDS``). The group is
  recorded in the store while it runs (``open_process_group``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import trio

import coordinator.tools
from coordinator import wire
from coordinator.errors import ToolFailure
from coordinator.logs import get_logger
from coordinator.records import ToolError
from coordinator.statuses import CallStatus
from coordinator.tools.base import ToolContext
from coordinator.tools.execute import (
    MAX_LINE_BYTES,
    MAX_LOG_BYTES,
    MAX_LOG_LINES,
    ExecuteResult,
    LineSplitter,
    LogCollector,
)
from coordinator.tools.process import DRAIN_SECONDS
from coordinator.tools.process_group import REAP_SECONDS, open_process_group, signal_group, terminate_group

log = get_logger(__name__)

RUNNER_PATH = Path(coordinator.tools.__file__).with_name("execute_runner")

MAX_MESSAGE_BYTES = 16 * 1024 * 1024

TERM_GRACE = 1.0
"""Seconds the script's group gets between SIGTERM and SIGKILL (read at each call)."""

FLUSH_SECONDS = 5.0
"""Seconds a stop may spend writing the log lines read but not yet written."""

# Variables the runner inherits; nothing else of this process's environment reaches a script.
INHERITED_ENVIRONMENT = ("PATH", "LANG", "LC_ALL")

_READ_SIZE = 64 * 1024


@attrs.frozen(kw_only=True)
class StartMessage:
    """The first message to the runner: the code, and the limits of what it sends of the output."""

    type: str
    code: str
    line_bytes: int
    max_lines: int
    max_bytes: int
    max_message_bytes: int


@attrs.frozen(kw_only=True)
class ResultMessage:
    """The answer to one nested call, matched to it by ``id``."""

    type: str
    id: Any
    ok: bool
    output: Any
    error: ToolError | None


@attrs.frozen(kw_only=True)
class Finished:
    """How the script ended: it returned ``value``, or failed as ``failure`` says (its traceback).

    ``broken``: the runner broke the protocol, so it may still be running.
    """

    value: Any = None
    failure: str | None = None
    broken: bool = False


def clean_environment() -> dict[str, str]:
    """The runner's environment: ``PATH`` (the default path when unset), ``LANG`` and ``LC_ALL`` if set."""
    environment = {name: os.environ[name] for name in INHERITED_ENVIRONMENT if name in os.environ}
    environment.setdefault("PATH", os.defpath)
    return environment


async def run(ctx: ToolContext, code: str) -> dict[str, Any]:
    """Run ``code`` in a runner process until it returns, serving its nested calls, and wait for them.

    Returns the wire form of ``ExecuteResult``. Nested calls still running when the script ends are
    waited for: each settles on its own (deadlines apply), and is recorded in ``calls``.

    **Cancellation:** the process group gets SIGTERM, then SIGKILL after ``TERM_GRACE`` seconds, and
    the runner is reaped; nested calls settle on their own (as their actors do on a stop); every log
    line already sent is read and written through ``write_log``, and the pipes are closed; all in
    shielded scopes with deadlines, before the ``Cancelled`` propagates. Finished nested calls are
    in ``ctx.calls`` already, so the call's partial result keeps them.

    **Raises:** ``ToolFailure`` of type ``error`` when the runner cannot start, the script does not
    compile, raises (its traceback, without the runner's frames), returns a value that is not JSON,
    ends without a result, or breaks the protocol.
    """
    if ctx.call_nested is None or ctx.write_log is None:
        raise ToolFailure(type="error", message="execute runs only as a top-level tool call")
    term_grace = TERM_GRACE
    async with contextlib.AsyncExitStack() as stack:
        script = await _start(ctx, stack, term_grace)
        try:
            finished = await script.supervise(code, term_grace)
        except BaseException:
            with trio.move_on_after(term_grace + REAP_SECONDS + DRAIN_SECONDS + FLUSH_SECONDS, shield=True):
                # A reaped runner's group was killed at once (``supervise``); its id may be reused since.
                if script.proc.returncode is None:
                    await terminate_group(script.proc, term_grace)
                await script.drain()
            raise
        finally:
            with trio.move_on_after(REAP_SECONDS, shield=True):
                await script.close()
    if finished.failure is not None:
        raise ToolFailure(type="error", message=finished.failure)
    outcome = ExecuteResult(result=finished.value, logs=list(ctx.logs), calls=list(ctx.calls))
    return dict(wire.unstructure(outcome))


async def _start(ctx: ToolContext, stack: contextlib.AsyncExitStack, term_grace: float) -> Script:
    """Spawn the runner, in a process group ``stack`` kills and forgets on its exit, with its end of a
    fresh socket pair; ours becomes the script's channel."""
    ours, theirs = socket.socketpair()
    with contextlib.closing(theirs):  # the runner holds its own copy once started
        runner = open_process_group(
            [sys.executable, "-I", str(RUNNER_PATH), str(theirs.fileno())],
            records=ctx.process_groups,
            cwd=ctx.workdir,
            env=clean_environment(),
            pass_fds=(theirs.fileno(),),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            term_grace=term_grace,
        )
        try:
            proc = await stack.enter_async_context(runner)
        except OSError as exc:
            ours.close()
            message = f"execute: cannot start the script runner in {ctx.workdir}: {exc}"
            raise ToolFailure(type="error", message=message) from exc
        except BaseException:
            ours.close()
            raise
    channel = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
    return Script(ctx=ctx, proc=proc, channel=channel)


@attrs.define(eq=False)
class Script:
    """One running script: its process, its channel, and what it printed. Owned by ``run``."""

    ctx: ToolContext
    proc: trio.Process
    channel: trio.SocketStream
    collector: LogCollector = attrs.Factory(LogCollector)
    splitter: LineSplitter = attrs.Factory(LineSplitter)
    inbox: bytearray = attrs.Factory(bytearray)
    send_lock: trio.StrictFIFOLock = attrs.Factory(trio.StrictFIFOLock)
    write_lock: trio.StrictFIFOLock = attrs.Factory(trio.StrictFIFOLock)

    async def supervise(self, code: str, term_grace: float) -> Finished:
        """Send the code, serve the script until it ends, then wait for its calls and its output.

        **Cancellation:** leaves the process to the caller, which kills it.
        """
        async with trio.open_nursery() as nursery:
            output = trio.CancelScope()
            nursery.start_soon(self._pump_output, output)
            start = StartMessage(
                type="start",
                code=code,
                line_bytes=MAX_LINE_BYTES,
                max_lines=MAX_LOG_LINES,
                max_bytes=MAX_LOG_BYTES,
                max_message_bytes=MAX_MESSAGE_BYTES,
            )
            await self._send(start)
            finished = await self._serve(nursery)
            if finished is not None and finished.broken:
                await terminate_group(self.proc, term_grace)
            else:
                await self.proc.wait()
            # Whatever the script left running in its group goes now; its output is read until then.
            signal_group(self.proc.pid, signal.SIGKILL)
            output.deadline = trio.current_time() + DRAIN_SECONDS
        self._finish_logs()
        await self._write_logs()
        return finished if finished is not None else Finished(failure=self._vanished())

    async def drain(self) -> None:
        """After a stop killed the group: read what is left of its output and log messages, write it.

        **Cancellation:** call it shielded; lines not yet written are lost.
        """
        with trio.move_on_after(DRAIN_SECONDS):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump_output, trio.CancelScope())
                nursery.start_soon(self._drain_messages)
        self._finish_logs()
        await self._write_logs()

    async def close(self) -> None:
        await self.channel.aclose()
        if self.proc.stdout is not None:
            await self.proc.stdout.aclose()

    async def _serve(self, nursery: trio.Nursery) -> Finished | None:
        """Handle the script's messages until it returns or fails; None when the channel just ended."""
        while True:
            message = await self._receive()
            if message is None or isinstance(message, Finished):
                return message
            kind = message.get("type")
            if kind in ("log", "dropped"):
                await self._take_log(message)
            elif kind == "call":
                nursery.start_soon(self._serve_call, message)
            elif kind == "return":
                return Finished(value=message.get("value"))
            elif kind == "error":
                return Finished(failure=str(message.get("traceback")))
            else:
                return Finished(
                    failure=f"the script runner sent an unknown message type {kind!r}", broken=True
                )

    async def _serve_call(self, request: dict[str, Any]) -> None:
        """Run one nested call and send its result back; the script may be gone by then."""
        name, input = request.get("name"), request.get("input")
        assert self.ctx.call_nested is not None
        ok, output, error = False, None, None
        try:
            # A tool a script may not call is refused by ``call_nested`` (its ``nestable`` capability).
            result = await self.ctx.call_nested(str(name or ""), input)
        except ToolFailure as failure:
            error = ToolError(type="error", message=failure.message)
        else:
            ok, output, error = result.status == CallStatus.SUCCEEDED, result.output, result.error
        await self._send(
            ResultMessage(type="result", id=request.get("id"), ok=ok, output=output, error=error)
        )

    async def _send(self, message: StartMessage | ResultMessage) -> None:
        data = (json.dumps(wire.unstructure(message)) + "\n").encode("ascii")
        async with self.send_lock:
            try:
                await self.channel.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                # The runner is gone; a nested call's result is recorded in ``calls`` all the same.
                log.info("execute_message_undelivered", call_id=self.ctx.call_id)

    async def _receive(self) -> dict[str, Any] | Finished | None:
        """The runner's next message; a ``Finished`` failure when it breaks the protocol; None at the end."""
        while (end := self.inbox.find(b"\n")) < 0:
            if len(self.inbox) > MAX_MESSAGE_BYTES:
                limit = MAX_MESSAGE_BYTES // (1024 * 1024)
                failure = f"the script runner sent a message over {limit} MiB"
                return Finished(failure=failure, broken=True)
            try:
                chunk = await self.channel.receive_some(_READ_SIZE)
            except trio.BrokenResourceError:
                chunk = b""
            if not chunk:
                return None
            self.inbox += chunk
        line = bytes(self.inbox[:end])
        del self.inbox[: end + 1]
        try:
            message = json.loads(line)
        except ValueError as exc:
            return Finished(failure=f"the script runner sent a malformed message: {exc}", broken=True)
        if not isinstance(message, dict):
            return Finished(failure="the script runner sent a message that is not a JSON object", broken=True)
        return message

    async def _drain_messages(self) -> None:
        """Keep the log lines among the messages still buffered; a stopped script's calls are void."""
        while True:
            message = await self._receive()
            if message is None or isinstance(message, Finished):
                return
            if message.get("type") in ("log", "dropped"):
                await self._take_log(message)

    async def _take_log(self, message: dict[str, Any]) -> None:
        if message["type"] == "dropped":
            self.collector.runner_dropped(message.get("lines"), message.get("bytes"))
            return
        self.collector.add(str(message.get("line")))
        await self._write_logs()

    async def _pump_output(self, scope: trio.CancelScope) -> None:
        """Read the output pipe (fds 1 and 2) into log lines until it ends or ``scope`` is cancelled."""
        assert self.proc.stdout is not None
        with scope:
            while chunk := await self.proc.stdout.receive_some(_READ_SIZE):
                for line in self.splitter.feed(chunk):
                    self.collector.add(line)
                await self._write_logs()

    def _finish_logs(self) -> None:
        for line in self.splitter.finish():
            self.collector.add(line)
        self.collector.add_note()

    async def _write_logs(self) -> None:
        """Hand every pending line to ``write_log``, in order.

        ``write_log`` appends to ``ctx.logs`` before its first cancel point, so a line taken from
        ``pending`` is in the partial result even if a stop arrives while it is being published.
        """
        assert self.ctx.write_log is not None
        async with self.write_lock:
            while self.collector.pending:
                await self.ctx.write_log(self.collector.pending.popleft())

    def _vanished(self) -> str:
        code = self.proc.returncode
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
        return f"the script process {how} before the script returned"
