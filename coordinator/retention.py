"""Retention (``[store] keep_events_days``): old events of settled turns are deleted in the background.

A task of the coordinator's root nursery runs a pass at start, then again every ``pass_interval``. A
pass walks the log in seq order from its start, in batches of ``BATCH_EVENTS`` rows, each batch its own
short transaction on the trio thread, with a pause between two batches of ten times the batch's own
length: a turn's commit waits at most for one batch (milliseconds), never for the pass, and a pass
takes at most an eleventh of the trio thread. Events of a turn that has begun and is not
settled are kept (``Deletions.prune_events``); the pass ends at the first event young enough to keep.
After a pass that deleted something, freed pages beyond a slack of ``SLACK`` of the file go back to the
file system in small steps of ``VACUUM_PAGES`` in the store's sync thread
(``Store.reclaim_space``).
"""

from __future__ import annotations

import functools
import time

import trio

from coordinator.errors import StoreError
from coordinator.logs import get_logger
from coordinator.store import PruneBatch, Store, Transaction

log = get_logger(__name__)

BATCH_EVENTS = 200
"""Rows one batch reads (and at most deletes): one short transaction (1-5 ms, measured)."""

PAUSE_SECONDS = 0.002
"""At least this long between two batches (and two vacuum steps): the turns' commits run in between."""

YIELD_FACTOR = 10.0
"""A pause is at least this many times the batch before it (``_pause_after``)."""

MAX_INTERVAL_SECONDS = 60.0
"""At most this long between two passes."""

VACUUM_PAGES = 256
"""Pages (4 KiB each) one step of ``PRAGMA incremental_vacuum`` gives back: 1 MiB, a few ms."""

SLACK = 0.1
"""The share of the file left free for new rows to reuse (see ``reclaim``)."""

MIN_SLACK_PAGES = 1024
"""Free pages (4 MiB) never worth giving back."""

DAY_SECONDS = 86400.0


def pass_interval(keep_days: float) -> float:
    """Seconds between two passes: twice per retention window, at most ``MAX_INTERVAL_SECONDS`` apart."""
    return min(MAX_INTERVAL_SECONDS, keep_days * DAY_SECONDS / 2)


def cutoff_of(keep_days: float, now: float) -> str:
    """The RFC 3339 time (as the store writes ``events.at``) before which events are old."""
    moment = now - keep_days * DAY_SECONDS
    second = int(moment)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)) + f".{int((moment - second) * 1000):03d}Z"


async def serve_retention(store: Store, keep_days: float) -> None:
    """For ever: a pass now, then one every ``pass_interval(keep_days)``.

    A pass that fails (a busy or full disk) is logged and tried again at the next interval.
    """
    while True:
        try:
            await prune(store, keep_days)
        except StoreError as exc:
            log.warning("retention_pass_failed", error=str(exc))
        await trio.sleep(pass_interval(keep_days))


async def prune(store: Store, keep_days: float) -> int:
    """One pass: delete the events of settled turns older than ``keep_days``, then give the freed space
    back. Returns how many events were deleted (0 at once when ``keep_days`` is 0: keep all).

    **Cancellation:** between batches; each batch is atomic, so a cancelled pass leaves whole
    batches deleted and the horizon naming the highest seq deleted.

    **Raises:** ``StoreError`` when a batch cannot commit.
    """
    if keep_days <= 0:
        return 0
    cutoff = cutoff_of(keep_days, time.time())
    deleted, after, started = 0, 0, time.monotonic()
    while True:
        batch_started = time.perf_counter()
        batch = await store.write(functools.partial(_prune_batch, cutoff, after))
        deleted += batch.deleted
        after = batch.scanned_to
        if batch.finished:
            break
        await trio.sleep(_pause_after(time.perf_counter() - batch_started))
    if deleted:
        left = await reclaim(store)
        seconds = round(time.monotonic() - started, 3)
        log.info("events_pruned", events=deleted, free_pages_left=left, seconds=seconds)
    return deleted


def _prune_batch(cutoff: str, after: int, tx: Transaction) -> PruneBatch:
    return tx.prune_events(cutoff, after, BATCH_EVENTS)


def _pause_after(batch_seconds: float) -> float:
    """The pause after a batch that took ``batch_seconds``: ``YIELD_FACTOR`` times as long, so that
    a pass takes at most an eleventh of the trio thread whatever the machine's speed (a loaded machine
    makes batches slower, and the pass yields longer). Measured (design/benchmarks.md): at 4 times,
    turns during a pass of 100,000 events were 60-75 % slower; at 10 times, not measurably."""
    return max(PAUSE_SECONDS, YIELD_FACTOR * batch_seconds)


async def reclaim(store: Store) -> int:
    """Give free pages back to the file system, ``VACUUM_PAGES`` at a time, until no more than
    ``SLACK`` of the file is free; returns the free pages left (-1: another writer held the lock,
    the next pass goes on).

    The slack stays because SQLite reuses free pages for new rows anyway: moving pages to the end of
    the file only to have new rows extend it again would be writes for nothing. What goes back is
    what a large prune freed beyond the working set.
    """
    while True:
        free, total = await store.read(lambda reader: reader.page_counts())
        if free <= max(MIN_SLACK_PAGES, int(total * SLACK)):
            return free
        left = await store.reclaim_space(VACUUM_PAGES)
        if left < 0:
            return left
        await trio.sleep(PAUSE_SECONDS)
