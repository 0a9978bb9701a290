"""One run of the campaign, fully determined by (seed, index), and the shrinking of a failing schedule.

A run is one ``trio.run`` under ``MockClock(autojump_threshold=0)`` with trio's scheduler seeded, on a
fresh SQLite file: phases (coordinators opened one after another on that file, after each shutdown or
crash) until every turn has settled, then the invariants over the store, the event log, the logs and
the process table.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import gc
import logging
import multiprocessing
import random
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import trio
from trio.testing import MockClock

from coordinator import logs
from coordinator.chaos import processes
from coordinator.chaos.driver import RunState
from coordinator.chaos.faults import FAULT_KINDS, SCENARIO_FAULT_KINDS, Injection, format_schedule
from coordinator.chaos.injector import ChaosInjector
from coordinator.chaos.invariants import check_run
from coordinator.chaos.phase import run_phase
from coordinator.chaos.record import RunRecord, StoreView
from coordinator.chaos.setup import Setup
from coordinator.chaos.streaming import Streamed
from coordinator.chaos.world import ChaosModel, World, make_user_world, make_world
from coordinator.checkpoints import is_plugin_checkpoint
from coordinator.models.base import ChatMessage

# A run ends once a phase ends with every turn settled; the fault budget bounds the restarts well below.
MAX_PHASES = 8
SHRINK_RUNS = 40


@attrs.frozen(kw_only=True)
class RunResult:
    """What one run injected and which invariants failed. Picklable (runs may go to worker processes)."""

    seed: int
    index: int
    schedule: tuple[Injection, ...]
    applied: tuple[tuple[str, str], ...]  # (fault kind, checkpoint) of each fault that took effect
    violations: tuple[str, ...]
    phases: tuple[str, ...]
    world: str
    seconds: float
    errors: tuple[str, ...] = ()
    reached: tuple[str, ...] = ()  # the plugin checkpoints the run passed (rows of the table)
    setup: Setup | None = None  # the user's config and script, for the replay line
    # Faults that took effect at a checkpoint inside a sub-agent session.
    in_sub_agents: int = 0

    @property
    def failed(self) -> bool:
        return bool(self.violations)


@attrs.frozen(kw_only=True)
class Run:
    """A run's raw material for the checks: its record, the final store, what the model and logs saw."""

    world: World
    record: RunRecord
    requests: tuple[tuple[ChatMessage, ...], ...]
    rebuilt: tuple[tuple[ChatMessage, ...], ...]  # each request's conversation rebuilt from the store
    streams: tuple[Streamed, ...]
    logs: tuple[dict[str, Any], ...]
    leftovers: tuple[str, ...]
    db: Path

    @property
    def view(self) -> StoreView:
        return self.record.phases[-1].view


def execute_run(
    seed: int,
    index: int,
    *,
    root: Path,
    schedule: tuple[Injection, ...] | None = None,
    setup: Setup | None = None,
) -> Run:
    """Drive run number ``index`` of campaign ``seed`` to its end (with ``schedule``'s faults if given)."""
    tag = f"{seed}:{index}"
    db = root / f"run-{seed}-{index}.sqlite"
    _remove(db)
    world_rng = random.Random(f"{tag}:world")
    world = make_world(world_rng, root, db) if setup is None else make_user_world(world_rng, root, db, setup)
    # A scenario makes its own sessions; `task` calls make sub-agent sessions: the record takes both
    # from the store.
    discovering = world.scenario is not None or bool(world.sub_scripts)
    record = RunRecord(discovering=discovering, external=world.external)
    injector = ChaosInjector(
        record,
        rng=random.Random(f"{tag}:faults"),
        responder_rng=random.Random(f"{tag}:person"),
        schedule=schedule,
        thinking=not world.processes,
        patience=world.patience,
        # A person's inputs only in the campaign's own worlds: a user's campaign keeps the faults its
        # plugins and scenarios were written against (a steer would add turns they do not expect).
        kinds=FAULT_KINDS if setup is None else SCENARIO_FAULT_KINDS,
    )
    model = ChaosModel(default=world.default_script, by_title=world.sub_scripts, db=db)
    clock = MockClock(rate=1.0) if world.processes else MockClock(autojump_threshold=0)
    state = RunState(world=world, record=record, injector=injector, model=model, clock=clock)
    before = processes.children()  # a test's own helpers are not this run's leftovers
    state.ledger.baseline()
    with captured_logs() as logs, deterministic_scheduling(f"{tag}:trio"):
        trio.run(_run, state, clock=clock)
    record.violations += state.ledger.finish()
    _collect_leaked_handles()
    record.reasonless = [entry for entry in logs if entry.get("event") == "reasonless_cancel"]
    return Run(
        world=world,
        record=record,
        requests=tuple(request.messages for request in model.requests),
        rebuilt=tuple(model.rebuilt),
        streams=tuple(model.streams),
        logs=tuple(logs),
        leftovers=tuple(processes.leftovers(before)),
        db=db,
    )


