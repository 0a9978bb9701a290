"""Every stop reason is built by a named constructor in ``coordinator/reasons.py``: one place names
each cause, so a newcomer can find who decides it and the next cause cannot slip in unnamed."""

from __future__ import annotations

import ast
from pathlib import Path

from coordinator import reasons

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
