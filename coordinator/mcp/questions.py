"""A server's question (form-mode elicitation) as a form: one question a property of its JSON Schema,
and a person's answers converted to the types that schema asks for.

An elicitation's schema is a flat object of primitive properties (a string, maybe with an ``enum``;
a number or an integer; a boolean; an array of enum strings). A person answers in text or in JSON:
``"3"`` and ``3`` both answer an integer, ``"true"`` and ``true`` a boolean. What the schema refuses
once converted is refused as a whole, naming the question, and never reaches the server.
"""

from __future__ import annotations

from typing import Any

import jsonschema

from coordinator.records import Question

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def questions_of(schema: dict[str, Any], message: str) -> list[Question]:
    """One question a property (``id`` = its name, ``prompt`` = its title or description, ``options``
    = its enum); a schema with no property is one question, ``message``, answered by any text."""
    properties = schema.get("properties") or {}
    if not properties:
        return []
    questions = []
    for name, prop in properties.items():
        prop = prop if isinstance(prop, dict) else {}
        prompt = prop.get("title") or prop.get("description") or name
        questions.append(Question(id=name, prompt=str(prompt), options=_options(prop)))
    return questions


def _options(prop: dict[str, Any]) -> list[str] | None:
    """The values a property takes: its ``enum``, or its titled ``oneOf``/``anyOf`` constants; for an
    array (a multiple choice), its items'."""
    items = prop.get("items")
    if prop.get("type") == "array" and isinstance(items, dict):
        prop = items
    enum = prop.get("enum")
    if enum is None:
        titled = prop.get("oneOf") or prop.get("anyOf")
        if isinstance(titled, list):
            enum = [option["const"] for option in titled if isinstance(option, dict) and "const" in option]
    return None if not enum else [str(value) for value in enum]


def convert_answers(schema: dict[str, Any], answers: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``answers`` as the schema's types, and the problems found (each naming its question).

    The converted answers are checked against the whole schema (required properties, bounds, enums,
    formats) once every value has its type.
    """
    properties: dict[str, Any] = schema.get("properties") or {}
    problems = [f"unknown question id {name!r}" for name in answers if name not in properties]
    converted: dict[str, Any] = {}
    for name, prop in properties.items():
        if name not in answers or answers[name] is None:
            continue
        value, problem = _convert(prop if isinstance(prop, dict) else {}, answers[name])
        if problem is not None:
            problems.append(f"the answer to {name!r} {problem}")
        else:
            converted[name] = value
    if problems:
        return converted, problems
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    for error in sorted(validator.iter_errors(converted), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(part) for part in error.absolute_path)
        if where:
            problems.append(f"the answer to {where!r}: {error.message}")
        elif error.validator == "required":
            missing = str(error.message).split("'")[1] if "'" in error.message else error.message
            problems.append(f"question {missing!r} is not answered")
        else:
            problems.append(error.message)
    return converted, problems


def _convert(prop: dict[str, Any], value: Any) -> tuple[Any, str | None]:
    """One answer as the property's type, or why it cannot be."""
    kind = prop.get("type")
    if kind == "boolean":
        if isinstance(value, bool):
            return value, None
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE, None
        return None, "must be true or false"
    if kind in ("integer", "number"):
        return _number(kind, value)
    if kind == "array":
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(item, str) for item in items):
            return None, "must be a list of strings"
        return items, None
    if not isinstance(value, str):
        return None, "must be a string"
    return value, None


def _number(kind: str, value: Any) -> tuple[Any, str | None]:
    noun = "an integer" if kind == "integer" else "a number"
    if isinstance(value, bool):
        return None, f"must be {noun}"
    if isinstance(value, str):
        try:
            value = int(value.strip()) if kind == "integer" else float(value.strip())
        except ValueError:
            return None, f"must be {noun}"
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        value = int(value)
    if kind == "integer" and not isinstance(value, int):
        return None, f"must be {noun}"
    if not isinstance(value, int | float):
        return None, f"must be {noun}"
    return value, None