def run_one(
    seed: int,
    index: int,
    *,
    root: Path,
    schedule: tuple[Injection, ...] | None = None,
    setup: Setup | None = None,
) -> RunResult:
    """Run number ``index`` of campaign ``seed`` and check the invariants; a passing run's file is removed."""
    started = time.perf_counter()
    run = execute_run(seed, index, root=root, schedule=schedule, setup=setup)
    record = run.record
    violations = check_run(
        record,
        run.view,
        requests=run.requests,
        rebuilt=run.rebuilt,
        leftovers=run.leftovers,
        streams=run.streams,
    )
    if not violations:
        _remove(run.db)
    return RunResult(
        seed=seed,
        index=index,
        schedule=tuple(record.decided) if schedule is None else schedule,
        applied=tuple((a.injection.fault.kind, a.injection.checkpoint) for a in record.applied),
        violations=tuple(dict.fromkeys(str(v) for v in violations)),
        phases=tuple(p.end for p in record.phases),
        world=run.world.describe(),
        seconds=time.perf_counter() - started,
        errors=tuple(_describe_log(e) for e in run.logs if e.get("event") != "reasonless_cancel"),
        reached=tuple(sorted({name for name in record.checkpoints if is_plugin_checkpoint(name)})),
        setup=None if setup is None else attrs.evolve(setup, scenario=None),
        in_sub_agents=_in_sub_agents(run),
    )


def _in_sub_agents(run: Run) -> int:
    sessions = run.view.sessions
    return sum(
        1
        for a in run.record.applied
        if (s := sessions.get(a.session_id)) is not None and s.parent is not None
    )


async def _run(state: RunState) -> None:
    for number in range(MAX_PHASES):
        phase = await run_phase(state, number)
        state.record.phases.append(phase)
        if phase.end in ("done", "stuck"):
            return  # a coordinator that failed counts as a crash: the next one resumes its turns
    state.record.violate(1, f"the run did not settle within {MAX_PHASES} coordinators")


def shrink(
    schedule: tuple[Injection, ...], fails: Callable[[tuple[Injection, ...]], bool]
) -> tuple[Injection, ...]:
    """Drop injections one at a time while ``fails`` still holds; returns the smallest schedule found.

    Each candidate is a full run (``fails`` runs it), so at most ``SHRINK_RUNS`` are tried.
    """
    current, budget = schedule, SHRINK_RUNS
    changed = True
    while changed and budget > 0:
        changed = False
        for position in range(len(current)):
            if budget <= 0:
                break
            budget -= 1
            candidate = current[:position] + current[position + 1 :]
            if fails(candidate):
                current, changed = candidate, True
                break
    return current


