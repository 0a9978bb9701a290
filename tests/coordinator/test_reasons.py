"""Every stop reason is built by a named constructor in ``coordinator/reasons.py``: one place names
each cause, so a newcomer can find who decides it and the next cause cannot slip in unnamed."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from coordinator import reasons, records

ROOT = Path(__file__).resolve().parents[2]
REASON_CLASSES = {cls.__name__ for cls in reasons.REASON_CLASSES}


def _direct_constructions(path: Path) -> list[str]:
    """Calls of a reason class imported from ``coordinator.reasons`` (or as ``reasons.X``)."""
    tree = ast.parse(path.read_text(), str(path))
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "coordinator.reasons"
        for alias in node.names
        if alias.name in REASON_CLASSES
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        direct = isinstance(func, ast.Name) and func.id in imported
        qualified = (
            isinstance(func, ast.Attribute)
            and func.attr in REASON_CLASSES
            and isinstance(func.value, ast.Name)
            and func.value.id == "reasons"
        )
        if direct or qualified:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_module_but_reasons_builds_a_stop_reason_directly() -> None:
    """``Declined.by_permission(call_id)``, not ``Declined(via="permission", ...)``, outside the table."""
    sources = [p for folder in ("coordinator", "actors") for p in sorted((ROOT / folder).rglob("*.py"))]
    offenders = [hit for p in sources if p.name != "reasons.py" for hit in _direct_constructions(p)]
    assert offenders == []


def test_every_named_constructor_builds_its_own_class() -> None:
    """The constructors are the reason table's rows: each returns the class it is named on."""
    assert reasons.Interrupt.by_person("api") == reasons.Interrupt(by="api")
    assert reasons.Declined.by_permission("c").via == "permission"
    assert reasons.Declined.by_form("c").via == "question"
    assert reasons.Declined.by_sub_agent("c").via == "task"
    assert reasons.Timeout.deadline("question", 2) == reasons.Timeout(scope="question", after=2)
    assert reasons.Shutdown.of_coordinator().resumable
    assert not any(r.resumable for r in (reasons.Failure.restarted(), reasons.Failure.abandoned()))


def test_the_word_types_name_exactly_the_words_of_the_reason_classes() -> None:
    """The Literal types other modules type their fields with hold each class's word and no other,
    so a reason class added with a new outcome or text status is a type error until they agree."""
    outcomes = {cls.outcome for cls in reasons.REASON_CLASSES if cls.outcome is not None}
    assert set(typing.get_args(reasons.StopOutcome)) == outcomes
    assert set(typing.get_args(records.Outcome)) == {"succeeded", *outcomes}
    texts = {cls.text_status for cls in reasons.REASON_CLASSES}
    assert set(typing.get_args(reasons.TextStatus)) == {"complete", *texts}
    tool_errors = set(typing.get_args(reasons.ToolErrorType))
    assert {cls.tool_error for cls in reasons.REASON_CLASSES} <= tool_errors


def test_every_stop_outcome_fails_a_sub_agents_task_call_with_its_own_type() -> None:
    """A task call whose sub-agent stopped on its own is failed with the type of that stop, never a
    catch-all "error": a new reason class brings its own row."""
    for cls in reasons.REASON_CLASSES:
        if cls.outcome is not None:
            assert reasons.tool_error_of_outcome(cls.outcome) == cls.tool_error
    assert reasons.tool_error_of_outcome("timed_out") == "timeout"
    assert reasons.tool_error_of_outcome("failed") == "error"
    with pytest.raises(KeyError):
        reasons.tool_error_of_outcome("succeeded")


def test_every_reason_type_is_known_to_the_tables_keyed_by_it() -> None:
    """The invariant checker and the tracing read a stop through the reason table: a new reason class
    is known to them, not a KeyError inside a check."""
    for cls in reasons.REASON_CLASSES:
        assert reasons.reason_class(cls.type) is cls
        assert isinstance(cls.is_failure, bool)
    assert reasons.reason_class("error") is reasons.Failure
    assert {cls.type for cls in reasons.REASON_CLASSES if cls.is_failure} == {"timeout", "error"}


def test_no_module_restates_the_reason_table() -> None:
    """Outcome and tool error words appear as tables only in the reason table: a dict or set of them
    elsewhere goes stale the day a reason class is added."""
    words = {"interrupted", "declined", "timed_out", "failed", "timeout"}
    sources = [p for folder in ("coordinator", "bench") for p in sorted((ROOT / folder).rglob("*.py"))]
    offenders = [
        f"{path}:{line}"
        for p in sources
        if (path := str(p.relative_to(ROOT))) not in _NOT_REASON_TABLES and p.name != "reasons.py"
        for line in _word_tables(p, words)
    ]
    assert offenders == []


_NOT_REASON_TABLES = {
    "coordinator/event_lines.py",  # colours of event words, one of which happens to be an outcome
}


def _word_tables(path: Path, words: set[str]) -> list[int]:
    """Lines of dict, set or tuple displays holding two or more of ``words`` as string constants."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Dict):
            items: list[ast.expr | None] = [*node.keys, *node.values]
        elif isinstance(node, ast.Set | ast.Tuple | ast.List):
            items = list(node.elts)
        else:
            continue
        held = {i.value for i in items if isinstance(i, ast.Constant) and i.value in words}
        if len(held) >= 2:
            found.append(node.lineno)
    return found
