"""Tracing: the span tree of whole turns, each span's parent, reason and attributes.

Each test has a TracerProvider of its own with the SDK's in-memory exporter, passed to
``open_coordinator``: the global provider is never set in this process.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from coordinator.chaos import crash
from coordinator.config import Config, PluginConfig, TimeoutsConfig
from tests.conftest import Recorder, make_config, running
from tests.scenarios import test_execute
from tests.scenarios.test_question_forms import ASK
from tests.scenarios.test_stop_matrix import DONE, RULES

PROMPT = "please say hello to everyone in the room"
SHELL_CALL = {"tool_calls": [{"id": "call_shell", "name": "shell", "input": {"command": "echo hi"}}]}


@attrs.frozen
class Traced:
    provider: TracerProvider
    exporter: InMemorySpanExporter

    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()


@pytest.fixture
def traced() -> Iterator[Traced]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Traced(provider=provider, exporter=exporter)
    provider.shutdown()


def span_trees(spans: Sequence[ReadableSpan]) -> list[dict[str, Any]]:
    """Every root span with its descendants (name, attributes, status, children), in start order.

    Asserts on the way that every span's parent was exported too, in the same trace.
    """
    by_id = {span.context.span_id: span for span in spans}
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        parent = None if span.parent is None else span.parent.span_id
        assert parent is None or parent in by_id, f"{span.name}: its parent span was never exported"
        if parent is not None:
            assert by_id[parent].context.trace_id == span.context.trace_id
        children.setdefault(parent, []).append(span)

    def node(span: ReadableSpan) -> dict[str, Any]:
        return {
            "name": span.name,
            "attributes": dict(span.attributes or {}),
            "status": span.status.status_code.name,
            "children": [node(child) for child in children.get(span.context.span_id, [])],
        }

    return [node(root) for root in children.get(None, [])]


def step_ids(recorder: Recorder) -> list[str]:
    return [e.payload["step_id"] for e in recorder.of("session.step.started")]


def tokens(text: str) -> int:
    """The scripted model's usage: characters over 4 (``coordinator/models/scripted.py``)."""
    return len(text) // 4


def turn_span(session_id: str, turn_id: str, children: list[Any], **extra: Any) -> dict[str, Any]:
    return _span(
        "invoke_agent",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": session_id,
            "coordinator.turn.id": turn_id,
        },
        children,
        extra,
    )


def chat_span(session_id: str, step_id: str, children: list[Any], **extra: Any) -> dict[str, Any]:
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.conversation.id": session_id}
    return _span("chat", {**attributes, "coordinator.step.id": step_id}, children, extra)


def tool_span(session_id: str, name: str, call_id: str, children: list[Any], **extra: Any) -> dict[str, Any]:
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.conversation.id": session_id,
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
    }
    return _span(f"execute_tool {name}", attributes, children, extra)


def permission_span(session_id: str, call_id: str, request_id: str, **extra: Any) -> dict[str, Any]:
    attributes = {
        "gen_ai.conversation.id": session_id,
        "gen_ai.tool.call.id": call_id,
        "coordinator.permission.id": request_id,
    }
    return _span("permission_wait", attributes, [], extra)


def _span(
    name: str, attributes: dict[str, Any], children: list[Any], extra: dict[str, Any]
) -> dict[str, Any]:
    status = extra.pop("status", "UNSET")
    return {"name": name, "attributes": {**attributes, **extra}, "status": status, "children": children}


def usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens}


def stopped(reason: str) -> dict[str, str]:
    return {"coordinator.stop.reason": reason}


async def start(coord: Any, recorder: Recorder, until: str) -> tuple[str, str]:
    session = await coord.create_session(title="traced")
    turn_id = await coord.prompt(session.id, PROMPT)
    await recorder.wait_for(until)
    await trio.testing.wait_all_tasks_blocked()
    return session.id, turn_id


