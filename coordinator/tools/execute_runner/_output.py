"""The script's ``print`` output: cut into lines and sent as ``log`` messages, within the limits."""

from __future__ import annotations

import io
import math
import sys
import threading
import time
from typing import Any

from ._channel import Channel, encode

DEFAULT_LINE_BYTES = 4096
DEFAULT_MAX_LINES = 1000
DEFAULT_MAX_BYTES = 64 * 1024
DROP_REPORT_SECONDS = 0.25


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


def capture_output(budget: LogBudget) -> list[io.TextIOWrapper[Any]]:
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


def flush_output(streams: list[io.TextIOWrapper[Any]], budget: LogBudget) -> None:
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
