"""A node with a planted bug, for ``test_node_chaos.py``: ``python -m tests.coordinator.chaos.unfenced_node
serve ...`` is ``coordinator serve`` with the fence check removed, so a node that wakes after its
claims were taken over writes, and starts tools, for turns another node runs."""

from __future__ import annotations

from coordinator.cli import main
from coordinator.store._reads import SqlReader


def _no_fence(self: SqlReader, session_id: str, owner: str, epoch: int) -> None:
    """The planted bug: every fenced write, and every tool's start, passes whoever holds the claim."""


SqlReader.fence = _no_fence  # type: ignore[method-assign]

if __name__ == "__main__":
    raise SystemExit(main())
