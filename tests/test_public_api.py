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


def test_the_testing_module_exports_exactly_its_names() -> None:
    """What a user's tests and plugins import from ``coordinator.testing``, and nothing more."""
    import attrs

    from coordinator import testing

    assert sorted(testing.__all__) == ["ChaosFailure", "checkpoint", "open_test_coordinator", "run_chaos"]
    fields = [f.name for f in attrs.fields(testing.ChaosFailure)]
    assert fields == ["seed", "run", "schedule", "replay", "violations"]
    assert issubclass(testing.ChaosFailure, AssertionError)
    # The pytest plugin's fixtures and option hook live on the module (``pytest -p coordinator.testing``).
    for name in ("pytest_addoption", "test_coordinator", "chaos_runs", "chaos_seed"):
        assert hasattr(testing, name), name


def test_the_chaos_command_takes_the_users_files() -> None:
    """``coordinator chaos --config FILE [--script FILE] [--runs N] [--seed S] [--jobs J]``: a user's
    chaos campaign over their own files."""
    from coordinator.cli import build_parser

    args = build_parser().parse_args(
        ["chaos", "--config", "c.toml", "--script", "s.json", "--runs", "3", "--seed", "4", "--jobs", "2"]
    )
    assert (args.config, args.script, args.runs, args.seed, args.jobs) == ("c.toml", "s.json", 3, 4, 2)
    replay = build_parser().parse_args(["chaos", "--only", "5", "--schedule", "3:tool.start:crash"])
    assert (replay.only, replay.schedule) == (5, "3:tool.start:crash")


async def test_a_declared_checkpoint_does_nothing_without_a_campaign() -> None:
    """``checkpoint(name)`` is free in production: not even a trio checkpoint (no Cancelled from it)."""
    import trio

    from coordinator.testing import checkpoint

    with trio.CancelScope() as scope:
        scope.cancel()
        await checkpoint("anything at all")
    assert not scope.cancelled_caught
