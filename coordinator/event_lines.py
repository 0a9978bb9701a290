"""Events as lines a person reads: ``coordinator demo`` and ``coordinator events --pretty``.

One line an event: its seq, its type (coloured on a terminal) and the one detail a person wants to
see; the model's text as it streams (a live-only delta) on lines of its own; a sub-agent session's
events indented under its parent's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import attrs

from coordinator.events import Event

_COLOURS = {
    "failed": "31",
    "revoked": "31",
    "interrupted": "33",
    "suspended": "35",
    "resumed": "35",
    "idle": "32",
}


@attrs.define
class Printer:
    """Writes events one a line, coloured on a terminal."""

    out: TextIO
    colour: bool
    last_seq: int = 0
    # Sub-agent sessions seen: their events are printed indented, under their parent's.
    children: set[str] = attrs.Factory(set)

    def title(self, text: str) -> None:
        self.out.write(f"\n{self._paint(text, '1')}\n")

    def note(self, text: str) -> None:
        self.out.write(f"  {self._paint('» ' + text, '2')}\n")

    def event(self, event: Event) -> None:
        if event.seq is None:  # a live-only delta: the model's text as it streams
            piece = json.dumps(event.payload["delta"], ensure_ascii=False)
            self.out.write(
                f"     ~  {self._paint(f'{event.type:<32}', '2')} +{piece} at {event.payload['offset']}\n"
            )
            self.out.flush()
            return
        self.last_seq = event.seq
        if event.type == "session.created" and event.payload["session"].get("parent"):
            self.children.add(str(event.session_id))
        code = next((c for word, c in _COLOURS.items() if event.type.endswith(word)), "36")
        where = "  ↳ " if event.session_id in self.children else "  "
        self.out.write(f"{where}{event.seq:>4}  {self._paint(f'{event.type:<32}', code)} {summary(event)}\n")
        self.out.flush()

    def _paint(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour else text


def summary(event: Event) -> str:
    """The one detail of an event a person wants to see."""
    payload = event.payload
    picks: dict[str, Callable[[], Any]] = {
        "session.created": lambda: json.dumps(payload["session"]["title"]),
        "session.turn.started": lambda: json.dumps(payload["prompt"]),
        "session.turn.steered": lambda: json.dumps(payload["text"]),
        "session.turn.queued": lambda: json.dumps(payload["text"]),
        "session.tool.started": lambda: f"{payload['name']} {json.dumps(payload['input'])}",
        "session.tool.succeeded": lambda: _short(payload["output"]),
        "session.tool.failed": lambda: f"{payload['error']['type']}: {payload['error']['message']}",
        "permission.asked": lambda: (
            f"{payload['request']['action']} {payload['request']['resource']!r}"
            + (" (restored, same id)" if payload.get("restored") else "")
        ),
        "permission.replied": lambda: (
            payload["decision"] + (" with an edited input" if "input" in payload else "")
        ),
        "session.idle": lambda: f"outcome {payload['outcome']}",
        "session.step.succeeded": lambda: (
            _short(payload["message"]["text"]) if payload["message"]["text"] else ""
        ),
        "session.step.failed": lambda: (
            json.dumps(payload["reason"])
            + (f" partial_text {json.dumps(payload['partial_text'])}" if "partial_text" in payload else "")
        ),
        "session.execution.resumed": lambda: f"after {payload['after']}",
    }
    if event.type in picks:
        return str(picks[event.type]())
    if "reason" in payload:
        return json.dumps(payload["reason"])
    return ""


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) < 80 else text[:77] + "..."


def from_wire(data: Mapping[str, Any]) -> Event:
    """An event as the HTTP API sends it (``Event.to_dict()``), back as an ``Event``."""
    envelope = ("seq", "type", "session_id", "at")
    payload = {key: value for key, value in data.items() if key not in envelope}
    return Event(
        seq=data.get("seq"),
        type=str(data.get("type")),
        session_id=data.get("session_id"),
        at=str(data.get("at", "")),
        payload=payload,
    )
