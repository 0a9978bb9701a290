"""The user's scenario (``coordinator.testing.run_chaos``): their program, driving the first coordinator."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import trio

from coordinator import Coordinator, errors
from coordinator.chaos.record import RunRecord
from coordinator.chaos.setup import Scenario

# What a scenario may meet because of an injected fault: it ends there, and the run goes on.
CUT_SHORT = (
    errors.StoreError,
    errors.CoordinatorClosed,
    errors.PermissionAlreadySettled,
    errors.FormAlreadySettled,
)
SCENARIO_PATIENCE = 2.0  # trio seconds a scenario may go on once every turn it made has settled


@attrs.define(eq=False)
class ScenarioRun:
    """The user's scenario in the first phase; cancelled when a shutdown or a crash is applied."""

    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    done: bool = False


async def run_scenario(
    scenario: Scenario, coord: Coordinator, run: ScenarioRun, record: RunRecord, tick: Callable[[], None]
) -> None:
    """Run the user's scenario until it returns, is cut short by a fault, or ``run.scope`` is cancelled.

    An exception a fault explains (``CUT_SHORT``) ends it quietly; any other is a violation.
    """
    with run.scope:
        try:
            await scenario(coord)
        except Exception as exc:
            leaves = _leaves(exc)
            if not all(isinstance(leaf, CUT_SHORT) for leaf in leaves):
                culprit = next(leaf for leaf in leaves if not isinstance(leaf, CUT_SHORT))
                record.violate(0, f"the scenario raised {type(culprit).__name__}: {culprit}")
        finally:
            run.done = True
            tick()  # wake the driver: the phase may be over


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]
