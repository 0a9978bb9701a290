"""``coordinator.testing.open_test_coordinator``, and the pytest plugin (``pytest -p coordinator.testing``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from coordinator.testing import open_test_coordinator
from tests.conftest import Recorder
from tests.coordinator.chaos.test_user_campaign import write_files
from tests.coordinator.test_cli import cli_env


async def test_a_test_coordinator_runs_the_users_plugin_as_its_script_says(tmp_path: Path) -> None:
    """Fresh database, the config's plugin and rule, the scripted model: a whole turn, as events."""
    config, script = write_files(tmp_path, "tidy")
    async with open_test_coordinator(config=config, script=script, tmp_path=tmp_path) as coord:
        session = await coord.create_session(title="t")
        assert [s.id for s in await coord.list_sessions()] == [session.id]  # a fresh database
        await coord.prompt(session.id, "crunch, please")
        recorder = Recorder()
        async for event in coord.subscribe(session_id=session.id):
            recorder.add(event)
            if event.type == "permission.asked":
                await coord.reply_permission(session.id, event.payload["request"]["id"], "once")
            if event.type == "session.idle":
                break
    succeeded = recorder.of("session.tool.succeeded")
    assert [e.payload["output"] for e in succeeded] == ["crunched for 0.2s"]
    assert recorder.of("session.idle")[0].payload["outcome"] == "succeeded"


async def test_each_test_coordinator_has_its_own_database(tmp_path: Path) -> None:
    """Two in one folder share nothing; without a script the demo model answers."""
    async with open_test_coordinator(tmp_path=tmp_path) as first:
        await first.create_session(title="one")
    async with open_test_coordinator(tmp_path=tmp_path) as second:
        assert await second.list_sessions() == []


PLUGIN_TEST = """
from coordinator.testing import run_chaos

async def test_the_fixture_is_a_coordinator(test_coordinator):
    session = await test_coordinator.create_session(title="fixture")
    assert (await test_coordinator.get_session(session.id)).status == "idle"

async def test_options_reach_the_chaos_fixtures(chaos_runs, chaos_seed):
    assert (chaos_runs, chaos_seed) == (3, 7)

async def scenario(coord):
    session = await coord.create_session(title="chaos")
    await coord.prompt(session.id, "hello")

async def test_run_chaos_from_a_users_test(chaos_runs, chaos_seed):
    await run_chaos(scenario, runs=chaos_runs, seed=chaos_seed)
"""


def test_the_pytest_plugin_offers_its_fixtures_and_options(tmp_path: Path) -> None:
    """A user's suite, run by a real ``pytest -p coordinator.testing`` with --chaos-runs/--chaos-seed."""
    (tmp_path / "test_user.py").write_text(textwrap.dedent(PLUGIN_TEST))
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    command = [sys.executable, "-m", "pytest", "-p", "coordinator.testing", "-q", "-p", "no:cacheprovider"]
    result = subprocess.run(
        [*command, "--chaos-runs", "3", "--chaos-seed", "7", "test_user.py"],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout
