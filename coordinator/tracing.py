"""Tracing: one OpenTelemetry span per actor, or nothing at all when it is off.

Tracing is on when an OpenTelemetry ``TracerProvider`` is configured: the one passed to
``open_coordinator(tracer_provider=...)``, else the global one (``trace.set_tracer_provider``). Without
the ``otel`` extra installed, or with no provider configured, every span here is one shared no-op
object and no OpenTelemetry code runs. ``design/tracing.md`` draws the span tree and lists the
attributes.

The SDK keeps the current span in a context variable, and trio copies context variables into a task
when the task is *started*: each actor opens its span in its own task, around its whole body, so the
children it starts inherit the span as their parent. The turn's span is the exception: a session actor
is started by whichever call first prompted the session, so the turn span is opened as a root on
purpose (``_root_context``), never under the span of that caller.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from coordinator.reasons import StopReason, reasonless_failure
from coordinator.records import Usage

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
except ImportError:  # the otel extra is not installed: tracing stays off
    otel_context = None  # type: ignore[assignment]
    trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from coordinator.records import Form, PermissionRequest
    from coordinator.store.rows import ToolCallRow

# Attribute keys: the GenAI semantic conventions' where one exists, the coordinator's own otherwise.
OPERATION = "gen_ai.operation.name"
CONVERSATION = "gen_ai.conversation.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
ERROR_TYPE = "error.type"
STOP_REASON = "coordinator.stop.reason"
TURN_ID = "coordinator.turn.id"
RESUMED_AFTER = "coordinator.turn.resumed_after"
STEP_ID = "coordinator.step.id"
PERMISSION_ID = "coordinator.permission.id"
PERMISSION_DECISION = "coordinator.permission.decision"
FORM_ID = "coordinator.form.id"
FORM_STATUS = "coordinator.form.status"


class StopSource(Protocol):
    """Where a span reads the reason its actor stops for: the actor's handle (``coordinator/actors/handle.py``)."""

    def effective_reason(self) -> StopReason | None: ...


@attrs.define(eq=False)
class ActorSpan:
    """One actor's span while the actor runs; records once how the actor ended.

    ``span`` is None when tracing is off: every method then returns at once.
    """

    span: Any  # an opentelemetry.trace.Span, or None
    ended: bool = False
    input_tokens: int = 0
    output_tokens: int = 0

    def set(self, key: str, value: str) -> None:
        if self.span is not None:
            self.span.set_attribute(key, value)

    def succeeded(self) -> None:
        self.ended = True

    def settled(self, reason: StopReason | None) -> None:
        """The actor settled: succeeded when ``reason`` is None, else stopped for it."""
        if reason is None:
            self.succeeded()
        else:
            self.stopped(reason)

    def stopped(self, reason: StopReason) -> None:
        """The actor settled because its turn stopped for ``reason``."""
        self.ended = True
        if self.span is None:
            return
        self.span.set_attribute(STOP_REASON, reason.type)
        # A failure of the span (status ERROR, ``error.type``) when the reason table says the stop is a
        # failure (a deadline, an error); an interrupt, a decline or a shutdown went as asked.
        if reason.is_failure:
            self._error(reason.type, reason.describe())

    def failed(self, error_type: str, message: str, *, stopped_for: StopReason | None) -> None:
        """The actor failed on its own (a tool's failure), unless its turn was stopping meanwhile:
        then the stop is what ended it, and its reason is recorded instead."""
        if stopped_for is not None:
            self.stopped(stopped_for)
            return
        self.ended = True
        if self.span is not None:
            self._error(error_type, message)

    def add_usage(self, usage: Usage | None) -> None:
        """Add the tokens a model request reported (a step's, or each of a turn's steps)."""
        if self.span is None or usage is None:
            return
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.span.set_attribute(INPUT_TOKENS, self.input_tokens)
        self.span.set_attribute(OUTPUT_TOKENS, self.output_tokens)

    def _error(self, error_type: str, message: str) -> None:
        self.span.set_attribute(ERROR_TYPE, error_type)
        self.span.set_status(trace.Status(trace.StatusCode.ERROR, message))

    def leave(self, exc: BaseException | None, source: StopSource | None) -> None:
        """How the actor ended, when it did not say: stopped if its turn is stopping (or a cancellation
        came without a reason: a bug, settled as error as everywhere), failed if an exception escaped."""
        if self.ended or self.span is None:
            return
        reason = None if source is None else source.effective_reason()
        if reason is None and _only_cancelled(exc):
            reason = reasonless_failure()
        if reason is not None:
            self.stopped(reason)
        elif exc is not None:
            self.failed(type(exc).__name__, str(exc), stopped_for=None)


