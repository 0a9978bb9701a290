"""Logging for the command line: structlog to stderr, JSON for machines and colours for a terminal."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

from coordinator.tracing import add_trace_ids


def configure_logging(stream: TextIO | None = None, *, level: int = logging.INFO) -> None:
    """Send structlog's output to ``stream`` (stderr): JSON lines unless it is a terminal.

    Only the CLI calls this; an embedding program keeps its own configuration. Context variables bound
    by actors (``session_id``, ``turn_id``) are merged into every line, and, when tracing is on, the
    ``trace_id`` and ``span_id`` of the span the line was logged in.

    Args:
        stream: where log lines go; stderr by default.
        level: the lowest level written.
    """
    out = stream if stream is not None else sys.stderr
    interactive = out.isatty()
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        add_trace_ids,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    # A traceback is written without the frames' locals: they may hold what a log must not (a prompt,
    # a tool's input, the model's API key in a request's headers), and rendering them costs the trio
    # thread, which every session shares (with rich, seconds for one actor's failure).
    if interactive:
        processors.append(structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback))
    else:
        without_locals = structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        processors += [
            structlog.processors.ExceptionRenderer(without_locals),
            structlog.processors.JSONRenderer(),
        ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )
    # Libraries that log through the standard library (hypercorn) report warnings and errors only.
    logging.basicConfig(stream=out, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
