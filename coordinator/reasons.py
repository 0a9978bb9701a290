"""Typed stop reasons: the one table that says what every kind of stop means.

A stop reason travels with a cancellation from the moment a stop is decided until the event that
reports it. Callers read the class variables (``outcome``, ``resumable``, ``terminal_event``,
``is_failure``, ``tool_error``) and call ``tool_error_type``; nothing outside this module compares
``reason.type`` or writes an ``isinstance`` chain over reasons, and a table keyed by reason type or
outcome elsewhere is derived from ``REASON_CLASSES`` (``reason_class``, ``tool_error_of_outcome``).
``design/reasons.md`` copies this table.

=========  ==========  =========  ================================  ================  ===========  =======  ==========
wire type  outcome     resumable  terminal event                    claim after stop  text status  failure  tool error
=========  ==========  =========  ================================  ================  ===========  =======  ==========
interrupt  interrupted no         session.execution.interrupted     released          interrupted  no       interrupted
declined   declined    no         session.execution.interrupted     released          interrupted  no       declined
timeout    timed_out   no         session.execution.interrupted     released          timeout      yes      timeout
error      failed      no         session.execution.failed          released          interrupted  yes      error
shutdown   (none)      yes        session.execution.suspended       kept, suspended   shutdown     no       interrupted
=========  ==========  =========  ================================  ================  ===========  =======  ==========

"failure": a stop that is a failure (a deadline passed, or an error), not one that went as asked; a
traced actor's span is marked as an error for it. "tool error": the error type of the tool call the
stop is about, and of a task call whose sub-agent's turn stopped on its own with this outcome.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import attrs

TimeoutScope = Literal["tool", "execute", "permission", "question", "step", "turn"]
ToolErrorType = Literal["declined", "interrupted", "timeout", "error", "denied"]
# The outcome of a turn a stop settled: the ``outcome`` of each reason class but Shutdown (whose turn
# is suspended, not settled). ``coordinator.records.Outcome`` adds "succeeded".
StopOutcome = Literal["interrupted", "declined", "timed_out", "failed"]
# The status of a history text part: "complete", or the word of the stop that cut
# the model's streamed text short.
TextStatus = Literal["complete", "interrupted", "timeout", "shutdown"]

_INTERRUPTED_EVENT = "session.execution.interrupted"


@attrs.frozen(kw_only=True)
class ParentLink:
    """The task call of a parent session that a sub-agent session (or its stop) comes from."""

    session_id: str
    call_id: str


@attrs.frozen
class Interrupt:
    """A person asked the turn to stop: ``POST .../interrupt`` or the embedder's ``interrupt()``."""

    type: ClassVar[str] = "interrupt"
    outcome: ClassVar[StopOutcome | None] = "interrupted"
    resumable: ClassVar[bool] = False
    text_status: ClassVar[TextStatus] = "interrupted"  # a text part the stop cut short
    terminal_event: ClassVar[str] = _INTERRUPTED_EVENT
    is_failure: ClassVar[bool] = False
    tool_error: ClassVar[ToolErrorType] = "interrupted"

    by: Literal["api", "embedder"]
    # A soft stop: the turn's running step and its calls finished, and the turn stopped at its next
    # step boundary, before asking the model again. Absent for an interrupt that stops at once.
    soft: bool = attrs.field(default=False, kw_only=True)
    # The principal who interrupted through the API (``[[principal]]``); absent without principals.
    principal: str | None = attrs.field(default=None, kw_only=True)
    # Set when the stop came down from the parent session's turn (a sub-agent's); else absent.
    parent: ParentLink | None = attrs.field(default=None, kw_only=True)

    @classmethod
    def by_person(
        cls, by: Literal["api", "embedder"], *, soft: bool = False, principal: str | None = None
    ) -> Interrupt:
        """A person's interrupt, through the HTTP API (``principal``: who, when the server has
        principals) or the embedding program; ``soft``: at the turn's next step boundary."""
        return cls(by=by, soft=soft, principal=principal if by == "api" else None)

    def tool_error_type(self, call_id: str) -> ToolErrorType:
        return self.tool_error

    def describe(self) -> str:
        who = "user" if self.by == "api" else "embedding program"
        return f"stopped after its step by the {who}" if self.soft else f"interrupted by the {who}"


