"""The faults the chaos campaign injects, and a schedule of injections written as one line of text.

A schedule is what makes a run replayable and shrinkable: ``12:tool.start:interrupt,30:settle.tool:crash``
says "at the 12th checkpoint of the run (a ``tool.start``) interrupt the turn; at the 30th (a
``settle.tool``) crash the coordinator". Occurrences count every checkpoint an actor reaches, across the
run's restarts, from 1.
"""

from __future__ import annotations

import attrs

from coordinator.checkpoints import KINDS, is_declared_checkpoint, is_plugin_checkpoint

FAULT_KINDS = (
    "interrupt",  # the user presses stop (the API's interrupt)
    "decline",  # the user rejects a permission or dismisses a form (late, when none is pending)
    "deadline",  # time passes (MockClock) until the turn's deadlines fire
    "model_error",  # the model fails, or its stream is malformed
    "tool_error",  # the tool raises
    "store_failure",  # the next commit fails: a failing disk (error), a full one, a busy database
    "shutdown",  # the coordinator shuts down gracefully
    "crash",  # the coordinator is dropped with nothing settled, then a new one opens the database
    "steer",  # the user sends text into the running turn
    "queue",  # the user queues a prompt (then cancels it, or sends it to interrupt the running turn)
    "soft_stop",  # the user stops the turn after its running step (and may cancel the queue with it)
)
# What a person sends into a running turn: drawn only in the campaign's own worlds (a user's
# campaign counts its own turns, and a steer of ours would add one it does not know).
INPUTS = frozenset({"steer", "queue", "soft_stop"})
SCENARIO_FAULT_KINDS = tuple(kind for kind in FAULT_KINDS if kind not in INPUTS)

VARIANTS: dict[str, tuple[str, ...]] = {
    # stop: a reject or dismissal without a message; feedback: with one (the turn goes on).
    "decline": ("stop", "stop", "stop", "feedback"),
    "model_error": ("error", "malformed"),
    "store_failure": ("error", "full", "busy"),
    "queue": ("keep", "cancel", "interrupt"),
    "soft_stop": ("keep", "cancel"),
}

# Faults a driver task applies while the actor that reached the checkpoint waits there.
DRIVEN = frozenset({"interrupt", "decline", "deadline", "shutdown", "crash"}) | INPUTS
TEARDOWN = frozenset({"shutdown", "crash"})

# Where each component fault is raised in place; scheduled elsewhere, it fails the component's next use
# in that session (the next model request, the next tool run).
RAISED_AT: dict[str, frozenset[str]] = {
    "model_error": frozenset({"model.request", "model.chunk", "model.reply"}),
    "tool_error": frozenset({"tool.start", "tool.end", "nested.call"}),
}
USED_AT = {"model_error": "model.request", "tool_error": "tool.start"}


def raised_here(kind: str, checkpoint: str) -> bool:
    """Whether a component fault is raised right at ``checkpoint``: out of a plugin's declared
    checkpoint too (its tool then raises); never at a plugin's implicit await, which the injector
    cannot raise into without breaking what trio guarantees about the awaited operation."""
    if checkpoint in RAISED_AT.get(kind, frozenset()):
        return True
    return kind == "tool_error" and is_declared_checkpoint(checkpoint)


class ScheduleError(ValueError):
    """A schedule given on the command line cannot be read."""


@attrs.frozen
class Fault:
    """One fault: its kind and, for some kinds, a variant (``decline/feedback``, ``store_failure/busy``)."""

    kind: str
    variant: str = ""

    def label(self) -> str:
        return f"{self.kind}/{self.variant}" if self.variant else self.kind

    @classmethod
    def parse(cls, text: str) -> Fault:
        kind, _, variant = text.partition("/")
        if kind not in FAULT_KINDS:
            raise ScheduleError(f"unknown fault {kind!r} (expected one of {', '.join(FAULT_KINDS)})")
        if variant and variant not in VARIANTS.get(kind, ()):
            raise ScheduleError(f"unknown variant {variant!r} of {kind}")
        return cls(kind, variant)


@attrs.frozen
class Injection:
    """A fault to inject at the ``occurrence``-th checkpoint of a run, which must be a ``checkpoint``."""

    occurrence: int
    checkpoint: str
    fault: Fault

    def label(self) -> str:
        return f"{self.occurrence}:{self.checkpoint}:{self.fault.label()}"

    @classmethod
    def parse(cls, text: str) -> Injection:
        parts = text.strip().split(":")
        if len(parts) != 3 or not parts[0].isdigit():
            raise ScheduleError(f"expected OCCURRENCE:CHECKPOINT:FAULT, got {text!r}")
        if parts[1] not in KINDS and not is_plugin_checkpoint(parts[1]):
            raise ScheduleError(f"unknown checkpoint {parts[1]!r}")
        return cls(int(parts[0]), parts[1], Fault.parse(parts[2]))


def format_schedule(injections: tuple[Injection, ...] | list[Injection]) -> str:
    """The schedule as one line; ``-`` for an empty one (a run without faults)."""
    return ",".join(i.label() for i in injections) or "-"


def parse_schedule(text: str) -> tuple[Injection, ...]:
    """Read ``format_schedule``'s line back. **Raises:** ``ScheduleError``."""
    if text.strip() in ("", "-"):
        return ()
    return tuple(Injection.parse(part) for part in text.split(","))
