"""The stop arbiter (``coordinator/actors/stops.py``): first wins, the settling cut-off, intent before effect, and
what a shutdown may and may not override, on a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from coordinator import errors
from coordinator.actors import session, stops
from coordinator.actors.context import Takeover
from coordinator.config import Config
from coordinator.errors import ToolFailure
from coordinator.reasons import Declined, Failure, Interrupt, Shutdown, Timeout
from tests.actors.turn_harness import OWNER, open_harness


def stored_status(harness: object) -> tuple[str, object]:
    row = harness.store.read.get_turn("turn_1")  # type: ignore[attr-defined]
    assert row is not None
    return row.status, row.stop_reason


async def test_a_turn_stops_for_the_first_reason_decided(tmp_path: Path) -> None:
    """A later stop changes nothing: neither the live reason nor the stored intent."""
    async with open_harness(tmp_path) as harness:
        turn = harness.live()
        assert await stops.decide(turn, Timeout.deadline("turn", 5))
        assert not await stops.decide(turn, Failure.too_many_steps(100))
        assert turn.handle.reason == Timeout(scope="turn", after=5)
        assert turn.handle.scope.cancel_called
        assert stored_status(harness) == ("stopping", Timeout(scope="turn", after=5))


async def test_the_intent_is_committed_before_the_turn_is_cancelled(tmp_path: Path) -> None:
    """If the intent cannot be committed, nothing is cancelled: a crash can never resume a stop that
    was already acted on."""
    async with open_harness(tmp_path) as harness:
        turn = harness.live()

        def failing_disk(tx: object) -> None:
            raise errors.StoreError("injected")

        harness.store.set_commit_hook(failing_disk)
        with pytest.raises(errors.StoreError):
            await stops.decide(turn, Declined.by_permission("call_1"))
        assert turn.handle.reason is None
        assert not turn.handle.scope.cancel_called
        assert stored_status(harness) == ("running", None)


async def test_a_shutdown_records_no_intent(tmp_path: Path) -> None:
    """A shutdown suspends; it decides nothing durable, so the next start resumes the turn."""
    async with open_harness(tmp_path) as harness:
        turn = harness.live()
        stops.shut_down(turn)
        assert turn.handle.reason == Shutdown()
        assert stored_status(harness) == ("running", None)


async def test_the_turns_own_stop_during_a_shutdown_decides_nothing(tmp_path: Path) -> None:
    """A deadline firing while a shutdown tears the actors down must not turn the suspension into a
    timeout (chaos F13)."""
    async with open_harness(tmp_path) as harness:
        turn = harness.live()
        stops.shut_down(turn)
        assert not await stops.decide(turn, Timeout.deadline("permission", 3))
        assert stored_status(harness) == ("running", None)
        async with harness.store.transaction() as tx:
            assert stops.settle_reason(tx, "turn_1", Shutdown()) == Shutdown()


async def test_a_decision_of_this_process_during_a_shutdown_changes_nothing(tmp_path: Path) -> None:
    """The live actors are suspending and keep their waits: an interrupt taken now would end the turn
    with waits revoked after calls failed (chaos seed 0, runs 919 and 1558)."""
    async with open_harness(tmp_path) as harness:
        turn = harness.live()
        stops.shut_down(turn)
        async with harness.store.transaction() as tx:
            assert stops.decide_in(tx, "turn_1", Interrupt.by_person("api"), live=turn) is None
        assert stored_status(harness) == ("running", None)


async def test_a_decline_committed_elsewhere_during_a_shutdown_wins_at_the_settlement(tmp_path: Path) -> None:
    """A reject committed by another process while this one suspends the turn ends the turn
    declined: a decline is never resumed."""
    async with open_harness(tmp_path) as harness:
        turn = harness.live()
        stops.shut_down(turn)
        declined = Declined.by_permission("call_1")
        async with harness.store.transaction() as tx:
            # Another process runs no actor of the turn: only the store's compare-and-set decides.
            assert stops.decide_in(tx, "turn_1", declined, live=None) == declined
        assert turn.handle.reason == Shutdown()  # the live actors go on suspending
        async with harness.store.transaction() as tx:
            assert stops.settle_reason(tx, "turn_1", Shutdown()) == declined


async def test_nothing_is_decided_once_the_turn_settles(tmp_path: Path) -> None:
    """The settling cut-off: a late interrupt answers false and the outcome does not change."""
    async with open_harness(tmp_path) as harness:
        turn = harness.live()
        turn.settling = True
        assert not await stops.decide(turn, Timeout.deadline("turn", 1))
        async with harness.store.transaction() as tx:
            assert stops.decide_in(tx, "turn_1", Interrupt.by_person("api"), live=turn) is None
        assert stored_status(harness) == ("running", None)


async def test_of_two_decisions_committed_for_a_turn_running_elsewhere_the_first_wins(tmp_path: Path) -> None:
    """No live turn here: the store's compare-and-set decides, so exactly one of two stops wins."""
    async with open_harness(tmp_path) as harness:
        first, second = Interrupt.by_person("api"), Declined.by_form("call_2")
        async with harness.store.transaction() as tx:
            assert stops.decide_in(tx, "turn_1", first, live=None) == first
        async with harness.store.transaction() as tx:
            assert stops.decide_in(tx, "turn_1", second, live=None) is None
        assert stored_status(harness) == ("stopping", first)


