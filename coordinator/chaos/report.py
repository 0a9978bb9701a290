"""What the campaign prints: a progress line, the table of faults injected, and each failure to replay."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import TextIO

import attrs

from coordinator.chaos.campaign import RunResult, replay_command
from coordinator.chaos.faults import FAULT_KINDS, SCENARIO_FAULT_KINDS, Injection, format_schedule
from coordinator.chaos.known import explain
from coordinator.checkpoints import KINDS

SHOWN_VIOLATIONS = 6


class Progress:
    """A one-line counter redrawn in place on a terminal; a line every tenth of the runs otherwise."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total = total
        self.stream = stream
        self.started = time.perf_counter()
        self.done = 0
        self.failures = 0
        self.tty = stream.isatty()
        self._step = max(1, total // 10)

    def update(self, result: RunResult) -> None:
        self.done += 1
        self.failures += result.failed
        if self.tty:
            self.stream.write(f"\r{self._line()}")
            self.stream.flush()
        elif self.done % self._step == 0 or self.done == self.total:
            self.stream.write(self._line() + "\n")
            self.stream.flush()

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")

    def _line(self) -> str:
        rate = self.done / max(time.perf_counter() - self.started, 1e-9)
        return f"chaos: {self.done}/{self.total} runs, {rate:.1f} runs/s, {self.failures} failed"


@attrs.frozen(kw_only=True)
class Failure:
    """A failing run, with the schedule shrunk to the injections that still make it fail."""

    result: RunResult
    shrunk: tuple[Injection, ...] | None


def fault_table(results: Iterable[RunResult]) -> Counter[tuple[str, str]]:
    """Faults that took effect, by (fault kind, checkpoint where it was injected)."""
    return Counter(pair for result in results for pair in result.applied)


def checkpoint_rows(results: Iterable[RunResult]) -> tuple[str, ...]:
    """The table's rows: the built-in checkpoints, then every plugin checkpoint the runs reached."""
    plugins = sorted({name for result in results for name in result.reached})
    return (*KINDS, *plugins)


def missing_cells(
    table: Counter[tuple[str, str]], rows: tuple[str, ...] = KINDS, kinds: tuple[str, ...] = FAULT_KINDS
) -> list[str]:
    return [f"{kind}@{point}" for point in rows for kind in kinds if not table[(kind, point)]]


def print_table(
    table: Counter[tuple[str, str]],
    out: TextIO,
    rows: tuple[str, ...] = KINDS,
    kinds: tuple[str, ...] = FAULT_KINDS,
) -> None:
    width = max(len(k) for k in rows)
    heads = [k.replace("_", " ") for k in kinds]
    out.write(f"{'checkpoint':<{width}}  " + "  ".join(f"{h:>{max(len(h), 5)}}" for h in heads) + "  total\n")
    for point in rows:
        cells = [table[(kind, point)] for kind in kinds]
        row = "  ".join(f"{c:>{max(len(h), 5)}}" for c, h in zip(cells, heads, strict=True))
        out.write(f"{point:<{width}}  {row}  {sum(cells):>5}\n")
    totals = [sum(table[(kind, p)] for p in rows) for kind in kinds]
    row = "  ".join(f"{c:>{max(len(h), 5)}}" for c, h in zip(totals, heads, strict=True))
    out.write(f"{'total':<{width}}  {row}  {sum(totals):>5}\n")


def print_summary(
    results: list[RunResult], failures: list[Failure], seconds: float, out: TextIO, *, jobs: int = 1
) -> None:
    table = fault_table(results)
    rows = checkpoint_rows(results)
    # A user's campaign draws no inputs into running turns (``faults.INPUTS``): no columns for them.
    user = any(result.setup is not None for result in results)
    kinds = SCENARIO_FAULT_KINDS if user else FAULT_KINDS
    rate = len(results) / max(seconds, 1e-9)
    seed = results[0].seed if results else 0
    out.write(f"\n{len(results)} runs of seed {seed} in {seconds:.1f}s ({rate:.1f} runs/s, {jobs} job(s))\n")
    out.write("faults that took effect, by the checkpoint where they were injected:\n")
    print_table(table, out, rows, kinds)
    missing = missing_cells(table, rows, kinds)
    # A user's campaign is a few runs: the count says how far it got; the list is for ours.
    listed = "more runs reach more of them" if user else ", ".join(missing)
    if missing:
        out.write(f"not injected ({len(missing)} of {len(rows) * len(kinds)}): {listed}\n")
    else:
        out.write("every fault kind took effect at every checkpoint kind\n")
    with_subs = [r for r in results if "sub-agent" in r.world]
    if with_subs:
        inside = sum(r.in_sub_agents for r in results)
        out.write(
            f"{len(with_subs)} runs with sub-agents; {inside} faults took effect inside a sub-agent session\n"
        )
    by_invariant = Counter(name for f in failures for name in {v.split(":")[0] for v in f.result.violations})
    verdict = ":" if failures else "; every invariant held"
    out.write(f"\n{len(failures)} of {len(results)} runs failed{verdict}\n")
    for name, count in sorted(by_invariant.items()):
        out.write(f"  {name}: {count} run(s)\n")
    if failures and not user:
        print_findings(failures, out)
    for failure in failures:
        print_failure(failure, out, known=not user)


def print_findings(failures: list[Failure], out: TextIO) -> None:
    """How many failing runs each known core bug explains, and how many none does."""
    by_finding: Counter[str] = Counter()
    unexplained = 0
    for failure in failures:
        names, rest = explain(failure.result)
        by_finding.update(names)
        unexplained += bool(rest)
    out.write("known core bugs (tests/scenarios/test_chaos_findings.py) in them:\n")
    for name, count in sorted(by_finding.items()):
        out.write(f"  {name}: {count} run(s)\n")
    out.write(f"runs with a violation no known bug explains: {unexplained}\n")


def print_failure(failure: Failure, out: TextIO, *, known: bool = True) -> None:
    """A failing run: its violations (those no known core bug explains first), schedule and replay line."""
    result = failure.result
    phases = ", ".join(result.phases)
    out.write(f"\nrun {result.index} of seed {result.seed}: {result.world}; phases {phases}\n")
    names, rest = explain(result) if known else ([], [])
    for name in names:
        out.write(f"  known: {name}\n")
    if rest:
        out.write("  NOT EXPLAINED by a known bug:\n")
    shown = rest or list(result.violations)
    for violation in shown[:SHOWN_VIOLATIONS]:
        out.write(f"  {violation}\n")
    if len(shown) > SHOWN_VIOLATIONS:
        out.write(f"  ... and {len(shown) - SHOWN_VIOLATIONS} more\n")
    out.write(f"  schedule: {format_schedule(result.schedule)}\n")
    if failure.shrunk is not None:
        out.write(f"  shrunk:   {format_schedule(failure.shrunk)}\n")
    replay = failure.shrunk if failure.shrunk is not None else result.schedule
    out.write(f"  replay:   {replay_command(result.seed, result.index, replay, result.setup)}\n")
