"""The syncs group durability asks of the helper process: what each covers, and when to ask one."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import trio

from coordinator.events import Event


class AskWhenIdle(trio.abc.Instrument):
    """Tells the durability each time the trio loop is about to wait for I/O, with how long it may
    wait: more than zero means no task is left to run, the moment to ask a sync nobody waits for.

    An instrument rather than a task waiting for the loop to be idle: it costs one call a loop
    iteration and no wakeup, where a task costs a wakeup and an extra ``epoll`` each time.
    """

    def __init__(self, before_io_wait: Callable[[float], None]) -> None:
        self._before_io_wait = before_io_wait

    def before_io_wait(self, timeout: float) -> None:
        self._before_io_wait(timeout)


@attrs.frozen
class AskedSync:
    """A sync asked of the helper: the commits it covers (``target``), their events in commit order."""

    target: int
    batches: list[Sequence[Event]]
    asked_at: float
