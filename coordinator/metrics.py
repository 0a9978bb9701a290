"""The Prometheus series of one coordinator, in a registry of its own.

Counters and histograms are updated where the thing they count happens, once: a turn's settlement
(``coordinator/actors/session.py``), a store commit and a WAL sync (``coordinator/store/``). Gauges are read when
the registry is scraped, from the state the coordinator keeps anyway (its running turns, its live
waits, its bus's subscriptions), so no path has to remember to decrement them. ``design/operations.md``
says what each series means and why it is measured where it is.

Each ``Coordinator`` has its own ``CollectorRegistry``, never the global one: several coordinators in
one process (tests, an embedder running two) must not add to each other's counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from coordinator.reasons import REASON_CLASSES, StopReason
from coordinator.records import Usage

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The text format ``generate_latest`` writes, which every Prometheus version reads."""

SUCCEEDED = "succeeded"
SUSPENDED = "suspended"
OUTCOMES = (SUCCEEDED, *(c.outcome for c in REASON_CLASSES if c.outcome is not None), SUSPENDED)
"""The ``outcome`` label of ``coordinator_turns_total``: ``session.idle``'s words, and ``suspended``."""

STOP_REASONS = tuple(c.type for c in REASON_CLASSES)
"""The ``reason`` label of ``coordinator_stops_total``: the stop reasons' wire types."""

WAIT_KINDS = ("permission", "question")
"""The ``kind`` label of ``coordinator_pending_waits``."""

# A stop is a cancellation plus shielded cleanup: milliseconds, up to a process group's kill grace.
STOP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A commit runs on the trio thread without an fsync: tens of microseconds, a few ms when it is big.
HTTP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
"""Seconds to an HTTP answer's start: a read answers in about a millisecond, a decision after its commit."""
COMMIT_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)
# One fsync of the WAL: from a fraction of a millisecond (NVMe) to tens (a network disk).
SYNC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


_PROCESS = ProcessCollector(registry=None)
"""RSS, CPU seconds and open files of this process: the first things to watch in a daemon up for
months. One for the process, served beside every coordinator's series."""


def _zero() -> int:
    return 0


def _no_waits() -> Mapping[str, int]:
    return {}


class _LiveGauges:
    """The gauges read at scrape time, from callables the coordinator hands over once it runs."""

    def __init__(self) -> None:
        self.turns_running: Callable[[], int] = _zero
        self.pending_waits: Callable[[], Mapping[str, int]] = _no_waits
        self.event_subscribers: Callable[[], int] = _zero

    def collect(self) -> Iterable[Metric]:
        running = GaugeMetricFamily(
            "coordinator_turns_running",
            "Turns this coordinator runs now: from the turn's start (or resumption) to its settlement.",
        )
        running.add_metric([], self.turns_running())
        waits = GaugeMetricFamily(
            "coordinator_pending_waits",
            "Live waits on a person in this coordinator, by kind: permission requests and question forms "
            "whose wait actor is running (a wait kept across a shutdown counts once restored).",
            labels=["kind"],
        )
        counts = self.pending_waits()
        for kind in WAIT_KINDS:
            waits.add_metric([kind], counts.get(kind, 0))
        subscribers = GaugeMetricFamily(
            "coordinator_event_subscribers",
            "Open event subscriptions (SSE streams and embedders' subscribe()), replaying or live.",
        )
        subscribers.add_metric([], self.event_subscribers())
        return [running, waits, subscribers]


