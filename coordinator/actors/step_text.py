"""The text of a step while the model streams it: in the step actor's memory, published as deltas.

The text so far is never stored while it streams: a commit per chunk would cost a store write every
few milliseconds per session. It reaches subscribers as live-only ``session.text.delta`` events,
coalesced to at most one every ``COALESCE_SECONDS`` per step (a session streams one step at a time), and
reaches the store once: in the commit that records the model's reply, or in the step's failure when a
stop cuts the stream short (``partial_text``, a history text part with the stop's status).

Offsets count characters of the step's text (Python ``str`` indices: providers hand decoded text, so a
delta never splits a character). A retry of the request starts the text over: the next delta has
offset 0 again, which a client tells from a gap or a repeat by its offset.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import attrs
import trio

from coordinator import events
from coordinator.actors import stops
from coordinator.actors.context import TurnScope
from coordinator.clock import now_rfc3339
from coordinator.events import Event

COALESCE_SECONDS = 0.02
"""At most one delta a session in this many seconds, on trio's clock."""

SAVE_SECONDS = 1.0
"""While the model streams, the text so far is saved to the step's row at most this often: what a
start after a crash keeps (a stop with a reason keeps all of it, from memory)."""


def _is_high_surrogate(char: str) -> bool:
    return "\ud800" <= char <= "\udbff"


@attrs.define(eq=False, kw_only=True)
class StepText:
    """The ``TextSink`` of one model request, owned by its step actor.

    ``append`` and ``restart`` are called by the provider as chunks arrive (no await). A piece that
    arrives once the coalescing window since the last delta has passed is published at once; one
    within it is published by the step's flusher task at the window's end, which also saves the text
    so far every ``SAVE_SECONDS``; ``finish`` publishes the tail once the reply is whole.
    """

    turn: TurnScope
    step_id: str
    started_seq: int
    """The seq of the step's ``session.step.started``: the bus delivers no delta of it before that."""
    _pieces: list[str] = attrs.Factory(list)
    _joined: str = ""
    published: int = 0
    """Characters of the text already published as deltas."""
    recorded: bool = False
    """The text is in the store (the reply's commit or the step's failure wrote it)."""
    _last_publish: float = -math.inf
    _saved: str = ""
    _arrived: trio.Event = attrs.Factory(trio.Event)
    # The flusher starts with the first piece of text, in the turn's background nursery (a reply
    # without text, tool calls only, costs no task), and is cancelled when the stream ends. It
    # wakes only for pieces within a window and for the first piece after a save is due.
    _flusher: trio.CancelScope | None = None
    _save_due: float = math.inf
    _streaming: bool = False

    @property
    def session_id(self) -> str:
        return self.turn.session_id

    @property
    def turn_id(self) -> str:
        return self.turn.turn_id

    @property
    def text(self) -> str:
        """All the text that has arrived."""
        if self._pieces:
            self._joined += "".join(self._pieces)
            self._pieces.clear()
        return self._joined

    def append(self, piece: str) -> None:
        if piece:
            self._pieces.append(piece)
            if not self._streaming:
                return  # a reply that did not stream: ``finish`` publishes it
            now = trio.current_time()
            # Past the window since the last delta (a model's usual pace): published now, by the
            # task that read the piece, without waking another; within it, the flusher publishes
            # at the window's end. The flusher also wakes for the first piece after a save is due.
            if now >= self._last_publish + COALESCE_SECONDS:
                self._publish()
            else:
                self._arrived.set()
            background = self.turn.background
            if self._flusher is None and background is not None:
                self._flusher = trio.CancelScope()
                self._save_due = now + SAVE_SECONDS
                background.start_soon(self.serve_flushes, self._flusher, name=f"flusher {self.step_id}")
            elif now >= self._save_due:
                self._arrived.set()

    @contextlib.contextmanager
    def streaming(self) -> Iterator[None]:
        """While the model streams: the flusher runs (from the first piece on), then is cancelled."""
        self._streaming = True
        try:
            yield
        finally:
            self._streaming = False
            if self._flusher is not None:
                self._flusher.cancel(reason="the stream ended: stop the delta flusher")

    def restart(self) -> None:
        self._pieces.clear()
        self._joined = ""
        self.published = 0

    async def between_chunks(self) -> None:
        await self.turn.checkpoint("model.chunk")

    def unrecorded(self) -> str:
        """The text a stop must keep: what arrived, unless the store has it already."""
        return "" if self.recorded else self.text

    def catch_up(self) -> Event | None:
        """One delta at offset 0 with the text published so far, for a subscriber that attaches."""
        if not self.published:
            return None
        text = self.text[: self.published]
        return events.text_delta(self.session_id, self.turn_id, self.step_id, 0, text, now_rfc3339())

    def _publish(self) -> None:
        text = self.text
        end = len(text)
        if end > self.published and _is_high_surrogate(text[end - 1]):
            end -= 1  # half of a surrogate pair (a provider that escaped one badly): wait for the rest
        if end <= self.published:
            return
        delta = text[self.published : end]
        event = events.text_delta(
            self.session_id, self.turn_id, self.step_id, self.published, delta, now_rfc3339()
        )
        self.published = end
        self._last_publish = trio.current_time()
        self.turn.runtime.bus.publish_delta_after(event, self.started_seq)

    async def serve_flushes(self, scope: trio.CancelScope) -> None:
        """Publish what arrived within a window at the window's end, and save the text so far with
        the first piece after each ``SAVE_SECONDS``, until ``scope`` is cancelled.

        A delta published before the step's start is durable is held by the bus until that start is
        published: a subscriber never hears of a step's text before it hears that the step started.

        **Raises:** ``StoreError`` or ``Fenced`` from a save, after stopping the turn with a typed
        ``Failure``: the turn's nursery then cancels the step, whose cleanup settles it with it.
        """
        # A save that fails stops the turn with a typed reason before the exception reaches the
        # turn's nursery, which would otherwise cancel the step with none (as chaos F16 found).
        with scope, stops.failing_on_error(self.turn, f"the delta flusher of step {self.step_id}"):
            await self._serve_flushes()

    async def _serve_flushes(self) -> None:
        while True:
            await self._arrived.wait()
            self._arrived = trio.Event()
            if len(self.text) > self.published:
                await trio.sleep_until(self._last_publish + COALESCE_SECONDS)
                self._publish()
            if trio.current_time() >= self._save_due:
                await self._save()
                self._save_due = trio.current_time() + SAVE_SECONDS

    async def _save(self) -> None:
        """Save the text so far to the step's row, for a start after a crash (fenced like every write).

        **Raises:** ``StoreError`` or ``Fenced``: the step then stops like any actor whose commit failed.
        """
        text = self.text
        if text != self._saved:
            await self.turn.journal.write(lambda tx: tx.save_streamed_text(self.step_id, text))
            self._saved = text

    async def finish(self, reply_text: str) -> None:
        """The reply is whole: publish its tail (after the coalescing window), before it is recorded.

        A provider that ignored the sink (it does not stream) gets its whole text published now.

        **Cancellation:** a stop here is a stop while streaming: the text stays unrecorded.
        """
        if not self.text and reply_text:
            self.append(reply_text)
        if len(self.text) > self.published:
            await trio.sleep_until(self._last_publish + COALESCE_SECONDS)
            self._publish()
