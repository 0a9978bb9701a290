"""What a tool is, and what a running tool call may use."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import attrs

from coordinator.models.base import ToolSpec
from coordinator.records import Question


@attrs.frozen
class FormReply:
    """A person's answer to a form: ``answers`` when submitted, or None with feedback when dismissed."""

    answers: dict[str, str] | None
    message: str | None = None


class FormOpener(Protocol):
    """Shows a form to a person and waits for the answer (the ``question`` tool uses it)."""

    async def __call__(self, questions: list[Question]) -> FormReply: ...


class NestedCaller(Protocol):
    """Runs a nested tool call under the calling tool (``execute`` uses it)."""

    async def __call__(self, name: str, input: dict[str, Any]) -> Any: ...


@attrs.define(kw_only=True)
class ToolContext:
    """Owned by one tool-call actor while its tool runs.

    ``report_progress`` records the latest progress detail (stored and published by the actor); a stop
    puts that detail into the call's partial result, so work done so far is never lost.
    """

    session_id: str
    call_id: str
    workdir: Path
    report_progress: Callable[[Any], None]
    call_nested: NestedCaller | None = None
    open_form: FormOpener | None = None
    latest_progress: Any = None


ToolRun = Callable[[ToolContext, dict[str, Any]], Awaitable[Any]]


@attrs.frozen(kw_only=True)
class Tool:
    """A tool: its spec for the model, how to name its resource for permission rules, and its body.

    ``run`` returns the JSON-able result, or raises ``ToolFailure`` to fail with a typed error.
    """

    spec: ToolSpec
    resource: Callable[[dict[str, Any]], str]
    run: ToolRun

    @property
    def name(self) -> str:
        return self.spec.name


def any_resource(input: dict[str, Any]) -> str:
    """The resource of tools that have none to match: ``*``."""
    return "*"