async def test_a_declined_turn_is_a_tree_of_declined_spans(
    config: Config, traced: Traced, autojump_clock: Any
) -> None:
    """Wait, tool call, step and turn each record the decline: an operator sees why every part ended."""
    async with running(config, [SHELL_CALL, DONE], tracer_provider=traced.provider) as (coord, recorder):
        session_id, turn_id = await start(coord, recorder, "permission.asked")
        request_id = recorder.of("permission.asked")[0].payload["request"]["id"]
        await coord.reply_permission(session_id, request_id, "reject")
        await recorder.wait_for("session.idle")
    [step_id] = step_ids(recorder)
    spent = usage(tokens(PROMPT), 0)
    wait = permission_span(
        session_id,
        "call_shell",
        request_id,
        **{"coordinator.permission.decision": "reject"},
        **stopped("declined"),
    )
    call = tool_span(session_id, "shell", "call_shell", [wait], **stopped("declined"))
    step = chat_span(session_id, step_id, [call], **spent, **stopped("declined"))
    assert span_trees(traced.spans()) == [
        turn_span(session_id, turn_id, [step], **spent, **stopped("declined"))
    ]


async def test_an_interrupt_during_a_permission_wait_ends_the_wait_span_as_interrupt(
    config: Config, traced: Traced, autojump_clock: Any
) -> None:
    """The wait's span says it was cut off by the interrupt, not answered and not failed (seed 003)."""
    async with running(config, [SHELL_CALL, DONE], tracer_provider=traced.provider) as (coord, recorder):
        session_id, turn_id = await start(coord, recorder, "permission.asked")
        request_id = recorder.of("permission.asked")[0].payload["request"]["id"]
        assert await coord.interrupt(session_id)
        await recorder.wait_for("session.idle")
    [step_id] = step_ids(recorder)
    spent = usage(tokens(PROMPT), 0)
    wait = permission_span(session_id, "call_shell", request_id, **stopped("interrupt"))
    call = tool_span(session_id, "shell", "call_shell", [wait], **stopped("interrupt"))
    step = chat_span(session_id, step_id, [call], **spent, **stopped("interrupt"))
    expected = turn_span(session_id, turn_id, [step], **spent, **stopped("interrupt"))
    assert span_trees(traced.spans()) == [expected]


async def test_an_interrupted_execute_has_its_nested_calls_as_child_spans(
    tmp_path: Path, traced: Traced
) -> None:
    """Nested calls are children of the execute call's span: the finished one succeeded, the running one
    stopped with the interrupt, as the execute call itself (seed 002)."""
    model = test_execute.RecordingModel.from_json([test_execute.execute_call(test_execute.SEED_SCRIPT), DONE])
    config = test_execute.config_for(tmp_path)
    async with test_execute.running(config, model, tracer_provider=traced.provider) as (coord, recorder):
        session_id = await test_execute.start(coord, PROMPT)
        await recorder.wait_for("session.tool.started", count=3)
        assert await coord.interrupt(session_id)
        await recorder.wait_for("session.idle")
    turn_id = recorder.of("session.turn.started")[0].payload["turn_id"]
    [step_id] = step_ids(recorder)
    first = tool_span(session_id, "slow_wait", "call_exec.1", [])
    second = tool_span(session_id, "slow_wait", "call_exec.2", [], **stopped("interrupt"))
    execute = tool_span(session_id, "execute", "call_exec", [first, second], **stopped("interrupt"))
    spent = usage(tokens(PROMPT), 0)
    step = chat_span(session_id, step_id, [execute], **spent, **stopped("interrupt"))
    expected = turn_span(session_id, turn_id, [step], **spent, **stopped("interrupt"))
    assert span_trees(traced.spans()) == [expected]


