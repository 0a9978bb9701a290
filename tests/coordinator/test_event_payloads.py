"""The payload classes are the one declaration of each event's JSON: the builders' output, key for key
and byte for byte, and the generated wire functions agree with the classes they are generated from."""

from __future__ import annotations

import json
from typing import Any

import attrs

from coordinator import event_payloads, events, wire
from coordinator.reasons import Interrupt, Shutdown
from coordinator.records import NestedCall, Partial, PermissionRequest, StepMessage, ToolError, Usage


def _json(draft: events.Draft) -> str:
    """What the store saves of a draft's payload."""
    return json.dumps(draft.payload, separators=(",", ":"))


REQUEST = PermissionRequest(
    id="per_1",
    session_id="s",
    call_id="c",
    action="shell",
    resource="ls",
    status="replied",
    decision="once",
    created_at="t",
)


def test_optional_keys_are_absent_and_required_ones_present_even_when_null() -> None:
    """Clients tell ``usage?``, ``partial?``, ``parent_call_id?`` and ``restored`` by their presence."""
    message = StepMessage(text="hi", tool_calls=[])
    assert _json(events.step_succeeded("s", "t", "p", message, None)) == (
        '{"turn_id":"t","step_id":"p","message":{"text":"hi","tool_calls":[]}}'
    )
    usage = Usage(input_tokens=3, output_tokens=1)
    assert _json(events.step_succeeded("s", "t", "p", message, usage)).endswith(
        ',"usage":{"input_tokens":3,"output_tokens":1}}'
    )
    for partial_text in (None, ""):
        assert "partial_text" not in events.step_failed("s", "t", "p", Shutdown(), partial_text).payload
    assert _json(events.tool_started("s", "t", "c", "shell", None, None)) == (
        '{"turn_id":"t","call_id":"c","name":"shell","input":null}'
    )
    assert events.tool_started("s", "t", "c", "shell", {}, "x").payload["parent_call_id"] == "x"
    error = ToolError(type="interrupted", message="stopped")
    assert "partial" not in events.tool_failed("s", "c", error, None).payload
    assert events.tool_failed("s", "c", error, Partial()).payload["partial"] == {}
    assert "restored" not in events.permission_asked(REQUEST, restored=False).payload
    assert events.permission_asked(REQUEST, restored=True).payload["restored"] is True
    assert _json(events.tool_progress_detail("s", "c", None)) == '{"call_id":"c","detail":null}'


def test_payload_keys_keep_their_order_and_nested_progress_leaves_out_the_input() -> None:
    """Stored JSON and tests compare key order; a nested call's input was shown when it started."""
    assert _json(events.permission_replied(REQUEST)) == (
        '{"request_id":"per_1","session_id":"s","decision":"once"}'
    )
    nested = NestedCall(call_id="n", name="shell", input={"command": "ls"}, status="succeeded", output=0)
    assert _json(events.tool_progress_nested("s", "c", nested)) == (
        '{"call_id":"c","nested":{"call_id":"n","name":"shell","status":"succeeded","output":0}}'
    )
    terminal = events.execution_terminal("s", "t", Interrupt("api"))
    assert (terminal.type, _json(terminal)) == (
        "session.execution.interrupted",
        '{"turn_id":"t","reason":{"type":"interrupt","by":"api"}}',
    )


@attrs.frozen(kw_only=True)
class _Sample:
    first: str | None = None
    reason: Interrupt
    data: Any
    last: int = 0


def test_a_wire_builder_writes_what_the_class_declares() -> None:
    """The builders never build the instance, so their function must say what the instance would."""
    build = event_payloads.wire_builder(_Sample)
    data = {"kept": ["as", "is"]}
    built = build(first="a", reason=Interrupt("api"), data=data, last=2)
    assert list(built) == ["first", "reason", "data", "last"]
    assert built["reason"] == wire.unstructure(Interrupt("api"))
    assert built["data"] is data
    assert build(reason=Interrupt("api"), data=None) == {
        "reason": {"type": "interrupt", "by": "api"},
        "data": None,
    }


def test_every_event_type_has_its_payload_class() -> None:
    """The document lists events by these classes: a type without one would be undocumented."""
    types = {cls.type for cls in event_payloads.EVENT_PAYLOADS}
    assert types == {
        "session.created",
        "session.turn.started",
        "session.turn.queued",
        "session.turn.steered",
        "session.turn.cancelled",
        "session.step.started",
        "session.step.succeeded",
        "session.step.failed",
        "session.text.delta",
        "session.tool.started",
        "session.tool.progress",
        "session.tool.succeeded",
        "session.tool.failed",
        "permission.asked",
        "permission.replied",
        "permission.revoked",
        "form.asked",
        "form.submitted",
        "form.cancelled",
        "form.revoked",
        "session.execution.succeeded",
        "session.execution.interrupted",
        "session.execution.failed",
        "session.execution.suspended",
        "session.execution.resumed",
        "session.idle",
    }
    assert [cls for cls in event_payloads.EVENT_PAYLOADS if not cls.stored] == [event_payloads.TextDelta]
