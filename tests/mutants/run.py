"""Plant each stop bug of ``tests/mutants/mutants.py`` in a copy of the sources, one at a time, and run
the tests that must catch it: ``.venv/bin/python -m tests.mutants.run`` (``make mutants``).

The sources are copied to a temporary folder first, and every mutant is planted there and taken out
again in a ``finally``; the working tree is never edited. Before any mutant, each edit is checked to
find its old lines exactly once (a mutant whose code moved fails the run: it does not rot silently),
and the catching tests run once unmutated: they must pass. A mutant is caught when its tests fail
(pytest exits 1); it survives when they pass. A test that fails only by outliving its limit (a hang),
a run killed past its limit, or one pytest cannot run (a mutant that breaks an import) is no catch.
The run exits 1 unless every mutant is caught.

Options: ``--only NAME`` (repeatable) plants only those; ``--each`` runs each catching test alone and
requires every one of them to fail; ``--against TEST...`` runs these tests instead of the named ones
against each mutant, without ``-x``, and lists which fail (a survey, to find catching tests).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

from tests.mutants.mutants import MUTANTS, Edit, Mutant

REPO = Path(__file__).resolve().parents[2]
# What the copy leaves out: the virtualenv, git, caches and build output.
IGNORED = shutil.ignore_patterns(
    ".venv",
    ".git",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "var",
    "build",
    "*.egg-info",
)
TEST_TIMEOUT_S = 30


class Rotted(Exception):
    """A mutant's old text is no longer found exactly once: the code it plants a bug in moved."""


@attrs.frozen(kw_only=True)
class Run:
    """One pytest run: its exit code, wall seconds, the tests' own seconds, which failed, its output."""

    returncode: int | None  # None: it hung past its limit and was killed
    wall_s: float
    test_s: float
    failed: tuple[str, ...]
    timed_out: bool  # a test failed only because it outlived its limit (pytest-timeout, the wall clock)
    output: str


def check_edits(root: Path, mutants: Sequence[Mutant]) -> None:
    """Raise ``Rotted`` naming every edit whose old lines are not found exactly once under ``root``."""
    problems = []
    for mutant in mutants:
        for edit in mutant.edits:
            count = occurrences(edit, (root / edit.path).read_text())
            if count != 1 or edit.old_text == edit.new_text:
                problems.append(f"{mutant.name}: {edit.path}: old lines found {count} times")
    if problems:
        raise Rotted("; ".join(problems))


def occurrences(edit: Edit, text: str) -> int:
    """How many times the edit's old lines occur in ``text`` as whole lines."""
    return ("\n" + text).count("\n" + edit.old_text)


@contextlib.contextmanager
def planted(root: Path, mutant: Mutant) -> Iterator[None]:
    """The mutant's edits applied under ``root``, every file restored on the way out, whatever happens."""
    originals: dict[Path, str] = {}
    try:
        for edit in mutant.edits:
            path = root / edit.path
            text = path.read_text()
            originals.setdefault(path, text)
            if occurrences(edit, text) != 1:
                raise Rotted(f"{mutant.name}: {edit.path}: old lines found {occurrences(edit, text)} times")
            path.write_text(("\n" + text).replace("\n" + edit.old_text, "\n" + edit.new_text)[1:])
        yield
    finally:
        for path, text in originals.items():
            path.write_text(text)


def copy_sources(into: Path) -> Path:
    """A copy of the repository's sources (no virtualenv, git or caches) under ``into``."""
    copy = into / "src"
    shutil.copytree(REPO, copy, ignore=IGNORED)
    return copy


