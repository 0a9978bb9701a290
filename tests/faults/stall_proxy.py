"""A TCP proxy whose link can stall: what a node of the PostgreSQL campaign reaches its database through.

``python -m tests.faults.stall_proxy HOST PORT`` listens on a free port of 127.0.0.1 (printed on its
first line) and forwards every connection to HOST:PORT. SIGUSR1 stalls the link: nothing more is
forwarded either way, while every connection stays open, as when a network holds packets; SIGUSR2
lets the held bytes through and forwarding go on. It exits when its stdin closes.
"""

from __future__ import annotations

import functools
import signal
import sys

import trio


class Gate:
    """Open, or stalled until opened again."""

    def __init__(self) -> None:
        self.opened = trio.Event()
        self.opened.set()

    def stall(self) -> None:
        if self.opened.is_set():
            self.opened = trio.Event()

    def open(self) -> None:
        self.opened.set()


async def pump(
    source: trio.SocketStream, sink: trio.SocketStream, gate: Gate, done: trio.CancelScope
) -> None:
    try:
        while data := await source.receive_some(65536):
            await gate.opened.wait()
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # one side closed: the other is closed with it
    finally:
        done.cancel()


async def forward(target: tuple[str, int], gate: Gate, client: trio.SocketStream) -> None:
    try:
        server = await trio.open_tcp_stream(*target)
    except OSError:
        await client.aclose()
        return
    async with client, server, trio.open_nursery() as nursery:
        nursery.start_soon(pump, client, server, gate, nursery.cancel_scope)
        nursery.start_soon(pump, server, client, gate, nursery.cancel_scope)


async def obey_signals(gate: Gate) -> None:
    with trio.open_signal_receiver(signal.SIGUSR1, signal.SIGUSR2) as signals:
        async for signum in signals:
            gate.stall() if signum == signal.SIGUSR1 else gate.open()


async def until_stdin_closes() -> None:
    stdin = trio.lowlevel.FdStream(sys.stdin.fileno())
    while await stdin.receive_some(1024):
        pass


async def main(host: str, port: int) -> None:
    gate = Gate()
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    print(listeners[0].socket.getsockname()[1], flush=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(obey_signals, gate)
        nursery.start_soon(trio.serve_listeners, functools.partial(forward, (host, port), gate), listeners)
        await until_stdin_closes()
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]))
