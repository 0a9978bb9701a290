"""Checking the input a person approves a tool call with, when they change the model's: it must fit
the tool's own input schema (the JSON Schema the model is shown), every keyword of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema

from coordinator import errors
from coordinator.tools.base import Tool

MAX_PROBLEMS = 5
"""How many of the input's problems an ``InvalidInput`` lists."""


def check(tools: Mapping[str, Tool], tool_name: str, edited: Any) -> None:
    """**Raises:** ``InvalidInput`` when ``edited`` is not an object or does not fit the input
    schema of the tool ``tool_name`` (one the session no longer has takes any object)."""
    if not isinstance(edited, dict):
        raise errors.InvalidInput(message="input must be a JSON object", problems=["input: not an object"])
    tool = tools.get(tool_name)
    if tool is None:
        return
    validator_class = jsonschema.validators.validator_for(
        tool.spec.parameters, default=jsonschema.Draft202012Validator
    )
    try:
        validator = validator_class(tool.spec.parameters)
        found = sorted(validator.iter_errors(edited), key=lambda error: list(error.absolute_path))
    except jsonschema.SchemaError as exc:  # the tool's own schema is broken: nothing can be checked
        raise errors.InvalidInput(
            message=f"the input schema of tool {tool_name!r} is not valid JSON Schema: {exc.message}",
            problems=[exc.message],
        ) from exc
    if found:
        problems = [_problem(error) for error in found[:MAX_PROBLEMS]]
        raise errors.InvalidInput(
            message=f"input does not fit the input schema of tool {tool_name!r}: {'; '.join(problems)}",
            problems=problems,
        )


def _problem(error: jsonschema.ValidationError) -> str:
    where = ".".join(str(part) for part in error.absolute_path)
    return f"input{'.' + where if where else ''}: {error.message}"
