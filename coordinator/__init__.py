"""An actor-based execution coordinator for agent servers, on trio, with typed stop reasons.

The public surface is ``open_coordinator`` and the ``Coordinator`` it yields, plus the public modules
``coordinator.reasons``, ``coordinator.errors`` and ``coordinator.events``, and ``coordinator.testing``
(chaos-testing a user's own tools and flows; also a pytest plugin).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator._coordinator import Coordinator, open_coordinator
    from coordinator.records import Session

__all__ = ["Coordinator", "Session", "open_coordinator"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the actors import coordinator's own modules, so importing the embedding
    # API eagerly here would make ``import actors.session`` (before ``coordinator``) circular.
    if name in ("Coordinator", "open_coordinator"):
        from coordinator import _coordinator

        return getattr(_coordinator, name)
    if name == "Session":
        from coordinator.records import Session

        return Session
    raise AttributeError(f"module 'coordinator' has no attribute {name!r}")
