"""An actor's handle: its cancel scope and the typed reason it was stopped with.

Trio's ``CancelScope.cancel(reason=...)`` takes only a string, for diagnostics. The typed reason lives
here: ``stop(reason)`` records it first (the first reason wins), then cancels the scope. A child whose
scope was cancelled because its parent's was reads the reason through ``parent``: the reason is always
set before any scope is cancelled, so every cleanup knows why it is being torn down.
"""

from __future__ import annotations

import time

import attrs
import trio

from coordinator.logs import get_logger
from coordinator.reasons import StopReason, reasonless_failure

log = get_logger(__name__)


@attrs.define(eq=False, repr=False)
class ActorHandle:
    """Owned by one actor; its parent (and only its parent) calls ``stop``.

    Its repr is a line that names its parent rather than rendering it: every actor's frames hold a
    handle, and a traceback rendering the frames' locals rendered each whole chain of parents, with
    their cancel scopes, once a frame.
    """

    kind: str
    id: str
    parent: ActorHandle | None = None
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    reason: StopReason | None = None
    # The reason this actor's own deadline stands for, once the deadline has passed (a tool's).
    deadline_reason: StopReason | None = None
    # When ``reason`` was decided (``time.perf_counter()``): a turn's stop is timed from here.
    stopped_at: float | None = None

    def __repr__(self) -> str:
        parent = None if self.parent is None else f"{self.parent.kind} {self.parent.id}"
        reason = None if self.reason is None else self.reason.type
        return (
            f"ActorHandle(kind={self.kind!r}, id={self.id!r}, parent={parent!r}, reason={reason!r}, "
            f"cancel_called={self.scope.cancel_called})"
        )

    def stop(self, reason: StopReason) -> bool:
        """Record ``reason`` (unless one is recorded already), then cancel the scope.

        Returns True when this call decided the reason.
        """
        decided = self.reason is None
        if decided:
            self.reason = reason
            self.stopped_at = time.perf_counter()
        self.scope.cancel(reason=f"{self.kind} {self.id}: {self.reason.type if self.reason else '?'}")
        return decided

    def effective_reason(self) -> StopReason | None:
        """The reason this actor stops for: its own, else the nearest ancestor's."""
        handle: ActorHandle | None = self
        while handle is not None:
            if handle.reason is not None:
                return handle.reason
            if handle.deadline_reason is not None and handle.scope.cancel_called:
                return handle.deadline_reason
            handle = handle.parent
        return None

    def reason_or_failure(self) -> StopReason:
        """The reason to settle with. A missing one is a bug: settled as error, logged loudly."""
        reason = self.effective_reason()
        if reason is None:
            log.error("reasonless_cancel", actor=self.kind, actor_id=self.id)
            return reasonless_failure()
        return reason

    def child(self, kind: str, id: str) -> ActorHandle:
        return ActorHandle(kind=kind, id=id, parent=self)
