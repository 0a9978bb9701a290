"""The HTTP API's request and response bodies as attrs classes, and reading a request body into one.

A body is read with a size limit, parsed as strict JSON, checked against the schema generated from its
class (so an error names the field), and only then structured by ``wire``. The client builds its
requests from the same classes.
"""

from __future__ import annotations

import contextlib
import functools
import json
from typing import Any, ClassVar, Literal

import attrs
from starlette.requests import ClientDisconnect, Request

from coordinator import wire
from coordinator.errors import InvalidRequest
from coordinator.records import MAX_TEXT, MAX_TITLE, Decision, PermissionRequest
from coordinator.server.schema import SchemaBuilder, Validator

PromptMode = Literal["queue", "steer", "interrupt"]

MAX_BODY_BYTES = 4 << 20
"""The largest request body accepted (4 MiB: room for a text of ``MAX_TEXT`` characters, escaped);
a larger one is an ``InvalidRequest``."""

DRAIN_BYTES = 8 << 20
"""How much of an oversized body is read and dropped before the error is sent."""


@attrs.frozen(kw_only=True)
class CreateSessionBody:
    """``POST /api/session``: an optional title; an empty body means no title."""

    title: str = attrs.field(default="", metadata={"schema": {"maxLength": MAX_TITLE}})


@attrs.frozen(kw_only=True)
class PromptBody:
    """``POST /api/session/{sid}/prompt``: the text of the prompt (not empty), and how it joins the
    session: ``queue`` (a new turn after any running or queued one), ``steer`` (into the running
    turn at its next step boundary), ``interrupt`` (the running turn stops; this one runs next)."""

    text: str = attrs.field(
        metadata={
            "schema": {
                "minLength": 1,
                "maxLength": MAX_TEXT,
                "description": "the prompt; not empty",
            }
        }
    )
    mode: PromptMode = attrs.field(
        default="queue", metadata={"schema": {"description": "how the prompt joins the session"}}
    )
    expected_turn_id: str | None = attrs.field(
        default=None,
        metadata={"schema": {"description": "accept the prompt only while this turn is the running turn"}},
    )


@attrs.frozen(kw_only=True)
class InterruptBody:
    """``POST /api/session/{sid}/interrupt``: when the running turn stops (``now``, or ``after_step``:
    a soft stop before its next model request), and whether the queued turns are ``cancel``led too."""

    when: Literal["now", "after_step"] = "now"
    queued: Literal["keep", "cancel"] = "keep"


@attrs.frozen(kw_only=True)
class ReplyBody:
    """``POST .../permission/{rid}/reply``: a decision; ``reject`` with a message is feedback, not a
    stop; ``once`` or ``always`` with an ``input`` runs the call with that input instead of the
    model's (it must fit the tool's input schema)."""

    decision: Decision
    message: str | None = attrs.field(default=None, metadata={"schema": {"maxLength": MAX_TEXT}})
    input: dict[str, Any] | None = None


ANSWER_SCHEMA = {
    "anyOf": [
        {"type": "string"},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "array", "items": {"type": "string"}},
    ]
}
"""What one answer may be: text, or a JSON value a server's schema takes."""


@attrs.frozen(kw_only=True)
class FormAnswersBody:
    """``POST /api/session/{sid}/form/{fid}``: an answer for every question, by question id: text, or
    for a form an MCP server asked, the JSON value its schema takes (a number, a boolean, a list)."""

    answers: dict[str, Any] = attrs.field(metadata={"schema": {"additionalProperties": ANSWER_SCHEMA}})


@attrs.frozen(kw_only=True)
class Health:
    """``GET /health``: the server is up."""

    status: Literal["ok"]


@attrs.frozen(kw_only=True)
class PromptAccepted:
    """The prompt's turn: a queued turn, or (a steer) the running turn it waits for, or the queued
    turn it became; ``steer_id`` names a steer."""

    turn_id: str
    steer_id: str | None = None


@attrs.frozen(kw_only=True)
class ResumeAccepted:
    """The suspended turn is resumed: it goes on from where it stopped (``session.execution.resumed``)."""

    turn_id: str


