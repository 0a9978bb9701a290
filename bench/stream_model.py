"""An OpenAI-compatible model that streams slowly, as a real one does, in a process of its own.

``python -m bench.stream_model`` listens on a free loopback port and prints it. A request whose last
user message is ``paced:N:MS`` gets a text reply of N chunks, one every MS milliseconds, chunk i
``i@T<unix time it was written>;`` so that whoever reads the text can tell each chunk's delay and
order; anything else gets the text ``done``. Each chunk is one write, as a provider sends it. HTTP/1.1 with kept-alive
connections and chunked bodies, on plain trio sockets: so that the mock costs little (about 10 µs a
chunk) beside the coordinator it feeds, and thousands of streams fit in it at once.
"""

from __future__ import annotations

import json
import sys
import time

import trio

PACED_PREFIX = "paced:"

_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def _data(delta: dict[str, object], finish_reason: str | None = None) -> bytes:
    """One SSE event of a ``chat.completion.chunk``."""
    body = {
        "id": "chatcmpl-paced",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "paced",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def _framed(data: bytes) -> bytes:
    """``data`` as one chunk of a chunked HTTP body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


_ROLE = _framed(_data({"role": "assistant", "content": ""}))
_FINISH = _framed(_data({}, finish_reason="stop"))
_DONE = _framed(b"data: [DONE]\n\n") + b"0\r\n\r\n"
# A chunk's event with its text cut out: the time is put in at each write.
_BEFORE, _AFTER = _data({"content": "@"}).split(b"@")


def _chunk(index: int, now: float) -> bytes:
    return _framed(_BEFORE + b"%d@T%.6f;" % (index, now) + _AFTER)


async def _serve_connection(stream: trio.SocketStream) -> None:
    buffer = b""
    async with stream:
        while True:
            while b"\r\n\r\n" not in buffer:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buffer += data
            head, buffer = buffer.split(b"\r\n\r\n", 1)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(buffer) < length:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buffer += data
            body, buffer = buffer[:length], buffer[length:]
            await _answer(stream, body)


async def _answer(stream: trio.SocketStream, body: bytes) -> None:
    messages = json.loads(body).get("messages") or [{}]
    content = str(messages[-1].get("content") or "")
    await stream.send_all(_HEAD + _ROLE)
    if messages[-1].get("role") == "user" and content.startswith(PACED_PREFIX):
        count, interval = content[len(PACED_PREFIX) :].split(":")
        pause = float(interval) / 1000
        due = trio.current_time()
        for index in range(int(count)):
            due += pause
            await trio.sleep_until(due)
            await stream.send_all(_chunk(index, time.time()))
    else:
        await stream.send_all(_framed(_data({"content": "done"})))
    await stream.send_all(_FINISH + _DONE)


async def _main() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=4096)
    print(listeners[0].socket.getsockname()[1], flush=True)
    await trio.serve_listeners(_serve_connection_quietly, listeners)


async def _serve_connection_quietly(stream: trio.SocketStream) -> None:
    # A client that goes away mid-stream (a stopped step) is normal here, not a failure of the mock.
    try:
        await _serve_connection(stream)
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        pass


if __name__ == "__main__":
    try:
        trio.run(_main)
    except KeyboardInterrupt:
        sys.exit(0)
