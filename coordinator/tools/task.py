"""The built-in ``task`` tool: a sub-agent, one turn of a child session of its own.

The tool only checks its input; the turn is run by ``coordinator/actors/task.py`` as a child actor of the call,
through the ``run_task`` its tool context offers.
"""

from __future__ import annotations

from typing import Any

from coordinator.errors import ToolFailure
from coordinator.models.base import ToolSpec
from coordinator.records import MAX_TEXT, MAX_TITLE
from coordinator.tools.base import Capabilities, Tool, ToolContext

DEFAULT_TITLE = "task"

SPEC = ToolSpec(
    name="task",
    description=(
        "Hand a piece of work to a sub-agent: a session of its own that works on `prompt` for one turn "
        "and answers with its last text. Give `session_id` (from an earlier task result) to continue "
        "with the same sub-agent, which remembers its earlier turns."
    ),
    parameters={
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "minLength": 1},
            "title": {"type": "string", "maxLength": MAX_TITLE},
            "session_id": {"type": "string"},
        },
        "required": ["prompt"],
        "additionalProperties": False,
    },
)


def resource(input: dict[str, Any]) -> str:
    """The resource permission rules match: the sub-agent's title (``task`` when none is given)."""
    title = input.get("title")
    return title if isinstance(title, str) and title else DEFAULT_TITLE


def _checked(input: dict[str, Any]) -> tuple[str, str, str | None]:
    unknown = sorted(set(input) - {"prompt", "title", "session_id"})
    if unknown:
        raise ToolFailure(
            type="error", message=f"unknown input key {unknown[0]!r} (expected prompt, title, session_id)"
        )
    prompt, title, session_id = input.get("prompt"), input.get("title"), input.get("session_id")
    if not isinstance(prompt, str) or not prompt.strip() or len(prompt) > MAX_TEXT:
        raise ToolFailure(type="error", message="prompt must be a non-empty string")
    if title is not None and (not isinstance(title, str) or len(title) > MAX_TITLE):
        raise ToolFailure(type="error", message=f"title must be a string of at most {MAX_TITLE} characters")
    if session_id is not None and not isinstance(session_id, str):
        raise ToolFailure(type="error", message="session_id must be a string")
    return prompt, resource(input), session_id


async def _run(ctx: ToolContext, input: dict[str, Any]) -> Any:
    prompt, title, session_id = _checked(input)
    if ctx.run_task is None:
        raise ToolFailure(type="error", message="sub-agents are not available here")
    return await ctx.run_task(prompt, title, session_id)


def task_tool() -> Tool:
    # No `[timeouts] tool` deadline: the sub-agent's turn is bounded by its own deadlines (step, turn,
    # waits), and a tool deadline would cut every longer piece of work short.
    # Not nestable: a sub-agent must resume inside its call after a restart, and a script's nested
    # calls cannot be restored.
    capabilities = Capabilities(runs_sub_agent=True, nestable=False)
    return Tool(spec=SPEC, resource=resource, run=_run, deadline_scope=None, capabilities=capabilities)
