"""JSON Schema (the 2020-12 dialect of OpenAPI 3.1) generated from attrs classes, and a validator for it.

The same schemas document the API (``openapi.py``) and check request bodies before ``wire`` structures
them, so the document cannot drift from what the server accepts. The validator covers exactly the
keywords the builder emits.
"""

from __future__ import annotations

import collections.abc
import enum
import re
import types
import typing
from pathlib import Path
from typing import Any, ClassVar, Literal

import attrs

from coordinator.errors import InvalidRequest

Schema = dict[str, Any]

REF_PREFIX = "#/components/schemas/"

_SEQUENCES = (list, tuple, set, frozenset, collections.abc.Sequence, collections.abc.Set)
_MAPPINGS = (dict, collections.abc.Mapping)
_SCALARS: dict[Any, Schema] = {
    str: {"type": "string"},
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
    Path: {"type": "string"},
    type(None): {"type": "null"},
}


class SchemaBuilder:
    """Turns type hints into schemas; attrs classes become named components referenced by ``$ref``."""

    def __init__(self) -> None:
        self.components: dict[str, Schema] = {}

    def of(self, hint: Any) -> Schema:
        """The schema of a type hint: scalars, literals, enums, unions, sequences, mappings, attrs classes."""
        if hint is Any:
            return {}
        if hint is None or hint in _SCALARS:
            return dict(_SCALARS[type(None) if hint is None else hint])
        if attrs.has(hint):
            return self.ref(hint)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return _enum(tuple(member.value for member in hint))  # a stored status: its words
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin is Literal:
            return _enum(args)
        if origin in (typing.Union, types.UnionType):
            return {"anyOf": [self.of(arg) for arg in args]}
        if origin in _SEQUENCES:
            items = args[0] if args and (len(args) == 1 or args[1] is Ellipsis) else Any
            return {"type": "array", "items": self.of(items)}
        if origin in _MAPPINGS:
            values = args[1] if len(args) == 2 else Any
            return {"type": "object", "additionalProperties": self.of(values)}
        raise TypeError(f"no JSON schema for {hint!r}")

    def ref(self, cls: type[Any]) -> Schema:
        """A ``$ref`` to the component of the attrs class ``cls``, generated on first use."""
        name = cls.__name__
        if name not in self.components:
            self.components[name] = {}  # reserved first, so a recursive class terminates
            self.components[name] = self.object_of(cls)
        return {"$ref": REF_PREFIX + name}

    def object_of(self, cls: type[Any], *, tag_key: str = "type") -> Schema:
        """The object schema of an attrs class; fields with a default are optional, as ``wire`` omits them.

        A class whose ``tag_key`` is a string class variable (stop reasons and message parts carry
        ``type``, client errors carry ``name``) gets that key as a required constant, as on the wire.
        A class with ``schema_open = True`` allows keys beyond its fields.
        """
        hints = typing.get_type_hints(cls)
        fields = attrs.fields_dict(cls)
        properties: Schema = {}
        required: list[str] = []
        tag = getattr(cls, tag_key, None)
        if tag_key not in fields and isinstance(tag, str):
            properties[tag_key] = {"const": tag}
            required.append(tag_key)
        for name, field in fields.items():
            # A field's own constraints (``maxLength``...) are enforced by ``Validator`` and documented.
            properties[name] = {**self.of(hints[name]), **field.metadata.get("schema", {})}
            if field.default is attrs.NOTHING:
                required.append(name)
        schema: Schema = {
            "type": "object",
            "properties": properties,
            "additionalProperties": bool(getattr(cls, "schema_open", False)),
        }
        if required:
            schema["required"] = required
        if cls.__doc__:
            schema["description"] = cls.__doc__.strip().split("\n\n")[0].replace("\n", " ")
        return schema


def _enum(words: tuple[Any, ...]) -> Schema:
    schema: Schema = {"enum": list(words)}
    if all(isinstance(word, str) for word in words):
        schema["type"] = "string"
    return schema


