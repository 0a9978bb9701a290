"""Run the HTTP API: open the coordinator, serve it with hypercorn's trio worker, shut down gracefully."""

from __future__ import annotations

import gc
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from coordinator import open_coordinator
from coordinator.config import Config
from coordinator.logs import get_logger
from coordinator.server.app import build_app

log = get_logger(__name__)

SERVING_GC_THRESHOLDS = (20_000, 10, 10)
"""The collector's thresholds in ``coordinator serve``'s process (Python's default: 700, 10, 10)."""


def tune_gc_for_serving() -> None:
    """Tune the cyclic collector for a server's process, once it has started.

    A turn allocates some thousands of short-lived objects (trio's tasks and scopes, rows, events):
    at the default threshold the youngest generation is collected several times a turn, about 6% of
    a turn's CPU (design/benchmarks.md, ``turn_cpu_ms_serving_gc``). What start-up built (modules,
    the app, the config) lives as long as the process: ``gc.freeze`` moves it out of every later
    collection. Only here, where the process is ours: the embedding API leaves its host's collector
    as the host set it.
    """
    gc.freeze()
    gc.set_threshold(*SERVING_GC_THRESHOLDS)


DRAIN_SECONDS = 2.0
"""Beyond ``[server] shutdown_grace``: time for in-flight responses to finish once turns are suspended."""


@attrs.frozen
class Listening:
    """Where the server accepts connections (the real port, also when port 0 was asked for)."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @classmethod
    def from_bind(cls, bind: str) -> Listening:
        """From hypercorn's ``http://HOST:PORT`` (``[HOST]`` for IPv6)."""
        address = bind.removeprefix("http://")
        host, _, port = address.rpartition(":")
        return cls(host=host.strip("[]"), port=int(port))


async def serve(  # noqa: ASYNC128 (started by serve_until)
    config: Config, *, task_status: trio.TaskStatus[Listening] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve the API on ``config.server.host``/``port`` until cancelled; reports ``Listening`` once bound.

    **Cancellation:** a graceful shutdown: stop accepting connections, suspend every running turn
    (reason shutdown, durable) and end the event streams, all within ``[server] shutdown_grace``
    plus ``DRAIN_SECONDS``; then the server is gone.

    **Raises:** ``ConfigError`` (bad model or plugin), ``StoreError`` (the database cannot be opened),
    ``OSError`` (the address cannot be bound).
    """
    await serve_until(config, trio.sleep_forever, task_status=task_status)


async def serve_until(
    config: Config,
    stop_when: Callable[[], Awaitable[Any]],
    *,
    task_status: trio.TaskStatus[Listening] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Like ``serve``, and a graceful shutdown also begins when ``stop_when()`` returns (a signal)."""
    async with open_coordinator(config) as coordinator:
        stop_http = trio.Event()
        http_stopped = trio.Event()
        # Shielded so that cancelling `serve` does not drop connections at once: the `finally` below
        # runs the graceful sequence, and cancels this scope only when the grace period is over.
        http_scope = trio.CancelScope(shield=True)
        app = build_app(coordinator, config)
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                _run_http, app, _hypercorn_config(config), stop_http, http_stopped, http_scope
            )
            listening = Listening.from_bind(binds[0])
            log.info("server_listening", url=listening.url)
            task_status.started(listening)
            try:
                await stop_when()
            finally:
                grace = config.server.shutdown_grace + DRAIN_SECONDS
                with trio.move_on_after(grace, shield=True) as drain:
                    log.info("server_stopping")
                    stop_http.set()
                    # Ends every event stream too, after it delivered the suspension events.
                    await coordinator.shutdown()
                    await http_stopped.wait()
                if drain.cancelled_caught:
                    log.warning("server_drain_exceeded", seconds=grace)
                http_scope.cancel()
                log.info("server_stopped")


async def _run_http(  # noqa: ASYNC128 (started by hypercorn via task_status)
    app: Any,
    config: HypercornConfig,
    stop: trio.Event,
    stopped: trio.Event,
    scope: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    try:
        with scope:
            await hypercorn_serve(
                app, config, shutdown_trigger=stop.wait, task_status=task_status, mode="asgi"
            )
    finally:
        stopped.set()


KEEP_ALIVE_SECONDS = 75.0
"""Seconds an idle keep-alive connection stays open. A client reuses an idle connection until its own
expiry (httpx: 5 s, a reverse proxy's upstream pool: often 60 s): if the server closed it at that same
moment, the request sent on it gets no answer ("Server disconnected without sending a response"),
and the client cannot tell whether it ran. Outlasting every common expiry, the client side always
closes first. Hypercorn's own default is 5 s, exactly httpx's."""


def _hypercorn_config(config: Config) -> HypercornConfig:
    hypercorn = HypercornConfig()
    hypercorn.keep_alive_timeout = KEEP_ALIVE_SECONDS
    host = config.server.host
    hypercorn.bind = [f"[{host}]:{config.server.port}" if ":" in host else f"{host}:{config.server.port}"]
    hypercorn.graceful_timeout = config.server.shutdown_grace
    hypercorn.accesslog = None
    # Hypercorn's own messages go to stdlib logging (silent unless the embedder configures it); the
    # coordinator logs where it listens itself.
    hypercorn.errorlog = logging.getLogger("hypercorn.error")
    return hypercorn
