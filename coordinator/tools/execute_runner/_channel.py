"""The protocol channel between the runner and the coordinator: JSON lines over a socket."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any


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