async def test_a_resumed_turn_is_a_new_root_span_marked_as_resumed(tmp_path: Path, traced: Traced) -> None:
    """After a shutdown the turn's first run ends as shutdown, and its resumption is a trace of its own
    with the same turn id, the restored call and wait under it, then the next step."""
    config = make_config(tmp_path, rules=RULES, timeouts=TimeoutsConfig(tool=0))
    async with running(config, [SHELL_CALL, DONE], tracer_provider=traced.provider) as (coord, recorder):
        session_id, turn_id = await start(coord, recorder, "permission.asked")
    request_id = recorder.of("permission.asked")[0].payload["request"]["id"]
    async with running(config, [DONE], tracer_provider=traced.provider) as (coord, resumed):
        await resumed.wait_for("permission.asked", 2)
        await coord.reply_permission(session_id, request_id, "once")
        await resumed.wait_for("session.idle")
    first_step, second_step = step_ids(resumed)
    spent = usage(tokens(PROMPT), 0)
    wait = permission_span(session_id, "call_shell", request_id, **stopped("shutdown"))
    call = tool_span(session_id, "shell", "call_shell", [wait], **stopped("shutdown"))
    before = turn_span(
        session_id, turn_id, [chat_span(session_id, first_step, [call], **spent, **stopped("shutdown"))],
        **spent, **stopped("shutdown"),
    )  # fmt: skip
    step_usage = recorder_usage(resumed)
    restored = tool_span(
        session_id, "shell", "call_shell",
        [permission_span(session_id, "call_shell", request_id, **{"coordinator.permission.decision": "once"})],
    )  # fmt: skip
    after = turn_span(
        session_id, turn_id, [restored, chat_span(session_id, second_step, [], **step_usage)],
        **{"coordinator.turn.resumed_after": "shutdown"}, **step_usage,
    )  # fmt: skip
    trees = span_trees(traced.spans())
    assert trees == [before, after]
    first_trace, second_trace = {s.context.trace_id for s in traced.spans() if s.parent is None}
    assert first_trace != second_trace  # not linked: design/tracing.md


def recorder_usage(recorder: Recorder) -> dict[str, int]:
    [succeeded] = recorder.of("session.step.succeeded")
    reported = succeeded.payload["usage"]
    return usage(reported["input_tokens"], reported["output_tokens"])


async def test_a_tool_failing_as_its_turn_is_interrupted_records_the_interrupt(
    tmp_path: Path, traced: Traced, autojump_clock: Any
) -> None:
    """The tool raised its own error while the interrupt was tearing it down: its span records the
    interrupt (the stop that ended it), not a tool error the operator would chase."""
    config = make_config(tmp_path)
    config = attrs.evolve(
        config, plugin=(PluginConfig(entry="tests.coordinator.chaos.user_tools:unwinding"),)
    )
    call = {"tool_calls": [{"id": "call_1", "name": "unwinding", "input": {"seconds": 5}}]}
    async with running(config, [call, DONE], tracer_provider=traced.provider) as (coord, recorder):
        session_id, _ = await start(coord, recorder, "session.tool.started")
        assert await coord.interrupt(session_id)
        await recorder.wait_for("session.idle")
    [failed] = recorder.of("session.tool.failed")
    assert failed.payload["error"] == {"type": "error", "message": "RuntimeError: it broke", "started": True}
    [turn] = span_trees(traced.spans())
    [tool] = turn["children"][0]["children"]
    assert tool == tool_span(session_id, "unwinding", "call_1", [], **stopped("interrupt"))


async def test_a_dismissed_form_ends_its_question_wait_span_as_declined(
    tmp_path: Path, traced: Traced, autojump_clock: Any
) -> None:
    """The question form's wait is a span of its own under its call, with the dismissal as its reason."""
    async with running(make_config(tmp_path), [ASK, DONE], tracer_provider=traced.provider) as (
        coord,
        recorder,
    ):
        session_id, _ = await start(coord, recorder, "form.asked")
        form_id = recorder.of("form.asked")[0].payload["form"]["id"]
        await coord.dismiss_form(session_id, form_id)
        await recorder.wait_for("session.idle")
    [turn] = span_trees(traced.spans())
    [tool] = turn["children"][0]["children"]
    wait = _span(
        "question_wait",
        {
            "gen_ai.conversation.id": session_id,
            "gen_ai.tool.call.id": "call_q",
            "coordinator.form.id": form_id,
            "coordinator.form.status": "cancelled",
        },
        [],
        stopped("declined"),
    )
    assert tool == tool_span(session_id, "question", "call_q", [wait], **stopped("declined"))


