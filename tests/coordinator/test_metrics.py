"""The metrics of the embedding API: a registry per coordinator, shutdown and resumption counted."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from coordinator import Coordinator, open_coordinator
from coordinator.config import Config
from tests.conftest import ASK_SHELL, make_config, running

SHELL_CALL = {"tool_calls": [{"id": "call_shell", "name": "shell", "input": {"command": "echo hi"}}]}


def _samples(text: str) -> dict[str, dict[str, float]]:
    """Sample name -> the sample's labels as ``k=v,...`` (empty without labels) -> value."""
    samples: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def _scraped(coord: Coordinator) -> dict[str, dict[str, float]]:
    return _samples(coord.metrics_text())


async def test_two_coordinators_in_one_process_count_apart(tmp_path: Path) -> None:
    """Tests and embedders run several coordinators in one process: one's turns are not the other's."""
    first, second = make_config(tmp_path / "one"), make_config(tmp_path / "two")
    async with (
        running(first, [{"text": "hi"}]) as (busy, recorder),
        running(second, [{"text": "never"}]) as (idle, _),
    ):
        session = await busy.create_session("busy")
        await busy.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        assert _scraped(busy)["coordinator_turns_total"]["outcome=succeeded"] == 1
        assert _scraped(idle)["coordinator_turns_total"]["outcome=succeeded"] == 0
        assert _scraped(idle)["coordinator_store_commit_seconds_count"][""] > 0  # its own start
        # An embedder serving its own page registers the coordinator's registry in its own, which
        # (as the global one does) describes its collectors and has the process's series already.
        own = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=own)
        own.register(busy.metrics_registry)
        embedded = _samples(generate_latest(own).decode())
        assert embedded["coordinator_turns_total"] == _scraped(busy)["coordinator_turns_total"]
        assert "process_resident_memory_bytes" in _scraped(busy)


async def test_a_shutdown_counts_suspended_and_the_restart_counts_the_resumed_turn(
    tmp_path: Path, config: Config
) -> None:
    """A suspended turn is a stop of its own (reason shutdown) and settles again after the restart,
    counted by the coordinator that settles it; its restored wait is live again there."""
    async with running(config, [SHELL_CALL, {"text": "done"}]) as (coord, recorder):
        session = await coord.create_session("suspended")
        await coord.prompt(session.id, "go")
        await recorder.wait_for("permission.asked")
        assert _scraped(coord)["coordinator_pending_waits"] == {"kind=permission": 1, "kind=question": 0}
        await coord.shutdown()
        stopped = _scraped(coord)
    assert stopped["coordinator_turns_total"]["outcome=suspended"] == 1
    assert stopped["coordinator_stops_total"]["reason=shutdown"] == 1
    assert stopped["coordinator_stop_seconds_count"][""] == 1
    assert stopped["coordinator_pending_waits"] == {"kind=permission": 0, "kind=question": 0}
    assert stopped["coordinator_turns_running"][""] == 0
    async with running(config, [SHELL_CALL, {"text": "done"}]) as (coord, recorder):
        asked = await recorder.wait_for("permission.asked", count=2)  # the first one, replayed; then restored
        assert asked.payload["restored"] is True
        resumed = _scraped(coord)
        assert resumed["coordinator_pending_waits"] == {"kind=permission": 1, "kind=question": 0}
        assert resumed["coordinator_turns_running"][""] == 1
        await coord.reply_permission(session.id, asked.payload["request"]["id"], "once")
        await recorder.wait_for("session.idle")
        settled = _scraped(coord)
    assert settled["coordinator_turns_total"] == {
        "outcome=succeeded": 1,
        "outcome=interrupted": 0,
        "outcome=declined": 0,
        "outcome=timed_out": 0,
        "outcome=failed": 0,
        "outcome=suspended": 0,
    }
    assert settled["coordinator_stop_seconds_count"][""] == 0


async def test_event_subscribers_count_each_subscription_until_it_closes_or_ends(tmp_path: Path) -> None:
    """A subscription counts from ``subscribe()`` (replaying or live) until ``aclose()`` or its end."""
    async with open_coordinator(make_config(tmp_path, rules=ASK_SHELL), synchronous="normal") as coord:
        assert _scraped(coord)["coordinator_event_subscribers"][""] == 0
        closed, ending = coord.subscribe(), coord.subscribe()
        assert _scraped(coord)["coordinator_event_subscribers"][""] == 2
        await closed.aclose()
        assert _scraped(coord)["coordinator_event_subscribers"][""] == 1
        await coord.shutdown()  # the bus closes: a subscription ends once it has read what is stored
        assert [event async for event in ending] == []
        assert _scraped(coord)["coordinator_event_subscribers"][""] == 0


async def test_commits_and_syncs_are_timed_with_full_durability(tmp_path: Path) -> None:
    """Every commit is timed, and with ``synchronous=full`` every group fsync of the WAL too."""
    async with open_coordinator(make_config(tmp_path), synchronous="full") as coord:
        for title in ("one", "two", "three"):
            await coord.create_session(title)
        scraped = _scraped(coord)
    commits = scraped["coordinator_store_commit_seconds_count"][""]
    assert commits >= 4  # the start's instance row, then a session each
    assert scraped["coordinator_store_commit_seconds_bucket"]["le=+Inf"] == commits
    assert 1 <= scraped["coordinator_store_sync_seconds_count"][""] <= commits


async def test_tokens_and_tool_calls_are_counted_by_direction_tool_and_outcome(tmp_path: Path) -> None:
    """The scripted model reports its usage: every reply's tokens are counted, and each settled call
    by its tool and outcome (a declined call by its error's type)."""
    config = make_config(tmp_path, rules=ASK_SHELL)
    script = [SHELL_CALL, {"text": "done"}, SHELL_CALL, {"text": "done"}]
    async with running(config, script) as (coord, recorder):
        session = await coord.create_session("counted")
        await coord.prompt(session.id, "go")
        asked = await recorder.wait_for("permission.asked")
        await coord.reply_permission(session.id, asked.payload["request"]["id"], "once")
        await recorder.wait_for("session.idle")
        await coord.prompt(session.id, "again")
        asked = await recorder.wait_for("permission.asked", 2)
        await coord.reply_permission(session.id, asked.payload["request"]["id"], "reject", "not now")
        await recorder.wait_for("session.idle", 2)
        usage = [e.payload["usage"] for e in recorder.of("session.step.succeeded") if "usage" in e.payload]
        scraped = _scraped(coord)
        tokens = scraped["coordinator_model_tokens_total"]
        assert tokens["direction=input"] == sum(u["input_tokens"] for u in usage) > 0
        assert tokens["direction=output"] == sum(u["output_tokens"] for u in usage) > 0
        calls = scraped["coordinator_tool_calls_total"]
        assert calls == {"outcome=succeeded,tool=shell": 1, "outcome=declined,tool=shell": 1}
