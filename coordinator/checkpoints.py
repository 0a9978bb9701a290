"""Named checkpoints: the await points where a stop can arrive, which the chaos campaign injects at.

In production no injector is set, and a checkpoint is one attribute test: ``if runtime.injector``.
Under the campaign, the injector decides at each checkpoint whether to inject a fault there (an
interrupt, a decline, a deadline, a failing model, tool or store, a shutdown, a crash).

Checkpoint names (``KINDS``) are part of the campaign's table; add a name here when adding one.
"""

from __future__ import annotations

from typing import Any, Protocol

KINDS = (
    "turn.start",  # the turn's claim and start are committed
    "model.request",  # a step is about to ask the model
    "model.chunk",  # the model is streaming: between two chunks of its text
    "model.reply",  # the model answered; its reply is not recorded yet
    "tool.start",  # a tool call is permitted and about to run its tool
    "tool.end",  # the tool returned; its settlement is not written yet
    "nested.call",  # execute's script asked for a nested call
    "permission.wait",  # a permission request is pending
    "form.wait",  # a question form is pending
    "settle.tool",  # a stopped tool call is about to write its failure
    "settle.step",  # a stopped step is about to write its failure
    "settle.turn",  # the session is about to write the turn's settlement
)


class Injector(Protocol):
    """Decides, at each checkpoint, whether to inject a fault, and injects it."""

    async def at(self, name: str, turn: Any) -> None: ...
