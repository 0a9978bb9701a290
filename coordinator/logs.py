"""The library's loggers: structlog's API over the standard ``logging`` module.

Every module logs with ``log = get_logger(__name__)``: a structlog logger whose lines are records of
the stdlib logger of that name (``coordinator.actors.session``, ...), so the program that embeds the
coordinator decides where they go and which levels it wants, with its own ``logging`` configuration;
the library configures nothing (the ``coordinator`` command line does: ``log_output.py``).

A record's message is the event with its fields, ``turn_succeeded session_id=... turn_id=...``, which
any formatter shows; the fields themselves, context variables bound by the actors included, are the
record's ``structured`` attribute, for a formatter that renders them (the command line's JSON).
A level that no handler wants costs one ``isEnabledFor`` test: nothing is rendered.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, MutableMapping
from typing import Any

import structlog

STRUCTURED = "structured"
"""The ``LogRecord`` attribute holding a line's fields (``event`` and ``log_level`` included)."""

ROOT = "coordinator"
"""The stdlib logger above every logger of the library."""


class _Logger(structlog.stdlib.BoundLogger):
    """A stdlib-backed structlog logger that skips its processors for a level nobody handles."""

    def debug(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return super().debug(event, *args, **kw) if self._logger.isEnabledFor(logging.DEBUG) else None

    def info(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return super().info(event, *args, **kw) if self._logger.isEnabledFor(logging.INFO) else None

    def warning(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return super().warning(event, *args, **kw) if self._logger.isEnabledFor(logging.WARNING) else None

    def error(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return super().error(event, *args, **kw) if self._logger.isEnabledFor(logging.ERROR) else None

    def exception(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        kw.setdefault("exc_info", True)
        return super().error(event, *args, **kw) if self._logger.isEnabledFor(logging.ERROR) else None


def _to_record(logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of the stdlib call: the line as its message, the fields as an attribute."""
    exc_info = event_dict.pop("exc_info", None)
    event_dict.setdefault("log_level", method)
    fields = " ".join(
        f"{key}={value}" for key, value in event_dict.items() if key not in ("event", "log_level")
    )
    message = f"{event_dict.get('event')} {fields}" if fields else str(event_dict.get("event"))
    # The record's file and line are the caller's: past this module's method, structlog's two frames
    # and the stdlib logger's own.
    return {"msg": message, "exc_info": exc_info, "extra": {STRUCTURED: dict(event_dict)}, "stacklevel": 5}


_PROCESSORS = [structlog.contextvars.merge_contextvars, _to_record]


def get_logger(name: str) -> Any:
    """The library's logger for module ``name`` (pass ``__name__``)."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=_PROCESSORS,
        wrapper_class=_Logger,
        cache_logger_on_first_use=True,
    )


@contextlib.contextmanager
def captured(level: int = logging.DEBUG) -> Iterator[list[dict[str, Any]]]:
    """The library's lines at ``level`` and above while the block runs, as dicts of their fields
    (``event``, ``log_level``, the rest), and nothing of them elsewhere (a test's or a campaign's)."""
    kept: list[dict[str, Any]] = []
    root = logging.getLogger(ROOT)
    handler = _Keeping(kept, level)
    old = (root.level, root.propagate)
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    try:
        yield kept
    finally:
        root.removeHandler(handler)
        root.setLevel(old[0])
        root.propagate = old[1]


class _Keeping(logging.Handler):
    def __init__(self, kept: list[dict[str, Any]], level: int) -> None:
        super().__init__(level)
        self._kept = kept

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, STRUCTURED, None)
        entry = dict(fields) if fields is not None else {"event": record.getMessage()}
        if record.exc_info and "exc_info" not in entry:
            entry["exc_info"] = record.exc_info[1]
        self._kept.append(entry)