async def test_a_deadline_marks_every_span_it_stopped_as_an_error(
    config: Config, traced: Traced, autojump_clock: Any
) -> None:
    """A turn deadline is a failure: each span it stopped has status ERROR and ``error.type`` timeout."""
    config = attrs.evolve(config, timeouts=TimeoutsConfig(turn=5))
    async with running(config, [SHELL_CALL, DONE], tracer_provider=traced.provider) as (coord, recorder):
        session_id, turn_id = await start(coord, recorder, "permission.asked")
        await recorder.wait_for("session.idle")
    request_id = recorder.of("permission.asked")[0].payload["request"]["id"]
    [step_id] = step_ids(recorder)
    failed = {"status": "ERROR", "error.type": "timeout", **stopped("timeout")}
    spent = usage(tokens(PROMPT), 0)
    wait = permission_span(session_id, "call_shell", request_id, **failed)
    call = tool_span(session_id, "shell", "call_shell", [wait], **failed)
    step = chat_span(session_id, step_id, [call], **spent, **failed)
    assert span_trees(traced.spans()) == [turn_span(session_id, turn_id, [step], **spent, **failed)]
    assert {span.status.description for span in traced.spans()} == {"the turn deadline of 5s passed"}


async def test_a_tool_that_fails_on_its_own_is_an_error_span_in_a_turn_that_succeeds(
    config: Config, traced: Traced, autojump_clock: Any
) -> None:
    """A tool's own failure is the call's error (``error.type`` its type); the step and turn go on."""
    unknown = {"tool_calls": [{"id": "call_x", "name": "nonexistent", "input": {}}]}
    async with running(config, [unknown, DONE], tracer_provider=traced.provider) as (coord, recorder):
        session_id, _ = await start(coord, recorder, "session.idle")
    [turn] = span_trees(traced.spans())
    assert "coordinator.stop.reason" not in turn["attributes"] and turn["status"] == "UNSET"
    first, second = turn["children"]
    assert [first["name"], second["name"]] == ["chat", "chat"]
    assert first["children"] == [
        tool_span(session_id, "nonexistent", "call_x", [], status="ERROR", **{"error.type": "error"})
    ]
    [error] = [s for s in traced.spans() if s.name == "execute_tool nonexistent"]
    assert error.status.description == "unknown tool 'nonexistent'"
    reported = [e.payload["usage"] for e in recorder.of("session.step.succeeded")]
    assert turn["attributes"]["gen_ai.usage.input_tokens"] == sum(u["input_tokens"] for u in reported)
    assert turn["attributes"]["gen_ai.usage.output_tokens"] == sum(u["output_tokens"] for u in reported)
    assert [s["attributes"]["gen_ai.usage.output_tokens"] for s in (first, second)] == [
        u["output_tokens"] for u in reported
    ]


async def test_a_turn_resumed_after_a_crash_is_marked_as_resumed_after_a_crash(
    tmp_path: Path, traced: Traced
) -> None:
    """After a crash the resumed run is a root span with ``resumed_after`` crash and the same turn id."""
    config = make_config(tmp_path, rules=RULES, timeouts=TimeoutsConfig(tool=0))
    async with running(config, [SHELL_CALL, DONE]) as (coord, recorder):  # the crashed run: untraced
        session_id, turn_id = await start(coord, recorder, "permission.asked")
        await crash(coord)
    async with running(config, [DONE], tracer_provider=traced.provider) as (coord, resumed):
        restored = await resumed.wait_for("permission.asked", 2)
        await coord.reply_permission(session_id, restored.payload["request"]["id"], "once")
        await resumed.wait_for("session.idle")
    [turn] = span_trees(traced.spans())
    assert turn["attributes"]["coordinator.turn.resumed_after"] == "crash"
    assert turn["attributes"]["coordinator.turn.id"] == turn_id
    assert [child["name"] for child in turn["children"]] == ["execute_tool shell", "chat"]
    assert "coordinator.stop.reason" not in turn["attributes"]
