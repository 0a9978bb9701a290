"""What people decide (``coordinator/decisions.py``): a reject, an ``always``, a late reply and an
interrupt, each against a turn on a real SQLite file, its stop committed and applied by the arbiter."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator import decisions
from coordinator.actors import settlement, stops, wait
from coordinator.config import Config
from coordinator.errors import PermissionAlreadySettled, PermissionNotFound
from coordinator.permissions import always_rule
from coordinator.reasons import Declined, Failure, Interrupt
from coordinator.records import PermissionRequest, Rule
from tests.actors.turn_harness import AT, Harness, call_row, open_harness, start_step

ASK_SHELL = (Rule(action="*", resource="*", effect="allow"), Rule(action="shell", resource="*", effect="ask"))


async def _asked(harness: Harness, *asks: tuple[str, str, str]) -> None:
    """A step whose shell calls each wait on a pending permission request: (request id, call id,
    command). No actor runs them: the decision is what is tested."""
    await start_step(harness, *(call_row(c, "shell", input={"command": cmd}) for _, c, cmd in asks))
    async with harness.store.transaction() as tx:
        for request_id, call_id, command in asks:
            request = PermissionRequest(
                id=request_id,
                session_id="ses_1",
                call_id=call_id,
                action="shell",
                resource=command,
                status="pending",
                created_at=AT,
            )
            tx.insert_permission(request, "turn_1", None)
    harness.events.clear()


def _stored_turn(harness: Harness) -> tuple[str, object]:
    row = harness.store.read.get_turn("turn_1")
    assert row is not None
    return row.status, row.stop_reason


async def test_a_reject_without_a_message_commits_a_declined_stop_that_never_resumes(tmp_path: Path) -> None:
    """Seed 000: a decline is the person's deliberate stop, so its intent is durable before the turn is
    cancelled, a start settles it as declined instead of resuming it, and its claim is released."""
    async with open_harness(tmp_path) as harness:
        turn = harness.live()
        await _asked(harness, ("per_1", "c1", "rm -rf x"))
        replied = await decisions.reply_permission(harness.runtime, "ses_1", "per_1", "reject", None)
        assert (replied.status, replied.decision) == ("replied", "reject")
        declined = Declined(via="permission", call_id="c1")
        assert turn.handle.reason == declined
        assert turn.handle.scope.cancel_called
        assert _stored_turn(harness) == ("stopping", declined)
        row = harness.store.read.get_turn("turn_1")
        assert row is not None and stops.recovered(row, max_resumes=5) == declined
        async with harness.store.transaction() as tx:
            settlement.end_turn(tx, "ses_1", "turn_1", declined)
        assert [(e.type, e.payload.get("reason"), e.payload.get("outcome")) for e in harness.events] == [
            ("permission.replied", None, None),
            (
                "session.execution.interrupted",
                {"type": "declined", "via": "permission", "call_id": "c1"},
                None,
            ),
            ("session.idle", None, "declined"),
        ]
        claim = harness.store.read.get_claim("ses_1")
        assert claim is not None and claim.state == "released"


async def test_a_reject_with_a_message_is_feedback_and_stops_nothing(tmp_path: Path) -> None:
    """The message goes to the model as the call's failure and the turn goes on: neither the live
    turn nor the store holds a stop."""
    async with open_harness(tmp_path) as harness:
        turn = harness.live()
        await _asked(harness, ("per_1", "c1", "rm -rf x"))
        waiter = harness.runtime.waits.expect("per_1")
        await decisions.reply_permission(harness.runtime, "ses_1", "per_1", "reject", "use trash instead")
        assert waiter.value == wait.Replied(decision="reject", message="use trash instead")
        assert turn.handle.reason is None
        assert not turn.handle.scope.cancel_called
        assert _stored_turn(harness) == ("running", None)
        assert harness.types() == ["permission.replied"]


async def test_always_adds_its_session_rule_and_answers_the_pending_requests_it_allows(
    tmp_path: Path,
) -> None:
    """``always`` must not ask again for what it allowed: its rule is stored for the session, and every
    other pending request the rule now allows is answered with it, each with its own event."""
    config = Config(base_dir=tmp_path, permission=ASK_SHELL)
    async with open_harness(tmp_path, config=config) as harness:
        harness.live()
        await _asked(harness, ("per_1", "c1", "ls"), ("per_2", "c2", "ls"), ("per_3", "c3", "rm x"))
        waiters = {request_id: harness.runtime.waits.expect(request_id) for request_id in ("per_2", "per_3")}
        await decisions.reply_permission(harness.runtime, "ses_1", "per_1", "always", None)
        assert harness.store.read.session_rules("ses_1") == [always_rule("shell", "ls")]
        assert [(e.type, e.payload["request_id"], e.payload["decision"]) for e in harness.events] == [
            ("permission.replied", "per_1", "always"),
            ("permission.replied", "per_2", "always"),
        ]
        assert waiters["per_2"].value == wait.Replied(decision="always", message=None)
        assert waiters["per_3"].value is None
        [pending] = harness.store.read.pending_permissions(session_id="ses_1")
        assert pending.id == "per_3"


async def test_a_late_reply_is_refused_with_the_requests_settlement(tmp_path: Path) -> None:
    """Seed 003's client: a reply to a request already revoked or replied to is a 409 naming how it
    was settled, so the client drops its dialog; only an id never issued here is a 404."""
    async with open_harness(tmp_path) as harness:
        await _asked(harness, ("per_1", "c1", "ls"), ("per_2", "c2", "ls"))
        await decisions.reply_permission(harness.runtime, "ses_1", "per_2", "once", None)
        async with harness.store.transaction() as tx:
            settlement.revoke_waits_of_call(tx, "ses_1", "c1", Interrupt.by_person("api"))
        with pytest.raises(PermissionAlreadySettled) as revoked:
            await decisions.reply_permission(harness.runtime, "ses_1", "per_1", "once", None)
        assert (revoked.value.status, revoked.value.request_id) == (409, "per_1")
        assert revoked.value.settlement == {"status": "revoked", "reason": {"type": "interrupt", "by": "api"}}
        with pytest.raises(PermissionAlreadySettled) as replied:
            await decisions.reply_permission(harness.runtime, "ses_1", "per_2", "reject", None)
        assert replied.value.settlement == {"status": "replied", "decision": "once"}
        with pytest.raises(PermissionNotFound) as unknown:
            await decisions.reply_permission(harness.runtime, "ses_1", "per_nope", "once", None)
        assert unknown.value.status == 404
        assert _stored_turn(harness) == ("running", None)


# How the turn already stops, and what it holds then (live reason, stored status and intent).
ALREADY = {
    "interrupted": (Interrupt(by="api"), ("stopping", Interrupt(by="api"))),
    "failed": (Failure(message="internal error in step s: KeyError: 'boom'"), ("running", None)),
    "settling": (None, ("running", None)),
}


@pytest.mark.parametrize("already", list(ALREADY))
async def test_an_interrupt_answers_false_when_the_turn_already_stops_or_settles(
    tmp_path: Path, already: str
) -> None:
    """First wins: a turn stopping for an earlier reason (an interrupt; its own failure, which records
    no intent) or settling takes no other stop, and the caller learns that nothing was stopped."""
    async with open_harness(tmp_path) as harness:
        turn = harness.live()
        if already == "interrupted":
            assert await decisions.interrupt(harness.runtime, "ses_1", "api") is True
        elif already == "failed":
            with pytest.raises(KeyError), stops.failing_on_error(turn, "step s"):
                raise KeyError("boom")
        else:
            turn.settling = True
        assert await decisions.interrupt(harness.runtime, "ses_1", "embedder") is False
        assert (turn.handle.reason, _stored_turn(harness)) == ALREADY[already]