@attrs.frozen
class Declined:
    """A person declined a tool call: a permission ``reject``, a dismissed question form, or either of
    those in a sub-agent session (``via: "task"``, ``call_id`` the parent's task call)."""

    type: ClassVar[str] = "declined"
    outcome: ClassVar[StopOutcome | None] = "declined"
    resumable: ClassVar[bool] = False
    text_status: ClassVar[TextStatus] = "interrupted"  # a text part the stop cut short
    terminal_event: ClassVar[str] = _INTERRUPTED_EVENT
    is_failure: ClassVar[bool] = False
    tool_error: ClassVar[ToolErrorType] = "declined"

    via: Literal["permission", "question", "task"]
    call_id: str
    # Set when the stop came down from the parent session's turn (a sub-agent's); else absent.
    parent: ParentLink | None = attrs.field(default=None, kw_only=True)

    @classmethod
    def by_permission(cls, call_id: str) -> Declined:
        """A ``reject`` without a message of the permission request of ``call_id``."""
        return cls(via="permission", call_id=call_id)

    @classmethod
    def by_form(cls, call_id: str) -> Declined:
        """A dismissal without a message of the question form of ``call_id``."""
        return cls(via="question", call_id=call_id)

    @classmethod
    def by_sub_agent(cls, task_call_id: str) -> Declined:
        """The sub-agent session of task call ``task_call_id`` ended declined (its own decline)."""
        return cls(via="task", call_id=task_call_id)

    def tool_error_type(self, call_id: str) -> ToolErrorType:
        # The declined call and the execute call that made it (nested ids are "<parent>.<n>") are
        # "declined"; their siblings were only stopped because of it.
        declined = call_id == self.call_id or self.call_id.startswith(call_id + ".")
        return self.tool_error if declined else "interrupted"

    def describe(self) -> str:
        if self.via == "permission":
            return f"the user declined tool call {self.call_id}"
        if self.via == "task":
            return f"the user declined a tool call of the sub-agent session of task call {self.call_id}"
        return f"the user dismissed the question of tool call {self.call_id}"


@attrs.frozen
class Timeout:
    """A deadline passed: a wait's, a step's or the turn's (``[timeouts]`` in the config)."""

    type: ClassVar[str] = "timeout"
    outcome: ClassVar[StopOutcome | None] = "timed_out"
    resumable: ClassVar[bool] = False
    text_status: ClassVar[TextStatus] = "timeout"  # a text part the stop cut short
    terminal_event: ClassVar[str] = _INTERRUPTED_EVENT
    is_failure: ClassVar[bool] = True
    tool_error: ClassVar[ToolErrorType] = "timeout"

    scope: TimeoutScope
    after: float
    # Set when the stop came down from the parent session's turn (a sub-agent's); else absent.
    parent: ParentLink | None = attrs.field(default=None, kw_only=True)

    @classmethod
    def deadline(cls, scope: TimeoutScope, after: float) -> Timeout:
        """The ``[timeouts] scope`` deadline of ``after`` seconds passed."""
        return cls(scope=scope, after=after)

    def tool_error_type(self, call_id: str) -> ToolErrorType:
        return self.tool_error

    def describe(self) -> str:
        return f"the {self.scope} deadline of {self.after:g}s passed"


@attrs.frozen
class Shutdown:
    """The coordinator itself is shutting down; the only reason whose turn resumes at the next start.

    Built only by the coordinator's shutdown path (a signal, ``shutdown()``, leaving
    ``open_coordinator`` or cancelling the scope that encloses it).
    """

    type: ClassVar[str] = "shutdown"
    outcome: ClassVar[StopOutcome | None] = None
    resumable: ClassVar[bool] = True
    text_status: ClassVar[TextStatus] = "shutdown"  # a text part the stop cut short
    terminal_event: ClassVar[str] = "session.execution.suspended"
    is_failure: ClassVar[bool] = False
    tool_error: ClassVar[ToolErrorType] = "interrupted"

    # Set when the stop came down from the parent session's turn (a sub-agent's); else absent.
    parent: ParentLink | None = attrs.field(default=None, kw_only=True)

    @classmethod
    def of_coordinator(cls) -> Shutdown:
        """The coordinator's own graceful shutdown: the only place a ``Shutdown`` is born."""
        return cls()

    def tool_error_type(self, call_id: str) -> ToolErrorType:
        return self.tool_error

    def describe(self) -> str:
        return "the server shut down"


