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

from coordinator.errors import (
    ClientError,
    ForbiddenOrigin,
    InternalError,
    InvalidRequest,
    MisdirectedRequest,
    RouteNotFound,
    Unauthorized,
    UnsupportedMediaType,
)
from coordinator.server.event_schemas import sse_frame_schema
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
    constraints: dict[str, Any] = attrs.Factory(dict)
    """Schema keywords the server enforces on the value (``minimum``, ``maxLength``...)."""


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
    media_type: str = JSON
    """The success's media type: JSON, or ``text/plain`` for ``/metrics``."""
    stream: bool = False
    errors: tuple[type[ClientError], ...] = ()
    parameters: tuple[Parameter, ...] = ()
    open: bool = False
    """Needs no token (``/health``, ``/openapi.json``)."""
    headers: dict[str, str] = attrs.Factory(dict)
    """Response headers of a success beyond the usual ones, with what each says (``Link``)."""


def openapi_document(operations: Sequence[Operation], *, secured: bool) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``operations``, with every schema under ``components``.

    ``secured``: a token is configured, so the ``/api`` routes require the bearer scheme. The
    ``servers`` entry is the caller's to add (the URL a client reached, known per request).
    """
    builder = SchemaBuilder()
    paths: dict[str, dict[str, Any]] = {}
    for operation in operations:
        paths.setdefault(operation.path, {})[operation.method.lower()] = _operation(
            operation, builder, secured
        )
    components: dict[str, Any] = {"schemas": dict(sorted(builder.components.items()))}
    if secured:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "coordinator",
            "version": _version(),
            "description": "Runs agent sessions; every stop carries a typed reason (see the events).",
        },
        "paths": paths,
        "components": components,
    }


def _operation(operation: Operation, builder: SchemaBuilder, secured: bool) -> dict[str, Any]:
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
    if secured and not operation.open:
        doc["security"] = [{"bearer": []}]
    doc["responses"] = _responses(operation, builder, secured)
    return doc


def _path_parameter(name: str) -> dict[str, Any]:
    # An id holds no "/" once decoded (the path would name another route) and is not empty.
    schema = {"type": "string", "minLength": 1, "pattern": "^[^/]+$"}
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _parameter(parameter: Parameter, builder: SchemaBuilder) -> dict[str, Any]:
    return {
        "name": parameter.name,
        "in": parameter.where,
        "required": False,
        "description": parameter.description,
        "schema": {**builder.of(parameter.hint), **parameter.constraints},
    }


def _responses(operation: Operation, builder: SchemaBuilder, secured: bool) -> dict[str, Any]:
    success: dict[str, Any] = {"description": operation.summary}
    if operation.stream:
        success["description"] += "; text/event-stream, a frame an event (the schema of one frame)"
        success["content"] = {"text/event-stream": {"schema": sse_frame_schema(builder)}}
    elif operation.response is not None:
        success["content"] = {operation.media_type: {"schema": builder.of(operation.response)}}
    if operation.headers:
        success["headers"] = {
            name: {"description": words, "schema": {"type": "string"}}
            for name, words in operation.headers.items()
        }
    responses: dict[str, Any] = {str(operation.status): success}
    by_status: dict[int, list[type[ClientError]]] = {}
    for error in _errors_of(operation, secured):
        by_status.setdefault(error.status, []).append(error)
    for status, classes in sorted(by_status.items()):
        schemas = [_error_ref(cls, builder) for cls in classes]
        schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
        description = ", ".join(cls.name for cls in classes)
        responses[str(status)] = {"description": description, "content": {JSON: {"schema": schema}}}
    return responses


def _errors_of(operation: Operation, secured: bool) -> list[type[ClientError]]:
    """The operation's own errors, and those of the edge every request passes (``edge.py``)."""
    errors = list(operation.errors)
    if operation.body is not None or operation.parameters:
        errors.insert(0, InvalidRequest)
    if "{" in operation.path:
        errors.append(RouteNotFound)  # an id that decodes to "" or holds "/" names no route
    if secured and not operation.open:
        errors.append(Unauthorized)
    errors += [ForbiddenOrigin, MisdirectedRequest]
    if operation.method != "GET":
        errors.append(UnsupportedMediaType)
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
