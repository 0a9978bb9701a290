"""Logging for the command line: the library's lines to stderr, JSON for machines, colours for a terminal."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

from coordinator.logs import ROOT, STRUCTURED
from coordinator.tracing import add_trace_ids


def configure_logging(stream: TextIO | None = None, *, level: int = logging.INFO) -> None:
    """Send the coordinator's log lines to ``stream`` (stderr): JSON lines unless it is a terminal.

    Only the CLI calls this; an embedding program keeps its own configuration. Each line has the
    fields the library logged (context variables bound by actors, ``session_id`` and ``turn_id``,
    among them) and, when tracing is on, the ``trace_id`` and ``span_id`` of the span it was logged in.

    Args:
        stream: where log lines go; stderr by default.
        level: the lowest level of the coordinator's own lines written.
    """
    out = stream if stream is not None else sys.stderr
    handler = logging.StreamHandler(out)
    handler.setFormatter(_formatter(out.isatty()))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    # Libraries that log through the standard library (hypercorn) report warnings and errors only.
    root.setLevel(logging.WARNING)
    logging.getLogger(ROOT).setLevel(level)


def _formatter(interactive: bool) -> logging.Formatter:
    # A traceback is written without the frames' locals: they may hold what a log must not (a prompt,
    # a tool's input, the model's API key in a request's headers), and rendering them costs the trio
    # thread, which every session shares (with rich, seconds for one actor's failure).
    renderer: Any
    if interactive:
        renderer = structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
        processors: list[Any] = [structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer]
    else:
        without_locals = structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        processors = [
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.ExceptionRenderer(without_locals),
            structlog.processors.JSONRenderer(),
        ]
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            _fields_of_record,
            add_trace_ids,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
        ],
        processors=processors,
    )


def _fields_of_record(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A record of the library: its fields as it logged them; another library's: its message and level."""
    record: logging.LogRecord = event_dict["_record"]
    fields = getattr(record, STRUCTURED, None)
    if fields is not None:
        event_dict.update(fields)
        event_dict["level"] = event_dict.pop("log_level", record.levelname.lower())
    else:
        event_dict["level"] = record.levelname.lower()
        event_dict["logger"] = record.name
    if record.exc_info:
        event_dict["exc_info"] = record.exc_info
    return event_dict
