'''Chaos-test your own tools and flows: a test coordinator, the campaign as a call, and checkpoints.

Public names (pinned by ``tests/test_public_api.py``):

- ``async with open_test_coordinator(config=..., script=..., tmp_path=...) as coord``: a coordinator
  on a fresh database, its model answering from a JSON script;
- ``await run_chaos(scenario, config=..., script=..., runs=N, seed=S)``: runs your ``async def
  scenario(coord)`` under injected faults, checks every invariant after each run, and raises
  ``ChaosFailure`` (``.seed``, ``.run``, ``.schedule``, ``.replay``, ``.violations``) on the first run
  that breaks one;
- ``await checkpoint("name")``: an await point your plugin tool declares, where the campaign injects
  faults too (it holds the tool there until the fault is applied). Without a campaign it does nothing
  at all: it neither yields to trio nor can be cancelled. Every other await of a plugin is a
  checkpoint of the campaign as well (``plugin.TOOL.await``), where faults land while the plugin
  awaits.

It is also a pytest plugin (``pytest -p coordinator.testing``), with fixtures: ``test_coordinator``
(an ``open_test_coordinator`` on ``tmp_path``, async: it needs pytest-trio), ``coordinator_config``
and ``coordinator_script`` (None; override them in your conftest.py to configure it), and
``chaos_runs`` / ``chaos_seed`` (``--chaos-runs N``, default 10, and ``--chaos-seed S``, default 0), to
scale a campaign from the command line without editing the test.

A worked example. A plugin tool (``[[plugin]] entry = "mytools:crunch"``) that starts a helper
process and stops it when its work is done, but not when its call is stopped::

    import trio
    from coordinator.testing import checkpoint

    async def crunch(seconds: float, progress) -> str:
        """Crunch numbers with a helper process."""
        helper = await trio.lowlevel.open_process(["sleep", "60"], start_new_session=True)
        await checkpoint("helper-started")
        progress("crunching")
        await trio.sleep(seconds)  # the work
        helper.terminate()  # not reached when the call is stopped: the helper outlives it
        await helper.wait()
        return f"crunched for {seconds:g}s"

A scenario that prompts, replies and interrupts, and the test (``pytest -p coordinator.testing``)::

    from coordinator.testing import run_chaos

    async def scenario(coord):
        session = await coord.create_session(title="chaos")
        await coord.prompt(session.id, "crunch, please")
        async for event in coord.subscribe(session_id=session.id):
            if event.type == "permission.asked":
                await coord.reply_permission(session.id, event.payload["request"]["id"], "once")
            elif event.type == "session.tool.progress":
                await coord.interrupt(session.id)  # the user presses stop while it crunches
            elif event.type == "session.idle":
                return

    async def test_crunch_under_chaos(chaos_runs, chaos_seed):
        await run_chaos(scenario, config="chaos.toml", script="script.json", runs=chaos_runs, seed=chaos_seed)

The test fails, naming the tool and the process it left, with the call that replays that run::

    ChaosFailure: chaos run 0 of seed 0 failed:
      invariant 6: tool crunch left a process running after its call c1 settled: sleep 60
      schedule: 8:plugin.crunch.helper-started:model_error/malformed
      replay:   await run_chaos(scenario, config='chaos.toml', script='script.json', seed=0, only=0, schedule='-')

(``schedule`` is what run 0 injected; the replay's is what shrinking kept, here nothing: the
scenario's own interrupt is enough to leave the helper behind.) With ``chaos.toml`` as in the README
(``[[plugin]] entry = "mytools:crunch"``, an ``ask`` rule for it) and ``script.json`` calling ``crunch``
with ``{"seconds": 0.2}``, then text. The fix
stops the helper's whole process group however the call ends::

    async def crunch(seconds: float, progress) -> str:
        helper = await trio.lowlevel.open_process(["sleep", "60"], start_new_session=True)
        try:
            await checkpoint("helper-started")
            progress("crunching")
            await trio.sleep(seconds)
            return f"crunched for {seconds:g}s"
        finally:
            with trio.move_on_after(5, shield=True):
                os.killpg(helper.pid, signal.SIGKILL)
                await helper.wait()

and the same test passes. ``coordinator chaos --config chaos.toml --script script.json`` runs the same
campaign from the command line, without a scenario (README, "Chaos-testing your own tools").
'''

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from coordinator.checkpoints import checkpoint
from coordinator.errors import ChaosFailure

if TYPE_CHECKING:
    from coordinator.testing._api import open_test_coordinator, run_chaos

__all__ = ["ChaosFailure", "checkpoint", "open_test_coordinator", "run_chaos"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: a plugin tool imports ``checkpoint`` alone, in a server too, and should not
    # load the whole campaign (nor, through trio.testing, pytest) with it.
    if name in ("open_test_coordinator", "run_chaos"):
        from coordinator.testing import _api

        return getattr(_api, name)
    raise AttributeError(f"module 'coordinator.testing' has no attribute {name!r}")


# The pytest plugin's hooks and fixtures, offered only inside pytest (``-p coordinator.testing`` imports
# this module once pytest runs): a plugin tool importing ``checkpoint`` in a server loads no pytest.
if "pytest" in sys.modules:
    from coordinator.testing._pytest_plugin import (  # noqa: F401 (found by pytest on this module)
        chaos_runs,
        chaos_seed,
        coordinator_config,
        coordinator_script,
        pytest_addoption,
        test_coordinator,
    )
