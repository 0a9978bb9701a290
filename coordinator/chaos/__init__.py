"""The chaos campaign: faults injected at every checkpoint, the invariants checked after each run.

``coordinator chaos --runs N --seed S`` runs ``main``. See ``design/chaos.md`` for the checkpoints, the
faults, the invariants and how a failing run is shrunk and replayed. ``crash(coord)`` is the rigs'
in-process crash (the ``crash`` fault, and tests that resume after one).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TextIO

from coordinator._coordinator import crash
from coordinator.chaos import processes
from coordinator.chaos.campaign import fails_with, run_many, scratch_root, shrink
from coordinator.chaos.faults import Injection, ScheduleError, parse_schedule
from coordinator.chaos.report import Failure, Progress, print_summary
from coordinator.chaos.setup import Setup
from coordinator.errors import ConfigError, StoreError
from coordinator.store import is_postgres

# Failing runs shrunk and printed in full; the others are counted.
SHRUNK_FAILURES = 5
NODES = 3  # servers in a round over nodes (--db) unless --nodes says
MAX_NODES = 5

__all__ = ["crash", "main", "run_campaign"]


def main(args: argparse.Namespace) -> int:
    """Run the campaign the command line asked for; 0 when every invariant held in every run.

    Reads ``args.runs`` and ``args.seed``, and, when the parser defines them, ``config`` and
    ``script`` (the user's plugins, rules, timeouts and model script), ``only`` (replay one run
    index), ``schedule`` (with ``only``: inject exactly these faults), ``jobs`` (worker processes),
    ``process_rounds`` (rounds of process-level chaos against ``coordinator serve``), ``round`` (one
    of them), ``db`` and ``nodes`` (the rounds over several nodes on PostgreSQL) and ``shrink``.

    **Raises:** ``ConfigError`` for a bad config, plugin or script (the CLI exits 2).
    """
    out = sys.stdout
    try:
        schedule = parse_schedule(args.schedule) if getattr(args, "schedule", None) else None
    except ScheduleError as exc:
        print(f"coordinator: error: --schedule: {exc}", file=sys.stderr)
        return 2
    only = getattr(args, "only", None)
    indices = [only] if only is not None else list(range(args.runs))
    numbers = process_rounds(args)
    setup = user_setup(args)
    if setup is not None and numbers:
        raise ConfigError(
            "runs the built-in programs only: not with --config or --script", "--process-rounds"
        )
    ok = True
    if indices:
        ok = run_campaign(
            args.seed,
            indices,
            out=out,
            schedule=schedule,
            jobs=getattr(args, "jobs", 1) or 1,
            shrinking=getattr(args, "shrink", True),
            setup=setup,
        )
    db = getattr(args, "db", None)
    if numbers and db is not None:
        from coordinator.chaos.node_campaign import run_node_chaos

        try:
            ok = run_node_chaos(numbers, args.seed, db, nodes=args.nodes or NODES, out=out) and ok
        except StoreError as exc:
            raise ConfigError(str(exc), "--db") from exc
    elif numbers:
        from coordinator.chaos.process_chaos import run_process_chaos

        ok = run_process_chaos(numbers, args.seed, out=out) and ok
    return 0 if ok else 1


def process_rounds(args: argparse.Namespace) -> list[int]:
    """The process rounds to run: ``--round K`` alone, else the first ``--process-rounds``; with
    ``--db`` (and ``--nodes``) they run over several nodes on PostgreSQL.

    **Raises:** ``ConfigError`` (exit 2) for ``--db`` or ``--nodes`` that cannot be used.
    """
    count = getattr(args, "process_rounds", 0) or 0
    only = getattr(args, "round", None)
    numbers = [only] if only is not None else list(range(count))
    db, nodes = getattr(args, "db", None), getattr(args, "nodes", None)
    if nodes is not None and db is None:
        raise ConfigError("needs --db postgresql://...: only PostgreSQL is shared by nodes", "--nodes")
    if nodes is not None and not 2 <= nodes <= MAX_NODES:
        raise ConfigError(f"must be from 2 to {MAX_NODES}", "--nodes")
    if db is not None and not is_postgres(db):
        raise ConfigError(
            "takes a postgresql:// URL: the nodes of a round share a PostgreSQL database", "--db"
        )
    if db is not None and not numbers:
        raise ConfigError("runs process rounds: give --process-rounds R (or --round K)", "--db")
    return numbers


def user_setup(args: argparse.Namespace) -> Setup | None:
    """The user's config and script from ``--config`` / ``--script``; None for the built-in campaign.

    **Raises:** ``ConfigError`` (exit 2) for a config, a plugin or a script that cannot be used.
    """
    config, script = getattr(args, "config", None), getattr(args, "script", None)
    if config is None and script is None:
        return None
    return Setup.load(config, script)


def run_campaign(
    seed: int,
    indices: list[int],
    *,
    out: TextIO,
    schedule: tuple[Injection, ...] | None = None,
    jobs: int = 1,
    shrinking: bool = True,
    setup: Setup | None = None,
) -> bool:
    """Run the in-process campaign, print its table and failures; True when every run held."""
    progress = Progress(len(indices), out)
    started = time.perf_counter()
    with scratch_root() as scratch, processes.adopting_orphans():
        root = Path(scratch)
        results = run_many(
            seed, indices, root=root, jobs=jobs, schedule=schedule, on_result=progress.update, setup=setup
        )
        progress.finish()
        seconds = time.perf_counter() - started
        failures: list[Failure] = []
        for result in (r for r in results if r.failed):
            shrunk = None
            if shrinking and schedule is None and len(failures) < SHRUNK_FAILURES:
                shrunk = shrink(result.schedule, fails_with(seed, result.index, root=root, setup=setup))
            failures.append(Failure(result=result, shrunk=shrunk))
    print_summary(results, failures, seconds, out, jobs=jobs)
    return not failures
