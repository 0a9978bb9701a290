"""Invariant 11: text the model streamed before a stop is never lost.

The campaign's model records, per request, what it streamed (``Streamed``, through ``Tee``). After a
run, each request's text must be in the store: as the complete text of its step's reply (the step
succeeded, or recorded its tool calls), or, when a stop cut the stream short, as the step's
``session.step.failed.partial_text``, in the final history, and in every later request of the session.
A start after a crash keeps only what the dead process had saved, so a failure written in a later
phase than the stream may carry a prefix of it; a failure in the same phase carries all of it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import trio

from coordinator.chaos.record import RunRecord, StoreView, Violation
from coordinator.chaos.timeline import phase_of
from coordinator.events import Event
from coordinator.models.base import ChatMessage, TextSink


@attrs.define(eq=False)
class Streamed:
    """One model request of a run: its session, index, what it was sent and what it streamed."""

    session_id: str
    index: int
    messages: tuple[ChatMessage, ...]
    text: str = ""


@attrs.define(eq=False)
class Tee:
    """A ``TextSink`` that hands every piece on to the step's and records it in ``Streamed``."""

    inner: TextSink
    record: Streamed

    def append(self, piece: str) -> None:
        self.record.text += piece
        self.inner.append(piece)

    def restart(self) -> None:
        self.record.text = ""
        self.inner.restart()

    async def between_chunks(self) -> None:
        await self.inner.between_chunks()
        await trio.lowlevel.checkpoint()


def check_streamed_text(record: RunRecord, view: StoreView, streams: Sequence[Streamed]) -> list[Violation]:
    """11: every request's streamed text is in its step's reply, or kept by the stop that cut it."""
    steps: dict[str, list[str]] = {}
    by_type: dict[tuple[str, str], Event] = {}
    for event in view.events:
        if event.type == "session.step.started":
            steps.setdefault(str(event.session_id), []).append(event.payload["step_id"])
        elif event.type in ("session.step.succeeded", "session.step.failed"):
            by_type[(event.type, event.payload["step_id"])] = event
    recorded = {call.step_id for call in view.calls.values()}
    found: list[Violation] = []
    for stream in streams:
        ids = steps.get(stream.session_id, [])
        if not stream.text or stream.index >= len(ids):
            continue
        step_id = ids[stream.index]
        succeeded = by_type.get(("session.step.succeeded", step_id))
        if succeeded is not None:
            if succeeded.payload["message"]["text"] != stream.text:
                found.append(Violation(11, f"step {step_id} succeeded with text other than it streamed"))
            continue
        if step_id in recorded:
            continue  # the reply's commit recorded the text with its tool calls
        found += _kept(record, view, streams, stream, step_id, by_type.get(("session.step.failed", step_id)))
    return found


def _kept(
    record: RunRecord,
    view: StoreView,
    streams: Sequence[Streamed],
    stream: Streamed,
    step_id: str,
    failed: Event | None,
) -> list[Violation]:
    if failed is None:
        return [Violation(11, f"step {step_id} streamed {stream.text!r} and never settled")]
    partial = failed.payload.get("partial_text", "")
    started = next(
        e for e in view.events if e.type == "session.step.started" and e.payload["step_id"] == step_id
    )
    same_phase = phase_of(record, started.stored_seq) is phase_of(record, failed.stored_seq)
    if partial != stream.text and (same_phase or not stream.text.startswith(partial)):
        return [Violation(11, f"step {step_id} streamed {stream.text!r}; its failure kept {partial!r}")]
    if not partial:
        return []
    kept = ChatMessage(role="assistant", content=partial)
    found = []
    if kept not in view.chats.get(stream.session_id, ()):
        found.append(Violation(11, f"step {step_id}'s partial text {partial!r} is not in the history"))
    for later in streams:
        if (
            later.session_id == stream.session_id
            and later.index > stream.index
            and kept not in later.messages
        ):
            found.append(Violation(11, f"request {later.index} of {stream.session_id} lacks {partial!r}"))
    return found
