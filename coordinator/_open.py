"""``open_coordinator``: the store, the bus, the runtime and the root nursery, opened in that order;
recovery at start; and the graceful shutdown that leaving the block is."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from coordinator import claims, errors, orphans, retention
from coordinator._coordinator import Coordinator
from coordinator.actors import session
from coordinator.actors.context import Runtime
from coordinator.actors.session_life import SessionLives
from coordinator.bus import Bus
from coordinator.checkpoints import Injector
from coordinator.clock import now_rfc3339
from coordinator.config import Config, config_from
from coordinator.logs import get_logger
from coordinator.mcp import McpServers
from coordinator.metrics import Metrics
from coordinator.models.base import Model
from coordinator.models.factory import build_model
from coordinator.registry import Registry
from coordinator.store import open_store
from coordinator.tools.registry import build_tools
from coordinator.tools.table import ToolTable
from coordinator.tracing import Tracing

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

log = get_logger(__name__)


@contextlib.asynccontextmanager
async def open_coordinator(
    config: str | Path | Config | None = None,
    *,
    db: str | None = None,
    model: Model | None = None,
    synchronous: str = "full",
    workdir: str | Path | None = None,
    injector: Injector | None = None,
    tracer_provider: TracerProvider | None = None,
    **overrides: Any,
) -> AsyncIterator[Coordinator]:
    """Open the coordinator on its database, resume what a previous process left, and yield it.

    Leaving the block, or cancelling the scope that encloses it, is a graceful shutdown (reason
    shutdown): running turns are suspended and resume at the next start.

    Args:
        config: a config file path, a ``Config``, or None for the defaults.
        db: a SQLite file's path or a ``postgresql://`` URL; overrides ``[server] db``.
        model: a model to use instead of the configured one (embedders and tests).
        synchronous: SQLite durability, ``full`` (default) or ``normal`` (see design/store.md).
        workdir: where tools run; the config file's folder by default.
        injector: a fault injector (the chaos campaign's; ``coordinator/checkpoints.py``): the core calls
            it at each checkpoint, at a plugin's awaits and before each commit. None in production.
        tracer_provider: an OpenTelemetry ``TracerProvider`` for the actors' spans (``otel`` extra);
            by default the global one if set, else no tracing (``design/tracing.md``).
        **overrides: other ``[server]`` keys.

    **Raises:** ``ConfigError`` for a bad config; ``StoreError`` when the database cannot be opened.
    """
    resolved = config_from(config, db=db, **overrides)
    instance = claims.this_instance(resolved.server.node_id)
    with open_store(
        resolved.server.db,
        synchronous=synchronous,
        pool_size=resolved.postgres.pool_size,
        instance_id=instance.id,
    ) as store:
        bus = Bus(store, await store.read(lambda reader: reader.last_seq()))
        store.on_commit(bus.note_committed)
        store.on_durable(bus.publish)
        metrics = Metrics()
        store.observe(commit=metrics.commit_took, sync=metrics.sync_took)
        if injector is not None:
            store.set_commit_hook(injector.before_commit)
        chosen_model = model if model is not None else build_model(resolved)
        try:
            async with trio.open_nursery() as root:
                await root.start(store.serve)
                runtime = Runtime(
                    store=store,
                    bus=bus,
                    config=resolved,
                    model=chosen_model,
                    tools=ToolTable(build_tools(resolved)),
                    instance_id=instance.id,
                    workdir=Path(workdir) if workdir is not None else resolved.base_dir,
                    injector=injector,
                    metrics=metrics,
                    tracing=Tracing.configure(tracer_provider),
                    run_turn=session.run_turn,
                )
                runtime.mcp = McpServers(
                    resolved.mcp,
                    tools=runtime.tools,
                    store=store,
                    instance_id=instance.id,
                    base_dir=resolved.base_dir,
                    grace=resolved.server.shutdown_grace,
                )
                await root.start(runtime.mcp.serve)
                coordinator = await _start(runtime, instance, root)
                try:
                    yield coordinator
                finally:
                    with trio.move_on_after(resolved.server.shutdown_grace + 1, shield=True):
                        await coordinator.shutdown()
                    # Once no turn runs: every call a server had was stopped (and told) first.
                    with trio.move_on_after(resolved.server.shutdown_grace + 1, shield=True):
                        await runtime.mcp.aclose()
                    # What a cleanup that ran out of time left running: this instance's groups still
                    # recorded once its actors ended.
                    with trio.move_on_after(5, shield=True), contextlib.suppress(errors.StoreError):
                        await orphans.kill_own(store, instance.id)
                    with trio.move_on_after(5, shield=True), contextlib.suppress(errors.StoreError):
                        await store.write(lambda tx: tx.mark_instance_stopped(instance.id))
                    claims.LIVE_IN_THIS_PROCESS.discard(instance.id)
                    root.cancel_scope.cancel(reason="coordinator closed")
        finally:
            claims.LIVE_IN_THIS_PROCESS.discard(instance.id)
            with trio.move_on_after(5, shield=True):
                await chosen_model.aclose()


# How often a coordinator looks for turns whose owner died and for decisions other processes made (at
# most: a third of the lease when that is shorter, a heartbeat's period).
WATCH_SECONDS = 1.0


async def _start(runtime: Runtime, instance: Any, root: trio.Nursery) -> Coordinator:
    await runtime.store.write(lambda tx: tx.register_instance(instance, now_rfc3339()))
    claims.LIVE_IN_THIS_PROCESS.add(instance.id)
    runtime.metrics.watch(
        turns_running=lambda: len(runtime.turns),
        pending_waits=runtime.waits.count_by_kind,
        event_subscribers=lambda: runtime.bus.subscribers,
    )
    runtime.lives = SessionLives(root, runtime.tools, busy=runtime.runs_a_turn_of)
    registry = Registry(runtime, root)
    runtime.wake = registry.ensure_running
    lease = runtime.config.server.lease
    root.start_soon(claims.serve_heartbeat, runtime.store, instance.id, lease, name="heartbeat")
    liveness = claims.Liveness(me=instance, lease=lease)
    recovered = await registry.recover(liveness)
    # A dead owner's turns are taken over within one heartbeat after its lease ran out.
    watch_seconds = min(WATCH_SECONDS, lease / 3)
    root.start_soon(registry.serve_watch, liveness, watch_seconds, name="watch")
    keep_days = runtime.config.store.keep_events_days
    if keep_days > 0:
        root.start_soon(retention.serve_retention, runtime.store, keep_days, name="retention")
    log.info("coordinator_started", instance_id=instance.id, recovered=len(recovered), at=time.time())
    return Coordinator(runtime, registry)
