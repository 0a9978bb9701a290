"""A network link to PostgreSQL on loopback: a TCP proxy that delays each direction and counts round trips.

Run as a process of its own (``python -m bench.pg_link TARGET_HOST TARGET_PORT DELAY_SECONDS``), so
its threads never share a GIL with the coordinator it measures. It prints the port it listens on,
then answers commands on stdin, one line each:

- ``reset``: zero the counts;
- ``count``: print one JSON line: ``round_trips`` (on any connection, how many times the client asked
  the server for answers, a Sync, a Flush or a simple Query, and the server answered: each is one
  wait for the server, the cost a delay multiplies; statements a client sends ahead without asking,
  as psycopg's pipeline mode does, ride along) and ``by_statement`` (the first statement of what
  each of those round trips carried: the profile of where they go).

The delay is one-way: what arrives at the proxy is sent on ``DELAY_SECONDS`` later, in order. A round
trip through the link therefore costs two delays more than over loopback.
"""

from __future__ import annotations

import collections
import json
import socket
import struct
import sys
import threading
import time

RECV_BYTES = 65536


class Counts:
    """The round trips of every connection, shared by the pumping threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.round_trips = 0
        self.by_statement: collections.Counter[str] = collections.Counter()

    def note(self, statement: str) -> None:
        with self.lock:
            self.round_trips += 1
            self.by_statement[statement] += 1

    def reset(self) -> None:
        with self.lock:
            self.round_trips = 0
            self.by_statement.clear()

    def as_json(self) -> str:
        with self.lock:
            return json.dumps({"round_trips": self.round_trips, "by_statement": dict(self.by_statement)})


class ClientMessages:
    """The frontend protocol's messages of one connection, enough to name what each send begins with:
    the query of a Parse or simple Query, a prepared statement's query for a Bind of it."""

    def __init__(self) -> None:
        self._buffer = b""
        self._started = False  # the startup message (and an SSL request) has no type byte
        self._prepared: dict[bytes, str] = {}

    def read(self, data: bytes) -> tuple[str, bool]:
        """The first statement named in ``data`` (or ""), and whether it asks the server for answers."""
        self._buffer += data
        first, asks = "", False
        while True:
            message = self._take()
            if message is None:
                return first, asks
            kind, body = message
            named = self._name(kind, body)
            if not first and named:
                first = named
            asks = asks or kind in b"0SHQp"

    def _take(self) -> tuple[bytes, bytes] | None:
        if not self._started:
            if len(self._buffer) < 8:
                return None
            (length,) = struct.unpack("!I", self._buffer[:4])
            if len(self._buffer) < length:
                return None
            code = struct.unpack("!I", self._buffer[4:8])[0]
            self._buffer = self._buffer[length:]
            if code != 80877103:  # an SSL request precedes the real startup message
                self._started = True
            return b"0", b""
        if len(self._buffer) < 5:
            return None
        (length,) = struct.unpack("!I", self._buffer[1:5])
        if len(self._buffer) < 1 + length:
            return None
        kind, body = self._buffer[:1], self._buffer[5 : 1 + length]
        self._buffer = self._buffer[1 + length :]
        return kind, body

    def _name(self, kind: bytes, body: bytes) -> str:
        if kind == b"0":
            return "(connect)"
        if kind == b"p":
            return "(authentication)"
        if kind == b"Q":
            return _short(body.split(b"\0", 1)[0])
        if kind == b"P":
            name, rest = body.split(b"\0", 1)
            query = _short(rest.split(b"\0", 1)[0])
            if name:
                self._prepared[name] = query
            return query
        if kind == b"B":
            _portal, rest = body.split(b"\0", 1)
            statement = rest.split(b"\0", 1)[0]
            return self._prepared.get(statement, "") if statement else ""
        if kind == b"X":
            return "(close)"
        return ""


def _short(query: bytes) -> str:
    text = " ".join(query.decode("utf-8", "replace").split())
    return text[:100]


class Pump:
    """One direction of one connection: receive, and send each piece ``delay`` seconds after it came."""

    def __init__(self, source: socket.socket, sink: socket.socket, delay: float) -> None:
        self.source, self.sink, self.delay = source, sink, delay
        self._queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self._ready = threading.Condition()

    def start(self, on_data: object) -> None:
        self._on_data = on_data
        threading.Thread(target=self._receive, daemon=True).start()
        if self.delay > 0:
            threading.Thread(target=self._send, daemon=True).start()

    def _receive(self) -> None:
        try:
            while data := self.source.recv(RECV_BYTES):
                self._on_data(data)  # type: ignore[operator]
                if self.delay > 0:
                    with self._ready:
                        self._queue.append((time.perf_counter() + self.delay, data))
                        self._ready.notify()
                else:
                    self.sink.sendall(data)
        except OSError:
            pass
        self._finish()

    def _send(self) -> None:
        try:
            while True:
                with self._ready:
                    while not self._queue:
                        self._ready.wait()
                    due, data = self._queue.popleft()
                if not data:
                    break
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                self.sink.sendall(data)
        except OSError:
            pass
        _close(self.sink)

    def _finish(self) -> None:
        if self.delay > 0:
            with self._ready:
                self._queue.append((0.0, b""))
                self._ready.notify()
        else:
            _close(self.sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class Connection:
    """A client's connection through the link: a round trip is counted when the server answers after
    the client asked for answers; it is named by the first statement the client sent since the last
    one."""

    def __init__(self, client: socket.socket, server: socket.socket, delay: float, counts: Counts) -> None:
        self._counts = counts
        self._messages = ClientMessages()
        self._label = ""  # the first statement sent since the last round trip
        self._asked = False  # the client asked for answers, and the server has not answered yet
        self._lock = threading.Lock()
        Pump(client, server, delay).start(self._from_client)
        Pump(server, client, delay).start(self._from_server)

    def _from_client(self, data: bytes) -> None:
        statement, asks = self._messages.read(data)
        with self._lock:
            self._label = self._label or statement
            self._asked = self._asked or asks

    def _from_server(self, data: bytes) -> None:
        with self._lock:
            if not self._asked:
                return
            label, self._label, self._asked = self._label or "(a Sync or Flush alone)", "", False
        self._counts.note(label)


def serve(target: tuple[str, int], delay: float, counts: Counts) -> socket.socket:
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        while True:
            client, _ = listener.accept()
            server = socket.create_connection(target)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            Connection(client, server, delay, counts)

    threading.Thread(target=accept, daemon=True).start()
    return listener


def main() -> None:
    host, port, delay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    counts = Counts()
    listener = serve((host, port), delay, counts)
    print(listener.getsockname()[1], flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "reset":
            counts.reset()
            print("ok", flush=True)
        elif command == "count":
            print(counts.as_json(), flush=True)


if __name__ == "__main__":
    main()