@attrs.frozen(kw_only=True)
class InterruptResult:
    """Whether this interrupt stopped a turn (false when idle or already stopping)."""

    interrupted: bool


@attrs.frozen(kw_only=True)
class ReplyResult:
    """The permission request as the reply settled it."""

    request: PermissionRequest


@attrs.frozen(kw_only=True)
class ErrorDetail:
    """What went wrong: the error's name, a message, and the details its class carries."""

    schema_open: ClassVar[bool] = True

    name: str
    message: str


@attrs.frozen(kw_only=True)
class ErrorBody:
    """Every error response: ``{"error": {"name", "message", ...details}}``."""

    error: ErrorDetail


REQUEST_BODIES: tuple[type[Any], ...] = (
    CreateSessionBody,
    PromptBody,
    InterruptBody,
    ReplyBody,
    FormAnswersBody,
)


@functools.cache
def _validator() -> Validator:
    builder = SchemaBuilder()
    for cls in REQUEST_BODIES:
        builder.ref(cls)
    return Validator(builder.components)


def structure_body(data: Any, cls: type[Any]) -> Any:
    """``data`` (parsed JSON) as an instance of the body class ``cls``.

    **Raises:** ``InvalidRequest`` naming the first field that is missing, unknown or of the wrong type.
    """
    validator = _validator()
    validator.check(data, {"$ref": "#/components/schemas/" + cls.__name__}, "body")
    try:
        return wire.structure(data, cls)
    except Exception as exc:  # the schema check above makes this a mismatch between the two: a bug
        raise InvalidRequest(message=f"body: {exc}") from exc


async def read_body(request: Request, cls: type[Any], *, empty: Any = None) -> Any:
    """Read the request's JSON body into ``cls``; an empty body gives ``empty`` when it is not None.

    **Cancellation:** nothing is kept; the request is abandoned.

    **Raises:** ``InvalidRequest``: a body over ``MAX_BODY_BYTES``, not JSON, or not shaped like ``cls``.
    """
    raw = await _read_limited(request)
    if not raw.strip():
        if empty is not None:
            return empty
        raise InvalidRequest(message="body: expected a JSON object, got an empty body")
    return structure_body(parse_json(raw), cls)


def parse_json(raw: bytes) -> Any:
    """Strict JSON: UTF-8, no ``NaN`` or ``Infinity``, no lone surrogate. **Raises:** ``InvalidRequest``."""
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise InvalidRequest(message=f"body: not UTF-8 (byte {exc.start})") from exc
    except (ValueError, RecursionError) as exc:
        raise InvalidRequest(message=f"body: not valid JSON: {exc}") from exc
    try:
        # A "\ud800" escape decodes to a string that no UTF-8 store or client can hold.
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequest(
            message="body: a string holds a lone surrogate escape, not Unicode text"
        ) from exc
    return value


def _reject_constant(word: str) -> Any:
    raise ValueError(f"{word} is not JSON")


async def _read_limited(request: Request) -> bytes:
    """The body, or ``InvalidRequest`` once it passes ``MAX_BODY_BYTES``.

    An oversized body is still read and dropped up to ``DRAIN_BYTES`` so that the client, still
    sending, receives the error instead of a reset connection; beyond that the server stops reading.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > DRAIN_BYTES:
        raise _too_large()
    chunks: list[bytes] = []
    size = 0
    try:
        async with contextlib.aclosing(request.stream()) as stream:
            async for chunk in stream:
                size += len(chunk)
                if size > DRAIN_BYTES:
                    break
                if size <= MAX_BODY_BYTES:
                    chunks.append(chunk)
    except ClientDisconnect as exc:  # nobody is left to answer; this only keeps it out of the error log
        raise InvalidRequest(message="body: the client disconnected while sending it") from exc
    if size > MAX_BODY_BYTES:
        raise _too_large()
    return b"".join(chunks)


def _too_large() -> InvalidRequest:
    return InvalidRequest(message=f"body: larger than the limit of {MAX_BODY_BYTES} bytes (4 MiB)")
