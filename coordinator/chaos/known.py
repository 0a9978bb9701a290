"""Core bugs the campaign found and that are not fixed yet, each with a failing scenario to fix it by.

Each finding names its ``xfail(strict=True)`` tests in ``tests/scenarios/test_chaos_findings.py`` and
recognises the violations it causes. The CI campaign passes when every violation it sees is explained
by a finding here; anything else (a seed bug brought back, a new bug) fails it. When a fix lands, its
xfail test passes, pytest reports it (strict), and the finding is removed from this list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import attrs


class Result(Protocol):
    """A run's verdict as findings read it: in-process (``RunResult``) or process-level (``RoundResult``)."""

    @property
    def violations(self) -> Sequence[str]: ...

    @property
    def applied(self) -> Sequence[tuple[str, str]]: ...

    @property
    def phases(self) -> Sequence[str]: ...


@attrs.frozen(kw_only=True)
class Finding:
    """A known core bug: a short name, its scenario test, and which violations of a run it explains."""

    name: str
    tests: tuple[str, ...]
    explains: Callable[[str, Result], bool]


def injected(result: Result, kind: str) -> bool:
    """Whether a fault of ``kind`` took effect in the run (recognisers often need it)."""
    return any(fault == kind for fault, _ in result.applied)


# Empty while every bug the campaign found is fixed (design/chaos.md lists them); their scenarios in
# tests/scenarios/test_chaos_findings.py guard the fixes.
FINDINGS: tuple[Finding, ...] = ()


def explain(result: Result) -> tuple[list[str], list[str]]:
    """The findings that explain a failing run's violations, and the violations none explains."""
    names: list[str] = []
    unexplained: list[str] = []
    for violation in result.violations:
        found = [f.name for f in FINDINGS if f.explains(violation, result)]
        if not found:
            unexplained.append(violation)
        names += [n for n in found if n not in names]
    return names, unexplained
