"""The mutant table stays true to the code between runs of ``make mutants``: every planted edit still
finds its lines, every catching test still exists, and a planted file is always restored."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.mutants.mutants import MUTANTS, Edit, Mutant
from tests.mutants.run import REPO, Rotted, check_edits, planted


def test_every_mutant_still_finds_the_lines_it_edits() -> None:
    """A refactoring that moves a mutant's code fails here, in the ordinary suite, not only when
    someone runs the mutants: they do not rot silently."""
    check_edits(REPO, MUTANTS)


def test_every_catching_test_exists() -> None:
    """A renamed test would make its mutant's run an error instead of a catch."""
    defined: dict[str, set[str]] = {}
    for mutant in MUTANTS:
        for test in mutant.tests:
            module, _, name = test.partition("::")
            name = name.partition("[")[0]  # a scenario's backend parameter, ``[sqlite]``
            if module not in defined:
                tree = ast.parse((REPO / module).read_text())
                defined[module] = {node.name for node in tree.body if isinstance(node, ast.AsyncFunctionDef)}
                defined[module] |= {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
            assert name in defined[module], test


def test_mutant_names_are_unique() -> None:
    names = [mutant.name for mutant in MUTANTS]
    assert len(names) == len(set(names)) == 22


def test_a_planted_file_is_restored_even_when_the_run_fails(tmp_path: Path) -> None:
    """The runner plants in a copy, but a mutant left behind would still poison every later run."""
    source = tmp_path / "module.py"
    source.write_text("def f():\n    return 1\n")
    mutant = Mutant(
        name="m",
        origin="test",
        rule="r",
        edits=(Edit(path="module.py", old=("    return 1",), new=("    return 2",)),),
        tests=(),
    )
    with pytest.raises(RuntimeError), planted(tmp_path, mutant):
        assert source.read_text() == "def f():\n    return 2\n"
        raise RuntimeError("the run failed")
    assert source.read_text() == "def f():\n    return 1\n"


def test_an_edit_matches_whole_lines_only(tmp_path: Path) -> None:
    """``    return 1`` must not match inside ``        return 1``: that would plant the bug elsewhere."""
    (tmp_path / "module.py").write_text("def f():\n    if x:\n        return 1\n")
    mutant = Mutant(
        name="m",
        origin="test",
        rule="r",
        edits=(Edit(path="module.py", old=("    return 1",), new=("    return 2",)),),
        tests=(),
    )
    with pytest.raises(Rotted):
        check_edits(tmp_path, [mutant])
