"""``coordinator.testing.run_chaos``: a user's scenario under injected faults, from a trio test.

The plugins are ``tests/coordinator/chaos/user_tools.py`` (``leaky`` leaves its helper behind when its
call is stopped, ``tidy`` does not); the scenario prompts, replies and interrupts, as a user's would.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import trio

from coordinator import Coordinator
from coordinator.chaos.campaign import execute_run, scratch_root
from coordinator.chaos.setup import Setup
from coordinator.testing import ChaosFailure, run_chaos
from tests.coordinator.chaos.test_user_campaign import LEAK, _helpers, write_files

RUNS = 4


async def scenario(coord: Coordinator) -> None:
    """Prompt, allow the tool once, and press stop while it works."""
    session = await coord.create_session(title="chaos")
    await coord.prompt(session.id, "crunch, please")
    async for event in coord.subscribe(session_id=session.id):
        if event.type == "permission.asked":
            await coord.reply_permission(session.id, event.payload["request"]["id"], "once")
        elif event.type == "session.tool.progress":
            await coord.interrupt(session.id)
        elif event.type == "session.idle":
            return


async def test_a_well_behaved_plugin_holds_every_invariant_under_chaos(tmp_path: Path) -> None:
    """Interrupted by the scenario and by faults, the tidy tool leaves nothing: run_chaos returns."""
    config, script = write_files(tmp_path, "tidy")
    await run_chaos(scenario, config=config, script=script, runs=RUNS, seed=3)
    assert _helpers() == []


async def test_a_leaky_plugin_fails_with_the_leak_named_and_its_replay_fails_alike(tmp_path: Path) -> None:
    """ChaosFailure carries the run, its schedule, the violations, and a replay call that reproduces it."""
    config, script = write_files(tmp_path, "leaky")
    with pytest.raises(ChaosFailure) as caught:
        await run_chaos(scenario, config=config, script=script, runs=RUNS, seed=3)
    failure = caught.value
    assert failure.seed == 3 and failure.run in range(RUNS)
    assert f"invariant 6: tool leaky {LEAK}" in failure.violations
    assert failure.replay.startswith(
        f"await run_chaos(scenario, config='{config}', script='{script}', seed=3"
    )
    only = int(re.search(r"only=(\d+)", failure.replay)[1])  # type: ignore[index]
    schedule = re.search(r"schedule='([^']*)'", failure.replay)[1]  # type: ignore[index]
    with pytest.raises(ChaosFailure) as again:
        await run_chaos(scenario, config=config, script=script, seed=3, only=only, schedule=schedule)
    assert again.value.run == only and f"invariant 6: tool leaky {LEAK}" in again.value.violations
    assert _helpers() == []


async def allow(coord: Coordinator) -> None:
    """Prompt, and allow the tool once."""
    session = await coord.create_session(title="allow")
    await coord.prompt(session.id, "crunch, please")
    async for event in coord.subscribe(session_id=session.id):
        if event.type == "permission.asked":
            await coord.reply_permission(session.id, event.payload["request"]["id"], "once")
        elif event.type == "session.idle":
            return


async def test_a_declared_checkpoint_is_hit_by_the_faults_of_run_chaos(tmp_path: Path) -> None:
    """A schedule naming the plugin's ``checkpoint("helper-started")`` stops the tool right there."""
    config, script = write_files(tmp_path, "leaky")
    point = "plugin.leaky.helper-started"
    setup = Setup.load(config, script, scenario=allow)
    with scratch_root() as scratch:  # where a quiet run passes the checkpoint: its occurrence
        quiet = await trio.to_thread.run_sync(
            lambda: execute_run(0, 0, root=Path(scratch), schedule=(), setup=setup)
        )
    assert quiet.record.violations == []
    occurrence = quiet.record.checkpoints.index(point) + 1
    with pytest.raises(ChaosFailure) as caught:
        await run_chaos(
            allow, config=config, script=script, only=0, schedule=f"{occurrence}:{point}:shutdown"
        )
    assert caught.value.schedule == f"{occurrence}:{point}:shutdown"
    assert f"invariant 6: tool leaky {LEAK}" in caught.value.violations
    await run_chaos(allow, config=config, script=script, only=0, schedule="-")  # no fault: no leak


async def test_a_scenario_that_raises_fails_the_run(tmp_path: Path) -> None:
    """The user's own assertion in the scenario is a failure of the run, reported as the scenario's."""
    config, script = write_files(tmp_path, "tidy")

    async def asserting(coord: Coordinator) -> Any:
        await coord.create_session(title="x")
        raise AssertionError("my flow broke")

    with pytest.raises(ChaosFailure) as caught:
        await run_chaos(asserting, config=config, script=script, runs=1, seed=0)
    assert "scenario: the scenario raised AssertionError: my flow broke" in caught.value.violations
