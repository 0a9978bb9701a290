"""The OpenAPI 3.1 document, generated from the route table and the attrs classes it names.

Each ``Operation`` of ``app.OPERATIONS`` is both a Starlette route and an entry of this document; the
schemas come from ``SchemaBuilder`` over the very classes that validate requests (``bodies.py``) and
that responses are rendered from (``coordinator/records.py``), so nothing here is written twice.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
from starlette.requests import Request
from starlette.types import ASGIApp

from coordinator.errors import ClientError, InternalError, InvalidRequest, Unauthorized
from coordinator.server.bodies import EventEnvelope
from coordinator.server.schema import Schema, SchemaBuilder

JSON = "application/json"

Endpoint = Callable[[Request], Awaitable[ASGIApp]]


@attrs.frozen(kw_only=True)
class Parameter:
    """A query or header parameter of an operation."""

    name: str
    where: str  # "query" | "header"
    hint: Any
    description: str


@attrs.frozen(kw_only=True)
class Operation:
    """One route: what Starlette dispatches and what the document says about it."""

    method: str
    path: str
    name: str
    summary: str
    endpoint: Endpoint
    status: int = 200
    body: type[Any] | None = None
    body_optional: bool = False
    response: Any = None
    stream: bool = False
    errors: tuple[type[ClientError], ...] = ()
    parameters: tuple[Parameter, ...] = ()
    open: bool = False
    """Needs no token (``/health``, ``/openapi.json``)."""


def openapi_document(operations: Sequence[Operation]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``operations``, with every schema under ``components``."""
    builder = SchemaBuilder()
    paths: dict[str, dict[str, Any]] = {}
    for operation in operations:
        paths.setdefault(operation.path, {})[operation.method.lower()] = _operation(operation, builder)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "coordinator",
            "version": _version(),
            "description": "Runs agent sessions; every stop carries a typed reason (see the events).",
        },
        "paths": paths,
        "components": {
            "schemas": dict(sorted(builder.components.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _operation(operation: Operation, builder: SchemaBuilder) -> dict[str, Any]:
    doc: dict[str, Any] = {"operationId": operation.name, "summary": operation.summary}
    parameters = [_path_parameter(name) for name in re.findall(r"{(\w+)}", operation.path)]
    parameters += [_parameter(p, builder) for p in operation.parameters]
    if parameters:
        doc["parameters"] = parameters
    if operation.body is not None:
        doc["requestBody"] = {
            "required": not operation.body_optional,
            "content": {JSON: {"schema": builder.of(operation.body)}},
        }
    if not operation.open:
        doc["security"] = [{"bearer": []}]
    doc["responses"] = _responses(operation, builder)
    return doc


def _path_parameter(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _parameter(parameter: Parameter, builder: SchemaBuilder) -> dict[str, Any]:
    return {
        "name": parameter.name,
        "in": parameter.where,
        "required": False,
        "description": parameter.description,
        "schema": builder.of(parameter.hint),
    }


def _responses(operation: Operation, builder: SchemaBuilder) -> dict[str, Any]:
    success: dict[str, Any] = {"description": operation.summary}
    if operation.stream:
        success["description"] += (
            "; text/event-stream, each event `id: SEQ`, `event: TYPE`, `data: JSON` (this schema)"
        )
        success["content"] = {"text/event-stream": {"schema": builder.of(EventEnvelope)}}
    elif operation.response is not None:
        success["content"] = {JSON: {"schema": builder.of(operation.response)}}
    responses: dict[str, Any] = {str(operation.status): success}
    by_status: dict[int, list[type[ClientError]]] = {}
    for error in _errors_of(operation):
        by_status.setdefault(error.status, []).append(error)
    for status, classes in sorted(by_status.items()):
        schemas = [_error_ref(cls, builder) for cls in classes]
        schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
        description = ", ".join(cls.name for cls in classes)
        responses[str(status)] = {"description": description, "content": {JSON: {"schema": schema}}}
    return responses


def _errors_of(operation: Operation) -> list[type[ClientError]]:
    errors = list(operation.errors)
    if operation.body is not None or operation.parameters:
        errors.insert(0, InvalidRequest)
    if not operation.open:
        errors.append(Unauthorized)
    errors.append(InternalError)
    return list(dict.fromkeys(errors))


def _error_ref(cls: type[ClientError], builder: SchemaBuilder) -> Schema:
    """A component for ``{"error": {name, message, **details}}`` of one error class."""
    if cls.__name__ not in builder.components:
        builder.components[cls.__name__] = {
            "type": "object",
            "properties": {"error": builder.object_of(cls, tag_key="name")},
            "required": ["error"],
            "additionalProperties": False,
        }
    return {"$ref": f"#/components/schemas/{cls.__name__}"}


def _version() -> str:
    try:
        return importlib.metadata.version("coordinator")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"
