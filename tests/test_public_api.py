"""The public surface is pinned: what embedders import must not move."""

from __future__ import annotations

import coordinator
from coordinator import errors, events, reasons


def test_the_package_exports_exactly_the_embedding_api() -> None:
    """Renaming or dropping any of these breaks every embedder."""
    assert sorted(coordinator.__all__) == ["Coordinator", "Session", "open_coordinator"]


def test_the_reason_table_is_the_contracts() -> None:
    """Wire words, outcomes and resumability are final (contract sections 5 and 6)."""
    table = {cls.type: (cls.outcome, cls.resumable, cls.terminal_event) for cls in reasons.REASON_CLASSES}
    assert table == {
        "interrupt": ("interrupted", False, "session.execution.interrupted"),
        "declined": ("declined", False, "session.execution.interrupted"),
        "timeout": ("timed_out", False, "session.execution.interrupted"),
        "error": ("failed", False, "session.execution.failed"),
        "shutdown": (None, True, "session.execution.suspended"),
    }


def test_client_errors_carry_the_contracts_names() -> None:
    names = {
        cls.name: cls.status
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.ClientError) and cls is not errors.ClientError
    }
    assert names["PermissionNotFound"] == 404 and names["PermissionAlreadySettled"] == 409
    assert names["FormNotFound"] == 404 and names["FormAlreadySettled"] == 409
    assert names["SessionNotFound"] == 404 and names["InvalidRequest"] == 400


def test_an_event_is_exactly_its_contract_json() -> None:
    event = events.Event(
        seq=7, type="session.idle", session_id="s", at="t", payload={"turn_id": "u", "outcome": "succeeded"}
    )
    assert event.to_dict() == {
        "seq": 7,
        "type": "session.idle",
        "session_id": "s",
        "at": "t",
        "turn_id": "u",
        "outcome": "succeeded",
    }
