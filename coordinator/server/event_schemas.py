"""The OpenAPI schemas of the event stream, assembled from the payload classes of
``coordinator/event_payloads.py``: the very classes the builders make each event's JSON from, so the
document describes exactly what a stream carries. A test validates the events of real turns against it.
"""

from __future__ import annotations

from typing import Any

import attrs

from coordinator.event_payloads import EVENT_PAYLOADS, EventPayload, StreamTruncated
from coordinator.server.schema import REF_PREFIX, Schema, SchemaBuilder


@attrs.frozen(kw_only=True)
class _Envelope:
    """The keys of every stored event before its payload's."""

    seq: int
    session_id: str | None
    at: str


@attrs.frozen(kw_only=True)
class _LiveEnvelope:
    """The keys of a live-only event (never stored, so no seq) before its payload's."""

    seq: None
    session_id: str
    at: str


def event_schema(builder: SchemaBuilder) -> Schema:
    """A ``$ref`` to ``Event``: one schema a type, in a ``oneOf`` discriminated by ``type``."""
    if "Event" not in builder.components:
        by_type: dict[str, list[type[EventPayload]]] = {}
        for cls in EVENT_PAYLOADS:
            by_type.setdefault(cls.type, []).append(cls)
        refs = {tag: _type_ref(builder, classes) for tag, classes in by_type.items()}
        builder.components["Event"] = {
            "description": "One event of the stream, by its type.",
            "oneOf": list(refs.values()),
            "discriminator": {
                "propertyName": "type",
                "mapping": {tag: ref["$ref"] for tag, ref in refs.items()},
            },
        }
    return {"$ref": REF_PREFIX + "Event"}


def _type_ref(builder: SchemaBuilder, classes: list[type[EventPayload]]) -> Schema:
    """A ``$ref`` to the schema of one event type: its payload class's, or, for a type with several
    (``session.tool.progress``), a ``oneOf`` named after the base class they share."""
    if len(classes) == 1:
        return _event_ref(builder, classes[0])
    (base,) = {cls.__mro__[1] for cls in classes}
    if base.__name__ not in builder.components:
        builder.components[base.__name__] = {
            "description": _description(base),
            "oneOf": [_event_ref(builder, cls) for cls in classes],
        }
    return {"$ref": REF_PREFIX + base.__name__}


def _event_ref(builder: SchemaBuilder, cls: type[EventPayload]) -> Schema:
    """A ``$ref`` to the whole JSON object of an event whose payload class is ``cls``: ``type``, the
    envelope, then the payload's own keys (a payload key that repeats an envelope key narrows it)."""
    if cls.__name__ not in builder.components:
        envelope = builder.object_of(_Envelope if cls.stored else _LiveEnvelope)
        payload = builder.object_of(cls)
        properties = {"type": payload["properties"]["type"]}
        properties |= envelope["properties"]
        properties |= payload["properties"]
        required = ["type", *envelope["required"], *payload.get("required", [])]
        builder.components[cls.__name__] = {
            "type": "object",
            "properties": properties,
            "additionalProperties": False,
            "required": list(dict.fromkeys(required)),
            "description": _description(cls),
        }
    return {"$ref": REF_PREFIX + cls.__name__}


def _description(cls: type[Any]) -> str:
    return (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


def sse_frame_schema(builder: SchemaBuilder) -> Schema:
    """One frame of ``text/event-stream``: ``id`` (the seq), ``event`` (the type), ``data`` (JSON)."""
    data = {"anyOf": [event_schema(builder), builder.ref(StreamTruncated)]}
    return {
        "type": "object",
        "description": (
            "A server-sent event: `id: SEQ`, `event: TYPE`, `data: JSON`, a blank line. "
            "`session.text.delta` and `stream.truncated` frames have no id; "
            "comment lines (`: keep-alive`) keep an idle stream open."
        ),
        "properties": {
            "id": {"type": "string", "pattern": "^[0-9]+$", "description": "the event's seq"},
            "event": {"type": "string", "description": "the event's type, or `stream.truncated`"},
            "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": data},
        },
        "required": ["event", "data"],
    }
