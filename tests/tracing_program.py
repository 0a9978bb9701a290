"""A program for tests/coordinator/test_tracing.py: turns run as the CLI's logging and a global provider
would see them, in a process of their own (the global provider and the logging configuration are
process-wide; the test process keeps neither).

``python -m tests.tracing_program DIR traced|without-otel``: logs JSON lines on stderr
(``configure_logging``), runs a declined turn, then a turn whose permission wait a shutdown keeps, and
prints the finished spans as one JSON list on stdout. ``without-otel`` makes ``import opentelemetry``
fail first, as on an installation without the ``otel`` extra.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

if sys.argv[2] == "without-otel":
    sys.modules["opentelemetry"] = None  # type: ignore[assignment]

import trio

from coordinator.log_output import configure_logging
from tests.conftest import ASK_SHELL, make_config, running

SHELL_CALL = {"tool_calls": [{"id": "call_shell", "name": "shell", "input": {"command": "echo hi"}}]}


def install_global_provider() -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


async def run_turns(folder: Path) -> None:
    config = make_config(folder, rules=ASK_SHELL)
    script = [SHELL_CALL, SHELL_CALL]
    async with running(config, script) as (coord, recorder):
        session = await coord.create_session(title="logged")
        await coord.prompt(session.id, "go")
        asked = await recorder.wait_for("permission.asked")
        await coord.reply_permission(session.id, asked.payload["request"]["id"], "reject")
        await recorder.wait_for("session.idle")
        await coord.prompt(session.id, "again")
        await recorder.wait_for("permission.asked", 2)
    # Leaving ``running`` shut the coordinator down: the second wait and its call were kept.


def span_records(exporter: Any) -> list[dict[str, Any]]:
    from opentelemetry import trace

    return [
        {
            "name": span.name,
            "trace_id": trace.format_trace_id(span.context.trace_id),
            "span_id": trace.format_span_id(span.context.span_id),
        }
        for span in exporter.get_finished_spans()
    ]


def main() -> None:
    folder, mode = Path(sys.argv[1]), sys.argv[2]
    configure_logging(sys.stderr)
    exporter = install_global_provider() if mode == "traced" else None
    trio.run(run_turns, folder)
    print(json.dumps([] if exporter is None else span_records(exporter)))


if __name__ == "__main__":
    main()
