"""An actor-based execution coordinator for agent servers, on trio, with typed stop reasons.

The public surface is ``open_coordinator`` and the ``Coordinator`` it yields, plus the public modules
``coordinator.reasons``, ``coordinator.errors`` and ``coordinator.events``, and ``coordinator.testing``
(chaos-testing a user's own tools and flows; also a pytest plugin).
"""

from __future__ import annotations

from coordinator._coordinator import Coordinator
from coordinator._open import open_coordinator
from coordinator.records import Session

__all__ = ["Coordinator", "Session", "open_coordinator"]
