"""The built-in ``question`` tool: shows a form to a person and returns their answers."""

from __future__ import annotations

from typing import Any

from coordinator import wire
from coordinator.errors import ToolFailure
from coordinator.models.base import ToolSpec
from coordinator.records import Question
from coordinator.tools.base import Tool, ToolContext, any_resource

SPEC = ToolSpec(
    name="question",
    description=(
        "Ask the user one or more questions and wait for the answers. Give each question an id, a "
        "prompt, and optionally a list of options the answer must be one of."
    ),
    parameters={
        "type": "object",
        "properties": {
            "questions": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "prompt": {"type": "string"},
                        "options": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["id", "prompt"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["questions"],
        "additionalProperties": False,
    },
)


def parse_questions(input: dict[str, Any]) -> list[Question]:
    """The form's questions from the tool input. **Raises:** ``ToolFailure`` naming what is wrong."""
    raw = input.get("questions")
    if set(input) - {"questions"} or not isinstance(raw, list) or not raw:
        raise ToolFailure(type="error", message="input must be {questions: [{id, prompt, options?}, ...]}")
    try:
        questions: list[Question] = wire.structure(raw, list[Question])
    except Exception as exc:
        raise ToolFailure(type="error", message=f"invalid questions: {exc}") from exc
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        raise ToolFailure(type="error", message="question ids must be unique")
    return questions


async def _run(ctx: ToolContext, input: dict[str, Any]) -> Any:
    questions = parse_questions(input)
    if ctx.open_form is None:
        raise ToolFailure(type="error", message="question forms are not available here")
    reply = await ctx.open_form(questions)
    if reply.answers is None:
        raise ToolFailure(type="declined", message=reply.message or "the user dismissed the question")
    return {"answers": reply.answers}


def question_tool() -> Tool:
    return Tool(spec=SPEC, resource=any_resource, run=_run, deadline_scope=None)