async def test_a_stop_committed_elsewhere_is_applied_to_the_live_turn(tmp_path: Path) -> None:
    """The owner's watch applies another process's committed decision, with its typed reason."""
    async with open_harness(tmp_path) as harness:
        async with harness.store.transaction() as tx:
            stops.decide_in(tx, "turn_1", Interrupt.by_person("api"), live=None)
        turn = harness.live()
        stops.apply_committed(turn, harness.store.read.get_turn("turn_1"))
        assert turn.handle.reason == Interrupt(by="api")
        assert turn.handle.scope.cancel_called


async def test_an_interrupt_committed_as_the_last_step_finished_wins_over_success(tmp_path: Path) -> None:
    """The turn's actors finished, but the interrupt's intent is durable: it ends interrupted."""
    async with open_harness(tmp_path) as harness:
        async with harness.store.transaction() as tx:
            stops.decide_in(tx, "turn_1", Interrupt.by_person("embedder"), live=None)
        async with harness.store.transaction() as tx:
            assert stops.settle_reason(tx, "turn_1", None) == Interrupt(by="embedder")


async def test_a_turn_found_stopping_at_a_start_settles_as_its_stop(tmp_path: Path) -> None:
    """A stop decided before a crash is never resumed; max_resumes fails a turn instead of resuming."""
    async with open_harness(tmp_path) as harness:
        row = harness.store.read.get_turn("turn_1")
        assert row is not None
        assert stops.recovered(row, max_resumes=5) is None
        assert stops.recovered(row, max_resumes=0) == Failure.resumes_exhausted(0)
        async with harness.store.transaction() as tx:
            stops.decide_in(tx, "turn_1", Declined.by_form("call_3"), live=None)
        stopping = harness.store.read.get_turn("turn_1")
        assert stopping is not None
        assert stops.recovered(stopping, max_resumes=0) == Declined(via="question", call_id="call_3")


async def test_a_turn_resumed_max_resumes_times_settles_failed_instead_of_resuming(tmp_path: Path) -> None:
    """A turn that keeps crashing its coordinator must not be resumed forever: at the start after its
    last allowed resume it is failed, asking the model nothing, and its claim is released."""
    config = Config(base_dir=tmp_path).with_overrides(max_resumes=2)
    async with open_harness(tmp_path, config=config) as harness:
        async with harness.store.transaction() as tx:
            assert tx.mark_resumed("turn_1", "crash") and tx.mark_resumed("turn_1", "crash")
        harness.events.clear()
        row = harness.store.read.get_turn("turn_1")
        assert row is not None and row.resumes == 2
        crash = Takeover(previous_owner=OWNER, after="crash")
        await session.run_turn(harness.runtime, harness.turn, row, crash)
        exhausted = Failure.resumes_exhausted(2)
        assert [(e.type, e.payload.get("reason"), e.payload.get("outcome")) for e in harness.events] == [
            ("session.execution.failed", {"type": "error", "message": exhausted.message}, None),
            ("session.idle", None, "failed"),
        ]
        settled = harness.store.read.get_turn("turn_1")
        assert settled is not None
        assert (settled.status, settled.outcome, settled.resumes) == ("settled", "failed", 2)
        claim = harness.store.read.get_claim("ses_1")
        assert claim is not None and claim.state == "released"


async def test_an_unexpected_exception_stops_the_turn_with_a_typed_failure(tmp_path: Path) -> None:
    """An actor's crash becomes the turn's reason before siblings are cancelled; a tool's own failure
    is no stop."""
    async with open_harness(tmp_path) as harness:
        turn = harness.live()
        with pytest.raises(ToolFailure), stops.failing_on_error(turn, "a tool"):
            raise ToolFailure(type="error", message="the tool's own")
        assert turn.handle.reason is None
        with pytest.raises(KeyError), stops.failing_on_error(turn, "step s"):
            raise KeyError("boom")
        assert turn.handle.reason == Failure(message="internal error in step s: KeyError: 'boom'")
        await trio.lowlevel.checkpoint()


async def test_a_stop_committed_elsewhere_wins_over_a_local_failure_that_recorded_no_intent(
    tmp_path: Path,
) -> None:
    """Another process committed an interrupt (and answered its client ``true``) before this one
    applied it, and meanwhile an actor here failed: the durable decision is the turn's reason."""
    async with open_harness(tmp_path) as harness:
        turn = harness.live()
        async with harness.store.transaction() as tx:
            stops.decide_in(tx, "turn_1", Interrupt.by_person("api"), live=None)
        with pytest.raises(RuntimeError), stops.failing_on_error(turn, "a step"):
            raise RuntimeError("boom")
        assert turn.handle.reason == Failure.internal(RuntimeError("boom"), "a step")
        async with harness.store.transaction() as tx:
            assert stops.settle_reason(tx, "turn_1", turn.handle.reason) == Interrupt(by="api")


async def test_a_lost_claim_stops_the_turn_as_claim_lost_and_lets_fenced_reach_the_session(
    tmp_path: Path,
) -> None:
    """A node that wakes after a takeover finds its writes fenced, often inside a nursery (a group):
    the siblings must be torn down with a typed reason (no reasonless cancellation), not as an
    internal error, and Fenced must still reach the session actor, which leaves the turn."""
    async with open_harness(tmp_path) as harness:
        turn = harness.live()
        fenced = errors.Fenced(session_id="ses_1", epoch=1)
        with pytest.raises(ExceptionGroup), stops.failing_on_error(turn, "a tool call"):
            raise ExceptionGroup("a nursery", [fenced])
        assert turn.handle.reason == Failure.claim_lost()
        assert turn.handle.scope.cancel_called
        assert stored_status(harness) == ("running", None)  # nothing decided: the new owner's turn
