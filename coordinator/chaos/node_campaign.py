"""The rounds over several nodes as the command runs them: one line a round, each failure with its
violations, what the nodes logged as errors and the line that replays it, then the campaign's figures."""

from __future__ import annotations

import functools
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import TextIO

import trio

from coordinator.chaos import processes
from coordinator.chaos.campaign import scratch_root
from coordinator.chaos.node_chaos import KINDS, NodeRoundResult, run_round

SHOWN = 8  # violations (and logged errors) printed for a failing round
EVIDENCE = Path("var/chaos")  # where a failing round's folder is kept (relative to where it runs)


def run_node_chaos(numbers: list[int], seed: int, server_url: str, *, nodes: int, out: TextIO) -> bool:
    """Run rounds ``numbers`` of ``seed`` on ``nodes`` nodes, each on a fresh database of the server
    ``server_url``; print each and the totals. True when every invariant held in every round.

    **Raises:** ``StoreError`` when the server refuses a round's database.
    """
    results: list[NodeRoundResult] = []
    started = time.perf_counter()
    with scratch_root() as scratch, processes.adopting_orphans():
        for number in numbers:
            result = trio.run(
                functools.partial(run_round, seed, number, Path(scratch), server_url, nodes=nodes)
            )
            results.append(result)
            print_round(result, server_url, out)
            if result.violations:
                kept = EVIDENCE / f"nodes-seed{seed}-round{number}"
                shutil.rmtree(kept, ignore_errors=True)
                shutil.copytree(Path(scratch) / f"nodes-round-{number}", kept)
                out.write(f"  evidence: {kept}/ (events.txt: each event's node and epoch; the nodes' logs)\n")
    print_totals(results, time.perf_counter() - started, out)
    return all(not r.violations for r in results)


def replay_command(result: NodeRoundResult, server_url: str) -> str:
    return (
        f"coordinator chaos --runs 0 --seed {result.seed} --db {server_url} --nodes {result.nodes} "
        f"--round {result.number}"
    )


def print_round(result: NodeRoundResult, server_url: str, out: TextIO) -> None:
    faults = ", ".join(f"{kind} {life}" for kind, life in result.applied)
    counts = result.counts
    verdict = "ok" if not result.violations else f"{len(result.violations)} violation(s)"
    out.write(
        f"nodes round {result.number} (seed {result.seed}, {result.nodes} nodes): {faults}; "
        f"{counts['turns']} turns, {counts['takeovers']} takeovers, {counts['counted_starts']} tool starts; "
        f"{result.seconds:.1f}s: {verdict}\n"
    )
    if not result.violations:
        return
    for violation in result.violations[:SHOWN]:
        out.write(f"  {violation}\n")
    if len(result.violations) > SHOWN:
        out.write(f"  ... and {len(result.violations) - SHOWN} more\n")
    for error in result.errors[:SHOWN]:
        out.write(f"  logged: {error}\n")
    out.write(f"  replay:   {replay_command(result, server_url)}\n")
    out.flush()


def print_totals(results: list[NodeRoundResult], seconds: float, out: TextIO) -> None:
    totals: Counter[str] = Counter()
    for result in results:
        totals.update(result.counts)
    faults = ", ".join(f"{kind} {totals[kind]}" for kind in KINDS)
    failed = [r for r in results if r.violations]
    by_invariant = Counter(v.split(":")[0] for r in failed for v in dict.fromkeys(r.violations))
    out.write(
        f"\n{len(results)} rounds over nodes in {seconds:.1f}s: faults {faults}; {totals['turns']} turns, "
        f"{totals['takeovers']} takeovers, {totals['resumed']} resumptions, {totals['interrupted']} "
        f"interrupted, {totals['counted_starts']} tool starts counted, {totals['events']} events\n"
    )
    verdict = ":" if failed else "; every invariant held (1-7, 9)"
    out.write(f"{len(failed)} of {len(results)} rounds failed{verdict}\n")
    for name, count in sorted(by_invariant.items()):
        out.write(f"  {name}: {count} violation(s)\n")
