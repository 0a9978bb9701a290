"""``open_test_coordinator`` and ``run_chaos``: the public testing API (``coordinator.testing``)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio

from coordinator import Coordinator, open_coordinator
from coordinator.chaos import processes
from coordinator.chaos.campaign import RunResult, fails_with, run_one, scratch_root, shrink
from coordinator.chaos.faults import format_schedule, parse_schedule
from coordinator.chaos.setup import Scenario, Setup
from coordinator.config import Config, config_from
from coordinator.errors import ChaosFailure
from coordinator.ids import new_id
from coordinator.models.base import Model
from coordinator.models.scripted import DemoModel, ScriptedModel

ConfigArg = str | Path | Config | None
ScriptArg = str | Path | list[Any] | None


@contextlib.asynccontextmanager
async def open_test_coordinator(
    config: ConfigArg = None, *, script: ScriptArg = None, tmp_path: str | Path | None = None
) -> AsyncIterator[Coordinator]:
    """A coordinator on a fresh SQLite file, its model scripted: what a test drives.

    Args:
        config: a config file, a ``Config`` or None: its plugins, rules and timeouts apply; its
            ``[server] db`` and ``[model]`` provider do not.
        script: the scripted model's script, the answers it gives in turn: a JSON file or its parsed list;
            default the config's ``[model] script``, else the built-in demo model.
        tmp_path: where the database goes (pytest's ``tmp_path``); default a temporary folder,
            removed on exit.

    Leaving the block is a graceful shutdown, as with ``open_coordinator``.

    **Raises:** ``ConfigError`` for a bad config, plugin or script.
    """
    resolved = config_from(config)
    model = _model(resolved, script)
    with contextlib.ExitStack() as stack:
        folder = Path(tmp_path) if tmp_path is not None else Path(stack.enter_context(_scratch()))
        db = folder / f"{new_id('test')}.sqlite"  # fresh, even for a second coordinator in one test
        async with open_coordinator(resolved, db=str(db), model=model, synchronous="normal") as coord:
            yield coord


def _scratch() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="coordinator-test-")


def _model(config: Config, script: ScriptArg) -> Model:
    if isinstance(script, list):
        return ScriptedModel.from_json(script, "script")
    path = Path(script) if script is not None else config.script_path()
    return DemoModel() if path is None else ScriptedModel.from_file(path)


async def run_chaos(
    scenario: Scenario,
    *,
    config: ConfigArg = None,
    script: ScriptArg = None,
    runs: int = 10,
    seed: int = 0,
    only: int | None = None,
    schedule: str | None = None,
) -> None:
    """Run ``scenario`` under injected faults, ``runs`` times; raise on the first run that breaks an invariant.

    Each run is the campaign's (``coordinator chaos --config``): a fresh database, the config's
    plugins, rules and timeouts, the scripted model following ``script``, faults drawn from ``(seed,
    run)`` at every checkpoint (the plugins' awaits and declared ``checkpoint`` s included), then every
    invariant checked, "no process a tool started outlives its call" among them. The scenario
    (``async def scenario(coord)``) creates sessions, prompts, replies and interrupts; it runs in a
    trio run of its own (in a worker thread, on a seeded scheduler), so it must not touch the calling
    test's trio objects. An error a fault explains (``StoreError``, ``CoordinatorClosed``, a reply to a
    request a stop settled) ends the scenario quietly; any other error it raises fails the run. The
    campaign's person answers what the scenario leaves pending for half a second.

    Args:
        scenario: the user's program, ``async def scenario(coord)``.
        config: a config file, a ``Config`` or None.
        script: what the model answers, a JSON file or its parsed list.
        runs: how many runs (0 to runs - 1).
        seed: the campaign's seed.
        only: run only this run (a replay); ``schedule``: with it, inject exactly these faults.

    **Cancellation:** waits for the run in progress to end (a run is bounded). The calling test waits
    on a thread: under an autojump clock, a deadline around this call would fire at once.

    **Raises:** ``ChaosFailure`` with ``seed``, ``run``, ``schedule``, ``replay`` and ``violations``;
    ``ConfigError`` for a bad config, plugin or script; ``ValueError`` for a bad ``schedule``.
    """
    setup = Setup.load(config, script, scenario=scenario)
    injections = None if schedule is None else parse_schedule(schedule)
    indices = [only] if only is not None else list(range(runs))
    failed = await trio.to_thread.run_sync(_first_failure, setup, seed, indices, injections)
    if failed is not None:
        result, shrunk = failed
        replay = _replay(scenario, config, script, seed, result.index, format_schedule(shrunk))
        raise ChaosFailure(
            seed=seed,
            run=result.index,
            schedule=format_schedule(result.schedule),
            replay=replay,
            violations=result.violations,
        )


def _first_failure(
    setup: Setup, seed: int, indices: list[int], schedule: Any
) -> tuple[RunResult, Any] | None:
    with scratch_root() as scratch, processes.adopting_orphans():
        root = Path(scratch)
        for index in indices:
            result = run_one(seed, index, root=root, schedule=schedule, setup=setup)
            if result.failed:
                shrunk = schedule or shrink(result.schedule, fails_with(seed, index, root=root, setup=setup))
                return result, shrunk
    return None


def _replay(
    scenario: Scenario, config: ConfigArg, script: ScriptArg, seed: int, index: int, schedule: str
) -> str:
    """The call that runs the failing run again, with exactly its (shrunk) faults."""
    name = getattr(scenario, "__name__", "scenario")
    given = [f"config={_shown(config)}"] if config is not None else []
    given += [f"script={_shown(script)}"] if script is not None else []
    arguments = ", ".join([name, *given, f"seed={seed}", f"only={index}", f"schedule={schedule!r}"])
    return f"await run_chaos({arguments})"


def _shown(value: Any) -> str:
    return repr(str(value)) if isinstance(value, str | Path) else "..."
