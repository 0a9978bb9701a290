"""The runner process's life: read ``start``, run the script, send its outcome, leave at once."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import threading
from typing import Any

from ._calls import Client, ToolError, Tools
from ._channel import Channel, encode
from ._output import LogBudget, capture_output, flush_output
from ._script import DEFAULT_MAX_MESSAGE_BYTES, SCRIPT_FUNCTION, load_script, run_script, syntax_error_text


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
    """Serve one script over the socket whose file descriptor is ``argv[1]``; never returns."""
    channel = Channel(socket.socket(fileno=int(argv[1])))
    start = channel.receive()
    if start is None or start.get("type") != "start":
        _end_group()
        return
    budget = LogBudget(channel, start)
    streams = capture_output(budget)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    outcome = _outcome(channel, start, loop)
    flush_output(streams, budget)
    channel.send(encode(outcome))
    # Leave at once: the script's leftover tasks, threads and executors must not hold the call open.
    for stream in (sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    os._exit(0)
