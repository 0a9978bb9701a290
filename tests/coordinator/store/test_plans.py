"""The SQLite reads on a turn's and a stop's path find their rows by an index and need no sort.

A scan grows with everything the file ever held (a stop once read its turn's pending waits by
scanning every request ever made), and a sort in a temporary B-tree cost SQLite four times the read
itself on a turn's path (design/benchmarks.md). Each read's statements are captured as the store runs
them and checked with ``EXPLAIN QUERY PLAN``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import pytest

from coordinator.store import Reader, open_store
from coordinator.store.sqlite._store import SqliteStore

READS: dict[str, Callable[[Reader], Any]] = {
    "session_exists": lambda read: read.session_exists("s1"),
    "next_turn": lambda read: read.next_turn("s1"),
    "interruptible_turn": lambda read: read.interruptible_turn("s1"),
    "get_turn": lambda read: read.get_turn("t1"),
    "running_steps": lambda read: read.running_steps("t1"),
    "tool_calls_of_turn": lambda read: read.tool_calls_of_turn("t1"),
    "running_calls_of_turn": lambda read: read.running_calls_of_turn("t1"),
    "history_after": lambda read: read.history_after("s1", 3),
    "pending_permissions of a turn": lambda read: read.pending_permissions(turn_id="t1"),
    "pending_forms of a turn": lambda read: read.pending_forms(turn_id="t1"),
    "session_rules": lambda read: read.session_rules("s1"),
}


# history_after sorts each message's few parts (``ORDER BY m.ord, p.ord``, the messages coming in
# index order): measured without that sort, the read cost the same on a turn's path.
SORTS_KEPT = {"history_after"}


@contextmanager
def _statements(store: SqliteStore) -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
    """Every statement the store's reads run meanwhile, with its arguments."""
    seen: list[tuple[str, tuple[Any, ...]]] = []
    connection = store._connection
    run_all = connection.all

    def capturing(sql: str, args: Any = ()) -> list[tuple[Any, ...]]:
        seen.append((sql, tuple(args)))
        return run_all(sql, args)

    connection.all = capturing  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        connection.all = run_all  # type: ignore[method-assign]


@pytest.mark.parametrize("read", sorted(READS))
def test_a_read_on_the_path_of_a_turn_or_a_stop_uses_an_index_and_no_sort(tmp_path: Path, read: str) -> None:
    with open_store(str(tmp_path / "plans.sqlite")) as store:
        with _statements(store) as seen:
            READS[read](store.read)
        assert seen, read
        for sql, args in seen:
            plan = [row[-1] for row in store._db.execute("EXPLAIN QUERY PLAN " + sql, args)]
            assert not [step for step in plan if step.startswith("SCAN")], (sql, plan)
            if read not in SORTS_KEPT:
                assert not [step for step in plan if "TEMP B-TREE" in step], (sql, plan)


def test_the_connection_keeps_a_statements_plan_whatever_is_bound_to_it(tmp_path: Path) -> None:
    # Without the query planner's stability guarantee, SQLite prepares a statement again at each new
    # binding once it compared a bound value in planning it: every ``SELECT ord ... ORDER BY ord
    # DESC LIMIT 1`` and history read of a turn did (design/benchmarks.md, issue 19).
    with open_store(str(tmp_path / "plans.sqlite")) as store:
        assert store._db.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, -1) == 1