class Metrics:
    """The series of one coordinator and the registry they are exposed from."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        turns = Counter(
            "coordinator_turns",
            "Turns settled by this coordinator, by outcome (session.idle's outcome; suspended for a "
            "shutdown, whose turn is counted again when it settles after the restart).",
            ["outcome"],
            registry=self.registry,
        )
        stops = Counter(
            "coordinator_stops",
            "Turns settled as stopped, by the stop reason's type (the reason on the terminal event).",
            ["reason"],
            registry=self.registry,
        )
        # Children made once: a label lookup takes a lock and a dict per call, and every series
        # exists (at 0) from the start, so a rate() over it has no gap.
        self._turns = {outcome: turns.labels(outcome) for outcome in OUTCOMES}
        self._stops = {reason: stops.labels(reason) for reason in STOP_REASONS}
        self._stop_seconds = Histogram(
            "coordinator_stop_seconds",
            "Seconds from a turn's stop decision to the commit of its terminal event: the cancellation "
            "and every actor's cleanup (revoking waits, killing processes, settling tool calls).",
            buckets=STOP_BUCKETS,
            registry=self.registry,
        )
        self._commit_seconds = Histogram(
            "coordinator_store_commit_seconds",
            "Seconds a store write transaction held the database, from BEGIN to a successful COMMIT, on "
            "the event loop's thread (the WAL's fsync is apart: coordinator_store_sync_seconds).",
            buckets=COMMIT_BUCKETS,
            registry=self.registry,
        )
        self._sync_seconds = Histogram(
            "coordinator_store_sync_seconds",
            "Seconds one group fsync of the WAL took (off the event loop's thread); every commit made "
            "meanwhile waits for it before it is acknowledged or published.",
            buckets=SYNC_BUCKETS,
            registry=self.registry,
        )
        tokens = Counter(
            "coordinator_model_tokens",
            "Tokens the model endpoint reported, by direction: input (the prompt, history included) and "
            "output (what it wrote), summed over every model request of every turn.",
            ["direction"],
            registry=self.registry,
        )
        self._tokens = {direction: tokens.labels(direction) for direction in ("input", "output")}
        self._tool_calls = Counter(
            "coordinator_tool_calls",
            "Tool calls settled by this coordinator, by tool and outcome: succeeded, or the error's type "
            "(interrupted, declined, timeout, error, denied).",
            ["tool", "outcome"],
            registry=self.registry,
        )
        self._http_requests = Counter(
            "coordinator_http_requests",
            "HTTP requests answered, by route (its path template; unmatched for none) and status code, "
            "counted when the answer starts (an event stream when it opens).",
            ["route", "status"],
            registry=self.registry,
        )
        self._http_seconds = Histogram(
            "coordinator_http_request_seconds",
            "Seconds from a request's arrival to the start of its answer, by route.",
            ["route"],
            buckets=HTTP_BUCKETS,
            registry=self.registry,
        )
        self._live = _LiveGauges()
        self.registry.register(self._live)
        # What GET /metrics serves: these series, and the process's own. The process collector stays
        # out of ``registry``: an embedder registers that into a registry of its own (the global one
        # has a process collector already, and would refuse the same series twice).
        self._served = CollectorRegistry()
        self._served.register(_WithoutCreated(self.registry))
        self._served.register(_PROCESS)

    def watch(
        self,
        *,
        turns_running: Callable[[], int],
        pending_waits: Callable[[], Mapping[str, int]],
        event_subscribers: Callable[[], int],
    ) -> None:
        """Read the gauges from these at every scrape (the coordinator's own state, exact)."""
        self._live.turns_running = turns_running
        self._live.pending_waits = pending_waits
        self._live.event_subscribers = event_subscribers

    def turn_settled(self, reason: StopReason | None, decided_at: float) -> None:
        """Count a turn whose settlement committed: succeeded (no ``reason``) or stopped.

        ``decided_at`` is the ``time.perf_counter()`` of the stop's decision (ignored on success).
        """
        if reason is None:
            self._turns[SUCCEEDED].inc()
            return
        self._turns[SUSPENDED if reason.resumable else str(reason.outcome)].inc()
        self._stops[reason.type].inc()
        self._stop_seconds.observe(time.perf_counter() - decided_at)

    def model_used(self, usage: Usage | None) -> None:
        """Count the tokens of one model reply (a reply the endpoint reported no usage for counts none)."""
        if usage is not None:
            self._tokens["input"].inc(usage.input_tokens)
            self._tokens["output"].inc(usage.output_tokens)

    def tool_call_settled(self, tool: str, outcome: str) -> None:
        """Count a settled call: ``outcome`` is succeeded or its error's type."""
        self._tool_calls.labels(tool, outcome).inc()

    def http_answered(self, route: str, status: int, seconds: float) -> None:
        self._http_requests.labels(route, str(status)).inc()
        self._http_seconds.labels(route).observe(seconds)

    def commit_took(self, seconds: float) -> None:
        self._commit_seconds.observe(seconds)

    def sync_took(self, seconds: float) -> None:
        self._sync_seconds.observe(seconds)

    def text(self) -> str:
        """These series and the process's, in the Prometheus text format (``CONTENT_TYPE``)."""
        return generate_latest(self._served).decode()


class _WithoutCreated:
    """A registry's series without their ``*_created`` samples.

    The text format has no place for a counter's creation time, so ``prometheus_client`` writes it as a
    gauge of its own beside every counter and histogram, doubling the page; Prometheus ignores it.
    Its switch (``disable_created_metrics``) is global to the process, which is the embedder's to set.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        for metric in self._registry.collect():
            metric.samples = [s for s in metric.samples if not s.name.endswith("_created")]
            yield metric
