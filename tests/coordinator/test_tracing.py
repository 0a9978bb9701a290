"""Tracing's switch and its log ids: on with a provider, off without one or without opentelemetry, and
JSON log lines that carry the ids of the span they were logged in."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from coordinator.actors.handle import ActorHandle
from coordinator.tracing import Tracing, add_trace_ids

REPOSITORY = Path(__file__).resolve().parents[2]


async def run_program(folder: Path, mode: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run ``tests/tracing_program.py``: its spans (stdout) and its JSON log lines (stderr)."""
    done = await trio.run_process(
        [sys.executable, "-m", "tests.tracing_program", str(folder), mode],
        cwd=REPOSITORY,
        capture_stdout=True,
        capture_stderr=True,
    )
    lines = [json.loads(line) for line in done.stderr.decode().splitlines()]
    return json.loads(done.stdout), lines


def logged(lines: list[dict[str, Any]], event: str, **fields: Any) -> dict[str, Any]:
    [line] = [ln for ln in lines if ln["event"] == event and fields.items() <= ln.items()]
    return line


def ids(span: dict[str, Any]) -> dict[str, str]:
    return {"trace_id": span["trace_id"], "span_id": span["span_id"]}


def ids_of(line: dict[str, Any]) -> dict[str, str]:
    return {key: line[key] for key in ("trace_id", "span_id") if key in line}


@pytest.mark.slow
async def test_log_lines_carry_the_ids_of_the_span_they_were_logged_in(tmp_path: Path) -> None:
    """An operator jumps from a log line to its span: each line names the span current where it was
    logged (the turn's, the tool call's, the wait's), with the global provider the CLI would use."""
    spans, lines = await run_program(tmp_path, "traced")
    assert [s["name"] for s in spans] == ["permission_wait", "execute_tool shell", "chat", "invoke_agent"] * 2
    declined_turn, kept_wait, kept_call, suspended_turn = spans[3], spans[4], spans[5], spans[7]
    assert ids_of(logged(lines, "turn_stopped", reason="declined")) == ids(declined_turn)
    assert ids_of(logged(lines, "permission_kept")) == ids(kept_wait)
    assert ids_of(logged(lines, "tool_call_kept")) == ids(kept_call)
    assert ids_of(logged(lines, "turn_stopped", reason="shutdown")) == ids(suspended_turn)
    assert ids_of(logged(lines, "coordinator_started")) == {}  # logged in no span


@pytest.mark.slow
async def test_without_opentelemetry_the_coordinator_runs_its_turns_untraced(tmp_path: Path) -> None:
    """The otel extra is optional: without it turns run as before, and log lines have no trace ids."""
    spans, lines = await run_program(tmp_path, "without-otel")
    assert spans == []
    assert [ln["event"] for ln in lines if ln["event"] != "coordinator_started"] == [
        "turn_stopped",
        "permission_kept",
        "tool_call_kept",
        "turn_stopped",
    ]
    assert [ln for ln in lines if "trace_id" in ln or "span_id" in ln] == []


def test_tracing_is_off_until_a_provider_is_configured() -> None:
    """No provider passed and no global one set (this test process never sets it): no spans at all."""
    assert not Tracing.configure().on
    assert not Tracing.configure(trace.NoOpTracerProvider()).on
    assert Tracing.configure(TracerProvider()).on


def test_the_log_processor_adds_the_current_span_and_nothing_outside_one() -> None:
    """``trace_id`` and ``span_id`` are hex, as OpenTelemetry prints them, and only inside a span."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing.configure(provider)
    assert add_trace_ids(None, "info", {"event": "outside"}) == {"event": "outside"}
    with tracing.step("ses_1", "step_1", ActorHandle(kind="step", id="step_1")):
        line = add_trace_ids(None, "info", {"event": "inside"})
    [span] = exporter.get_finished_spans()
    assert line == {
        "event": "inside",
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
    }
    assert add_trace_ids(None, "info", {"event": "after"}) == {"event": "after"}
