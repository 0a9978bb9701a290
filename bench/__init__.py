"""The benchmark suite: what a turn costs, how fast a stop lands, how far one process scales.

Run it with ``make bench``, ``coordinator bench`` or ``python -m bench``: it prints a table and writes
``bench/results/latest.json``. Every workload runs the real coordinator on a real SQLite file in a
temporary folder. ``design/benchmarks.md`` says what each figure measures and what limits it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Nothing heavy is imported at the top: the server under test imports ``bench.noop_tool`` (and so
# this package) as its plugin, and its start-up time and RSS must not include the benchmark's code.

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"

GROUPS = (
    "turns",
    "history",
    "baseline",
    "stops",
    "scale",
    "http",
    "streaming",
    "model_streams",
    "retention",
    "pg",
    "peer",
    "processes",
    "instructions",
    "aio",
    "steering",
    "mcp",
    "pg_rtt",
    "pg_peers",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that every workload runs")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"the JSON file (default {RESULTS})")
    parser.add_argument(
        "--pg",
        metavar="URL",
        help="the PostgreSQL server the pg group makes its databases on (default $COORDINATOR_BENCH_PG, "
        "else postgresql://postgres@127.0.0.1:5432/postgres); without one answering, the group is skipped",
    )
    parser.add_argument(
        "--only",
        default=",".join(GROUPS),
        help=f"comma-separated groups to run (default all: {','.join(GROUPS)})",
    )
    return parser


def main(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    """Run the suite; ``args`` is a parsed namespace (``coordinator bench``) or an argument list.

    Returns 0; a workload that fails raises (a benchmark that cannot run is a bug to see at once).
    """
    import attrs
    import trio

    from bench import report
    from bench.harness import Sizes, quiet_logging

    options = _options(args)
    groups = [group.strip() for group in options.only.split(",") if group.strip()]
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        print(f"bench: unknown group(s) {', '.join(unknown)}; expected {', '.join(GROUPS)}", file=sys.stderr)
        return 2
    quiet_logging()
    sizes = Sizes.quick() if options.quick else Sizes.full()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="coordinator-bench-") as folder:
        figures = trio.run(_measure, Path(folder), sizes, groups, options.pg)
    if "turns" in groups and "baseline" in groups:
        report.add_ratios(figures)
    seconds = time.perf_counter() - started
    report.print_table(figures, sys.stdout)
    run = {
        "quick": options.quick,
        "groups": groups,
        "seconds": round(seconds, 1),
        "sizes": attrs.asdict(sizes),
    }
    report.write_json(options.out, figures, run)
    print(f"\n{len(figures)} figures in {seconds:.0f} s; wrote {options.out}")
    return 0


def _options(args: argparse.Namespace | Sequence[str] | None) -> argparse.Namespace:
    if args is None or not isinstance(args, argparse.Namespace):
        return build_parser().parse_args(None if args is None else list(args))
    defaults = build_parser().parse_args([])
    for name, value in vars(defaults).items():
        if not hasattr(args, name):
            setattr(args, name, value)
    return args


async def _measure(workdir: Path, sizes: Any, groups: list[str], pg_option: str | None) -> dict[str, float]:
    # ``python -m bench.scale`` (a child process) imports this package first, and must not find its
    # own module imported already: the workloads are imported here, not at the top.
    from bench import (
        aio,
        baseline,
        history,
        http_api,
        instructions,
        mcp,
        metrics_cost,
        model_streams,
        peer,
        pg,
        pg_peers,
        pg_rtt,
        processes,
        retention,
        scale,
        steering,
        stops,
        streaming,
        turns,
    )

    # The groups that need something installed, and why they cannot run without it (None: they can).
    needs = {
        "instructions": instructions.unavailable,
        "peer": peer.unavailable,
        "pg_peers": pg_peers.unavailable,
    }
    figures: dict[str, float] = {}
    for group in groups:
        started = time.perf_counter()
        print(f"bench: {group}...", end="", file=sys.stderr, flush=True)
        why = needs[group]() if group in needs else None
        if why is not None:
            print(f" skipped: {why}", file=sys.stderr, flush=True)
            continue
        if group == "turns":
            figures.update(await turns.measure_turns(workdir, sizes))
            figures.update(await turns.measure_checkpoint_overhead(workdir, sizes, figures["turns_per_s"]))
            cpu = figures["turn_cpu_ms_normal"]
            figures.update(await metrics_cost.measure_metrics_overhead(workdir, sizes, cpu))
        elif group == "history":
            figures.update(await history.measure_history(workdir, sizes))
        elif group == "baseline":
            figures.update(await baseline.measure_baseline(workdir, sizes))
        elif group == "stops":
            figures.update(await stops.measure_stops(workdir, sizes))
        elif group == "scale":
            figures.update(await scale.measure_scale(workdir, sizes))
        elif group == "http":
            figures.update(await http_api.measure_http(workdir, sizes))
        elif group == "streaming":
            figures.update(await streaming.measure_streaming(workdir, sizes))
        elif group == "model_streams":
            figures.update(await model_streams.measure_model_streams(workdir / group, sizes))
        elif group == "retention":
            figures.update(await retention.measure_retention(workdir, sizes))
        elif group in ("pg", "pg_rtt", "pg_peers"):
            url = pg.server_url(pg_option)
            why = pg.unavailable(url)
            if why is not None:
                print(f" skipped: {why}; pass --pg URL", file=sys.stderr, flush=True)
                continue
            measure = {
                "pg": pg.measure_pg,
                "pg_rtt": pg_rtt.measure_pg_rtt,
                "pg_peers": pg_peers.measure_pg_peers,
            }[group]
            figures.update(await measure(workdir / group, sizes, url))
        elif group == "processes":
            figures.update(await processes.measure_processes(workdir, sizes))
        elif group == "instructions":
            figures.update(await instructions.measure_instructions(workdir, sizes))
        elif group == "peer":
            figures.update(await peer.measure_peer(workdir, sizes))
        elif group == "aio":
            figures.update(await aio.measure_aio(workdir, sizes))
        elif group == "steering":
            figures.update(await steering.measure_steering(workdir, sizes))
        elif group == "mcp":
            figures.update(await mcp.measure_mcp(workdir, sizes))
        print(f" {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return figures