@attrs.frozen
class Failure:
    """Something failed: the model after its retries, an internal error, or a reason-less cancellation.

    Its wire type is ``error``.
    """

    type: ClassVar[str] = "error"
    outcome: ClassVar[StopOutcome | None] = "failed"
    resumable: ClassVar[bool] = False
    text_status: ClassVar[TextStatus] = "interrupted"  # a text part the stop cut short
    terminal_event: ClassVar[str] = "session.execution.failed"
    is_failure: ClassVar[bool] = True
    tool_error: ClassVar[ToolErrorType] = "error"

    message: str
    # Set when the stop came down from the parent session's turn (a sub-agent's); else absent.
    parent: ParentLink | None = attrs.field(default=None, kw_only=True)

    @classmethod
    def of_model(cls, error: BaseException) -> Failure:
        """The model failed after its retries."""
        return cls(message=f"model error: {error}")

    @classmethod
    def internal(cls, error: BaseException, where: str | None = None) -> Failure:
        """An unexpected exception in the coordinator's own code (``where``: the actor)."""
        place = "" if where is None else f" in {where}"
        return cls(message=f"internal error{place}: {type(error).__name__}: {error}")

    @classmethod
    def too_many_steps(cls, steps: int) -> Failure:
        return cls(message=f"the turn took more than {steps} model steps")

    @classmethod
    def resumes_exhausted(cls, resumes: int) -> Failure:
        """``[server] max_resumes`` reached: the turn is failed rather than resumed again."""
        return cls(message=f"the turn was resumed {resumes} times without finishing; not resuming again")

    @classmethod
    def restarted(cls) -> Failure:
        """What a dead process left running (steps, calls) and no start can continue."""
        return cls(message="the server restarted; what was running could not be continued")

    @classmethod
    def abandoned(cls) -> Failure:
        """The coordinator was abandoned (its store refuses writes): actors torn down unsettled."""
        return cls(message="the coordinator was abandoned")

    @classmethod
    def claim_lost(cls) -> Failure:
        """Another node took the turn's claim over: this node's actors are torn down unsettled (every
        write of theirs is fenced out); the new owner settles or resumes the turn."""
        return cls(message="the claim was taken over by another node")

    @classmethod
    def left_over(cls, call_id: str) -> Failure:
        """A wait or nested call left unsettled by a call that settled on its own before it."""
        return cls(message=f"tool call {call_id} settled before this")

    @classmethod
    def sub_agent_orphaned(cls, task_call_id: str) -> Failure:
        """A sub-agent's turn whose task call failed on its own before the turn could settle."""
        return cls(message=f"its task call {task_call_id} failed before this turn could settle")

    def tool_error_type(self, call_id: str) -> ToolErrorType:
        return self.tool_error

    def describe(self) -> str:
        return self.message


StopReason = Interrupt | Declined | Timeout | Shutdown | Failure

REASON_CLASSES: tuple[type[StopReason], ...] = (Interrupt, Declined, Timeout, Shutdown, Failure)

REASONLESS = "reason-less cancellation"

_BY_TYPE: dict[str, type[StopReason]] = {cls.type: cls for cls in REASON_CLASSES}
_TOOL_ERROR_BY_OUTCOME: dict[str, ToolErrorType] = {
    cls.outcome: cls.tool_error for cls in REASON_CLASSES if cls.outcome is not None
}


def reason_class(type_word: str) -> type[StopReason]:
    """The reason class of a wire ``type`` word (``"error"`` is ``Failure``).

    Raises:
        KeyError: no reason has this type.
    """
    return _BY_TYPE[type_word]


def tool_error_of_outcome(outcome: str) -> ToolErrorType:
    """The error type of a task call whose sub-agent's turn stopped on its own with ``outcome``.

    Raises:
        KeyError: ``outcome`` is no stop's outcome ("succeeded", or no word at all).
    """
    return _TOOL_ERROR_BY_OUTCOME[outcome]


def from_parent(reason: StopReason, link: ParentLink) -> StopReason:
    """The reason a sub-agent's turn stops with when its parent's turn stopped for ``reason``: the same
    type and fields, with ``parent`` naming the task call."""
    return attrs.evolve(reason, parent=link)


def reasonless_failure() -> Failure:
    """The reason settled for a cancellation that arrived without one: a bug, never a shutdown."""
    return Failure(message=REASONLESS)


# Every reason is built through a classmethod above (or ``from_parent``, ``reasonless_failure``), so
# that each cause has one named place; tests/coordinator/test_reasons.py checks no other module calls
# a reason class directly.