@attrs.frozen
class Validator:
    """Checks a parsed JSON value against a schema; the first problem becomes an ``InvalidRequest``."""

    components: dict[str, Schema]

    _TYPES: ClassVar[dict[str, str]] = {
        "string": "a string",
        "boolean": "a boolean",
        "integer": "an integer",
        "number": "a number",
        "null": "null",
        "object": "an object",
        "array": "an array",
    }

    def check(self, value: Any, schema: Schema, path: str) -> None:
        """Raise ``InvalidRequest`` naming ``path`` (``body.answers.q1``) if ``value`` does not fit."""
        problem = self.problem(value, schema, path)
        if problem is not None:
            raise InvalidRequest(message=problem)

    def problem(self, value: Any, schema: Schema, path: str) -> str | None:
        """The first mismatch as ``"PATH: what is wrong"``, or None when ``value`` fits."""
        if "$ref" in schema:
            return self.problem(value, self.components[schema["$ref"].removeprefix(REF_PREFIX)], path)
        if "anyOf" in schema:
            problem = self._any_of(value, schema["anyOf"], path)
            return problem if problem is not None else self._bounds(value, schema, path)
        if "const" in schema and value != schema["const"]:
            return f"{path}: expected {_show(schema['const'])}, got {_show(value)}"
        if "enum" in schema and (not _is_word(value) or value not in schema["enum"]):
            words = ", ".join(str(word) for word in schema["enum"])
            return f"{path}: expected one of {words}, got {_show(value)}"
        kind = schema.get("type")
        if kind is not None and not _has_type(value, kind):
            return f"{path}: expected {self._TYPES[kind]}, got {_show(value)}"
        bounded = self._bounds(value, schema, path)
        if bounded is not None:
            return bounded
        if kind == "object":
            return self._object(value, schema, path)
        if kind == "array":
            items = schema.get("items", {})
            found = (self.problem(item, items, f"{path}[{i}]") for i, item in enumerate(value))
            return next((p for p in found if p is not None), None)
        return None

    def _bounds(self, value: Any, schema: Schema, path: str) -> str | None:
        """Lengths and patterns of strings, minima and maxima of numbers."""
        if isinstance(value, str):
            if len(value) < schema.get("minLength", 0):
                return f"{path}: shorter than {schema['minLength']} characters"
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                return f"{path}: longer than {schema['maxLength']} characters"
            if "pattern" in schema and re.search(schema["pattern"], value) is None:
                return f"{path}: {schema.get('description', 'does not match ' + schema['pattern'])}"
        elif _has_type(value, "number"):
            if "minimum" in schema and value < schema["minimum"]:
                return f"{path}: expected {schema['minimum']} or more, got {_show(value)}"
            if "maximum" in schema and value > schema["maximum"]:
                return f"{path}: expected {schema['maximum']} or less, got {_show(value)}"
        return None

    def _object(self, value: dict[str, Any], schema: Schema, path: str) -> str | None:
        properties: Schema = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                return f"{path}.{name}: missing required field"
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                problem = self.problem(item, properties[key], f"{path}.{key}")
            elif extra is False:
                expected = ", ".join(properties) or "no fields"
                problem = f"{path}.{key}: unknown field (expected {expected})"
            else:
                problem = self.problem(item, {} if extra is True else extra, f"{path}.{key}")
            if problem is not None:
                return problem
        return None

    def _any_of(self, value: Any, options: list[Schema], path: str) -> str | None:
        problems = [self.problem(value, option, path) for option in options]
        if any(problem is None for problem in problems):
            return None
        # `X | None` is the common union: its non-null branch says what was expected.
        real = [p for option, p in zip(options, problems, strict=True) if option != {"type": "null"}]
        if len(real) == 1:
            return f"{real[0]} (or null)"
        return f"{path}: {_show(value)} matches none of the {len(options)} allowed forms"


def _is_word(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _has_type(value: Any, kind: str) -> bool:
    # bool is an int in Python, but `true` is never a number in JSON.
    is_int = isinstance(value, int) and not isinstance(value, bool)
    is_number = is_int or isinstance(value, float)
    return {
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "integer": is_int or (isinstance(value, float) and value.is_integer()),
        "number": is_number,
        "null": value is None,
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
    }[kind]


def _show(value: Any) -> str:
    """A short description of a JSON value for an error message."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
