"""A node with a planted bug, for ``test_node_chaos.py``: ``python -m tests.coordinator.chaos.unfenced_node
serve ...`` is ``coordinator serve`` with the fence check removed, so a node that wakes after its
claims were taken over writes, and starts tools, for turns another node runs."""

from __future__ import annotations

from coordinator.cli import main
from coordinator.store._reads import SqlReader
from coordinator.store.postgres._connection import PsycopgConnection


def _no_fence(self: SqlReader, session_id: str, owner: str, epoch: int) -> None:
    """The planted bug: every fenced write, and every tool's start, passes whoever holds the claim."""


def _lock_without_fence(self: PsycopgConnection, session_id: str, owner: str, epoch: int) -> None:
    """The same in PostgreSQL's one-statement fence: the session's lock is taken, the claim not checked."""
    self.serialize(session_id)


SqlReader.fence = _no_fence  # type: ignore[method-assign]
PsycopgConnection.fence = _lock_without_fence  # type: ignore[method-assign]

if __name__ == "__main__":
    raise SystemExit(main())