def _only_cancelled(exc: BaseException | None) -> bool:
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_cancelled(inner) for inner in exc.exceptions)
    return False


NO_SPAN = ActorSpan(span=None)
_OFF: contextlib.nullcontext[ActorSpan] = contextlib.nullcontext(NO_SPAN)


@attrs.frozen
class Tracing:
    """Opens the actors' spans; ``tracer`` is None when tracing is off."""

    tracer: Any = None  # an opentelemetry.trace.Tracer

    @classmethod
    def configure(cls, provider: TracerProvider | None = None) -> Tracing:
        """On with ``provider``, else with the global provider once one is set; off without either.

        Decided once, when the coordinator opens: a global provider set later is not picked up.
        """
        if trace is None:
            return cls()
        chosen = provider if provider is not None else trace.get_tracer_provider()
        if isinstance(chosen, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            return cls()  # nothing configured: the API's default answers with no-op spans
        return cls(tracer=chosen.get_tracer("coordinator"))

    @property
    def on(self) -> bool:
        return self.tracer is not None

    def turn(
        self, session_id: str, turn_id: str, source: StopSource, *, resumed_after: str | None
    ) -> contextlib.AbstractContextManager[ActorSpan]:
        """The span of one run of a turn (``invoke_agent``): a root span, as the module says.

        A resumed turn (after a shutdown or a crash) is a new root span with ``resumed_after``: the
        earlier process's span is not linked (design/tracing.md says why).
        """
        if self.tracer is None:
            return _OFF
        attributes = {OPERATION: "invoke_agent", CONVERSATION: session_id, TURN_ID: turn_id}
        if resumed_after is not None:
            attributes[RESUMED_AFTER] = resumed_after
        return self._span("invoke_agent", attributes, source, parent=_root_context())

    def step(
        self, session_id: str, step_id: str, source: StopSource
    ) -> contextlib.AbstractContextManager[ActorSpan]:
        """The span of one model request and the tool calls it asked for (``chat``)."""
        if self.tracer is None:
            return _OFF
        attributes = {OPERATION: "chat", CONVERSATION: session_id, STEP_ID: step_id}
        return self._span("chat", attributes, source)

    def tool_call(
        self, call: ToolCallRow, source: StopSource
    ) -> contextlib.AbstractContextManager[ActorSpan]:
        """The span of one tool call (``execute_tool {name}``), a nested call of execute included."""
        if self.tracer is None:
            return _OFF
        attributes = {
            OPERATION: "execute_tool",
            CONVERSATION: call.session_id,
            TOOL_NAME: call.name,
            TOOL_CALL_ID: call.call_id,
        }
        return self._span(f"execute_tool {call.name}", attributes, source)

    def permission_wait(
        self, request: PermissionRequest, source: StopSource
    ) -> contextlib.AbstractContextManager[ActorSpan]:
        """The span of one permission wait, from its request's publication to its settlement."""
        if self.tracer is None:
            return _OFF
        attributes = {
            CONVERSATION: request.session_id,
            TOOL_CALL_ID: request.call_id,
            PERMISSION_ID: request.id,
        }
        return self._span("permission_wait", attributes, source)

    def question_wait(self, form: Form, source: StopSource) -> contextlib.AbstractContextManager[ActorSpan]:
        """The span of one question form's wait, from its publication to its settlement."""
        if self.tracer is None:
            return _OFF
        attributes = {CONVERSATION: form.session_id, TOOL_CALL_ID: form.call_id, FORM_ID: form.id}
        return self._span("question_wait", attributes, source)

    @contextlib.contextmanager
    def _span(
        self, name: str, attributes: dict[str, str], source: StopSource | None, parent: Any = None
    ) -> Iterator[ActorSpan]:
        """A span current in this task (and in the tasks it starts) until the actor leaves."""
        span = self.tracer.start_span(name, context=parent, attributes=attributes)
        actor_span = ActorSpan(span=span)
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield actor_span
        except BaseException as exc:
            actor_span.leave(exc, source)
            raise
        else:
            actor_span.leave(None, source)
        finally:
            span.end()
            otel_context.detach(token)


def _root_context() -> Any:
    """The parent context of a turn's span: an empty one, so the turn span is a root.

    A sub-agent's turn will be opened under its ``task`` call's span instead (design/tracing.md).
    """
    return otel_context.Context()


def add_trace_ids(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A structlog processor: ``trace_id`` and ``span_id`` (hex, as OpenTelemetry prints them) of the
    span current where the line was logged, if any."""
    if trace is None:
        return event_dict
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event_dict["trace_id"] = trace.format_trace_id(context.trace_id)
        event_dict["span_id"] = trace.format_span_id(context.span_id)
    return event_dict