def environment(copy: Path) -> dict[str, str]:
    """The copy first on the path, and no bytecode written: a restored file is never shadowed by the
    mutant's ``.pyc`` (same size, same second)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(copy), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def check_imports_from(copy: Path) -> None:
    """Fail unless ``coordinator`` imports from the copy (not the editable install)."""
    probe = "import coordinator; print(coordinator.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=copy,
        env=environment(copy),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not all(Path(path).is_relative_to(copy) for path in out):
        raise SystemExit(f"the copy's packages are not the ones imported: {out}")


def run_pytest(copy: Path, tests: Sequence[str], *, stop_first: bool, timeout: float) -> Run:
    """Run ``tests`` in the copy; a run that outlives its limit is killed with its process group."""
    report = copy / "junit.xml"
    report.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--timeout={timeout:g}"]
    command += ["-x"] if stop_first else []
    command += ["--junitxml", str(report), *tests]
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=copy,
        env=environment(copy),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout * len(tests) + 60)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        returncode = None
    wall = time.perf_counter() - started
    test_s, failed, timed_out = _read_report(report)
    return Run(
        returncode=returncode, wall_s=wall, test_s=test_s, failed=failed, timed_out=timed_out, output=output
    )


# How a test that outlived its limit fails: pytest-timeout's message, and tests/conftest.py's.
TIMEOUT_MESSAGES = ("Timeout >", "of wall-clock time")


def _read_report(report: Path) -> tuple[float, tuple[str, ...], bool]:
    """The tests' own seconds (setup, call, teardown), the ids of those that failed or erred, and
    whether one of them failed by outliving its limit."""
    if not report.exists():
        return 0.0, (), False
    seconds, failed, timed_out = 0.0, [], False
    for case in ElementTree.parse(report).iter("testcase"):
        seconds += float(case.get("time", 0))
        for problem in (case.find("failure"), case.find("error")):
            if problem is not None:
                module = case.get("classname", "").replace(".", "/") + ".py"
                failed.append(f"{module}::{case.get('name')}")
                message = problem.get("message", "")
                timed_out = timed_out or any(word in message for word in TIMEOUT_MESSAGES)
    return seconds, tuple(dict.fromkeys(failed)), timed_out


def verdict(run: Run) -> str:
    """caught (a test failed), survived (they passed), or what is no quick catch: timed out (a test
    failed only by outliving its limit: a hang), hung (the run was killed), error (pytest could not
    run the tests, e.g. the mutant broke an import)."""
    if run.returncode is None:
        return "hung"
    if run.returncode == 1 and run.timed_out:
        return "timed out"
    return {0: "survived", 1: "caught"}.get(run.returncode, f"error (pytest exit {run.returncode})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutants.run", description=__doc__)
    parser.add_argument("--only", action="append", metavar="NAME", help="plant only this mutant")
    parser.add_argument("--each", action="store_true", help="run each catching test alone; all must fail")
    parser.add_argument("--against", nargs="+", metavar="TEST", help="survey: which of these tests fail")
    parser.add_argument("--timeout", type=float, default=TEST_TIMEOUT_S, help="seconds per test")
    args = parser.parse_args(argv)
    mutants = [m for m in MUTANTS if not args.only or m.name in args.only]
    unknown = set(args.only or ()) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"unknown mutant(s): {', '.join(sorted(unknown))}")
    check_edits(REPO, mutants)
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        copy = copy_sources(Path(tmp))
        check_imports_from(copy)
        if args.against:
            return _survey(copy, mutants, args.against, args.timeout)
        return _plant_all(copy, mutants, each=args.each, timeout=args.timeout)


def _baseline(copy: Path, tests: Sequence[str], timeout: float) -> bool:
    run = run_pytest(copy, tests, stop_first=False, timeout=timeout)
    print(
        f"baseline: {len(tests)} test ids, {verdict(run).replace('survived', 'all pass')} ({run.wall_s:.1f} s)"
    )
    if run.returncode != 0:
        print(run.output)
    return run.returncode == 0


def _plant_all(copy: Path, mutants: Sequence[Mutant], *, each: bool, timeout: float) -> int:
    tests = list(dict.fromkeys(test for mutant in mutants for test in mutant.tests))
    if not _baseline(copy, tests, timeout):
        return 1
    ok = True
    print(f"{'mutant':44} {'verdict':9} {'run s':>6} {'test s':>6}  catching test")
    for mutant in mutants:
        with planted(copy, mutant):
            if each:
                runs = [(t, run_pytest(copy, [t], stop_first=True, timeout=timeout)) for t in mutant.tests]
            else:
                together = run_pytest(copy, mutant.tests, stop_first=True, timeout=timeout)
                runs = [(" + ".join(mutant.tests), together)]
        for test, run in runs:
            word = verdict(run)
            ok = ok and word == "caught"
            print(f"{mutant.name:44} {word:9} {run.wall_s:6.1f} {run.test_s:6.2f}  {_short(test)}")
            if word.startswith(("error", "hung", "timed out")):
                print(run.output[-3000:])
    print("every mutant caught" if ok else "SOME MUTANTS SURVIVED OR ERRED")
    return 0 if ok else 1


def _survey(copy: Path, mutants: Sequence[Mutant], tests: Sequence[str], timeout: float) -> int:
    if not _baseline(copy, tests, timeout):
        return 1
    for mutant in mutants:
        with planted(copy, mutant):
            run = run_pytest(copy, tests, stop_first=False, timeout=timeout)
        print(f"{mutant.name}: {verdict(run)}, {run.wall_s:.1f} s, {len(run.failed)} failed")
        for test in run.failed:
            print(f"    {test}")
    return 0


def _short(test: str) -> str:
    return test.replace("tests/", "", 1)


if __name__ == "__main__":
    raise SystemExit(main())
