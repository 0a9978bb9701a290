"""The script itself: compiled as the body of an async function, run, and its outcome reported."""

from __future__ import annotations

import ast
import asyncio
import inspect
import linecache
import os
import traceback
import types
from collections.abc import Callable, Coroutine
from typing import Any

from ._channel import encode

SCRIPT_FILENAME = "<script>"
SCRIPT_FUNCTION = "__script__"
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024

# The runner's own modules, whose frames a script's traceback leaves out.
_RUNNER_FOLDER = os.path.dirname(os.path.realpath(__file__))


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
    frames = [frame for frame in frames[first:] if not _is_runner_file(frame.filename)]
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


def _is_runner_file(filename: str) -> bool:
    return os.path.dirname(os.path.realpath(filename)) == _RUNNER_FOLDER