def fails_with(
    seed: int, index: int, *, root: Path, setup: Setup | None = None
) -> Callable[[tuple[Injection, ...]], bool]:
    """Whether run ``index`` of ``seed`` fails with a given schedule: the predicate ``shrink`` needs."""
    return lambda schedule: run_one(seed, index, root=root, schedule=schedule, setup=setup).failed


def replay_command(
    seed: int, index: int, schedule: tuple[Injection, ...] | None = None, setup: Setup | None = None
) -> str:
    """The one line that reruns run ``index`` (with exactly ``schedule``, if given) on the same files."""
    flags = "" if setup is None else setup.flags()
    line = " ".join(
        part for part in ("coordinator chaos", flags, f"--runs 1 --seed {seed} --only {index}") if part
    )
    return line if schedule is None else f"{line} --schedule '{format_schedule(schedule)}'"


@contextlib.contextmanager
def deterministic_scheduling(seed: str) -> Iterator[None]:
    """Make trio's schedule a function of ``seed``, as pytest-trio does for Hypothesis.

    Trio runs each batch of runnable tasks in a random order, and ties between equal deadlines (common
    under ``MockClock``) are broken by object addresses. In this mode each batch is sorted by task
    creation, then shuffled by trio's own ``random.Random``, which is seeded here.
    """
    from trio._core import _run as trio_run  # internal: the only switch that makes a schedule repeatable

    saved = trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    trio_run._r.seed(seed)
    try:
        yield
    finally:
        trio_run._ALLOW_DETERMINISTIC_SCHEDULING = saved  # type: ignore[misc]


def _collect_leaked_handles() -> None:
    """Drop what a run's tools left (a ``Popen`` never waited for) now, without its ResourceWarning.

    The leak is reported already, as a violation naming the tool; its warning would surface later,
    in whatever code runs when the garbage collector finds it (a user's next test, under pytest).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def _remove(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            Path(f"{db}{suffix}").unlink()


def scratch_root() -> tempfile.TemporaryDirectory[str]:
    """Where runs put their databases: memory-backed when the machine has one (commits cost no fsync)."""
    shm = Path("/dev/shm")
    return tempfile.TemporaryDirectory(prefix="coordinator-chaos-", dir=shm if shm.is_dir() else None)


@contextlib.contextmanager
def captured_logs() -> Iterator[list[dict[str, Any]]]:
    """Keep the coordinator's error logs (``reasonless_cancel`` among them) in a list; print nothing."""
    with logs.captured(logging.ERROR) as kept:
        yield kept


def _describe_log(entry: dict[str, Any]) -> str:
    fields = {k: v for k, v in entry.items() if k not in ("event", "log_level", "exc_info")}
    error = entry.get("exc_info")
    suffix = f" {type(error).__name__}: {error}" if isinstance(error, BaseException) else ""
    return f"{entry.get('event')} {fields}{suffix}"


def run_many(
    seed: int,
    indices: list[int],
    *,
    root: Path,
    jobs: int = 1,
    schedule: tuple[Injection, ...] | None = None,
    on_result: Callable[[RunResult], None] = lambda result: None,
    setup: Setup | None = None,
) -> list[RunResult]:
    """Run ``indices`` of campaign ``seed``, in ``jobs`` worker processes (forked) when more than one."""
    results = []
    if jobs <= 1 or len(indices) < 2 or (setup is not None and setup.scenario is not None):
        for index in indices:
            results.append(run_one(seed, index, root=root, schedule=schedule, setup=setup))
            on_result(results[-1])
        return results
    work = functools.partial(_work, seed, root, schedule, setup)
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_worker) as pool:
        for result in pool.map(work, indices, chunksize=4):
            results.append(result)
            on_result(result)
    return results


def _start_worker() -> None:
    processes.adopt_orphans()


def _work(
    seed: int, root: Path, schedule: tuple[Injection, ...] | None, setup: Setup | None, index: int
) -> RunResult:
    return run_one(seed, index, root=root, schedule=schedule, setup=setup)
