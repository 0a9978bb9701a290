"""The permission-wait actor: owns one pending permission request until it is replied or revoked.

It returns the person's decision. It never returns a stop: a ``reject`` without a message is a stop
decided by the reply path (committed with the reply, then the turn is cancelled), and a deadline is a
stop this actor decides itself (``Timeout(scope="permission")``). Either way the actor leaves through
its cleanup, which revokes the request with the turn's reason (``permission.revoked``) unless the reason
is a shutdown: then the request stays pending in the store, and the next start restores it with the
same id.
"""

from __future__ import annotations

import attrs
import structlog
import trio

from actors import stops
from actors.context import SETTLE_SECONDS, TurnScope
from actors.handle import ActorHandle
from coordinator import clock, events, tracing
from coordinator.clock import now_rfc3339
from coordinator.ids import new_id
from coordinator.reasons import Declined, Timeout
from coordinator.records import Decision, PermissionRequest

log = structlog.get_logger()


@attrs.frozen
class Replied:
    """The person's answer: ``once``/``always`` let the call run; ``reject`` with a message is feedback."""

    decision: Decision
    message: str | None = None


async def run(
    turn: TurnScope,
    parent: ActorHandle,
    *,
    call_id: str,
    action: str,
    resource: str,
    restore: PermissionRequest | None = None,
    restorable: bool,
) -> Replied:
    """Ask (or, after a restart, ask again) whether a tool call may run, and wait for the answer.

    **Cancellation:** the request is revoked with the turn's reason (one ``permission.revoked``), or kept
    pending for a shutdown when ``restorable`` (a top-level call, which the next start can restore);
    in a shielded scope bounded by ``SETTLE_SECONDS``.

    **Raises:** ``Fenced`` if the claim was taken over.
    """
    if restore is not None and restore.status == "replied":
        # Replied while no wait was live (the turn suspended, or its owner dead): applied as it is,
        # never asked again.
        turn.forget_unopened_wait(call_id)
        return await _already_replied(turn, restore)
    request, deadline = await _open(turn, call_id=call_id, action=action, resource=resource, restore=restore)
    handle = parent.child("permission_wait", request.id)
    waiter = turn.runtime.waits.expect(request.id)
    with turn.runtime.tracing.permission_wait(request, handle) as span, turn.wait_opened(call_id):
        try:
            settled = turn.runtime.store.read.get_permission(request.id)
            if settled is not None and settled.status == "replied" and settled.decision is not None:
                replied = await _already_replied(turn, settled)
                span.set(tracing.PERMISSION_DECISION, replied.decision)
                return replied
            with trio.move_on_at(deadline) as timer:
                await turn.checkpoint("permission.wait")
                answer: Replied = await waiter.wait()
                span.set(tracing.PERMISSION_DECISION, answer.decision)
                return answer
            assert timer.cancelled_caught
            limit = turn.runtime.config.timeouts.permission
            await stops.decide(turn, Timeout.deadline("permission", limit))
            await trio.lowlevel.checkpoint()
            raise AssertionError("a stopped turn did not cancel its permission wait")
        except BaseException:
            with (
                turn.settled_by_its_call_unless_done(call_id),
                trio.move_on_after(SETTLE_SECONDS, shield=True),
            ):
                await _settle(turn, handle, request, restorable)
            raise
        finally:
            turn.runtime.waits.forget(request.id)


async def _open(
    turn: TurnScope, *, call_id: str, action: str, resource: str, restore: PermissionRequest | None
) -> tuple[PermissionRequest, float]:
    """Store the pending request and publish ``permission.asked`` (``restored`` after a restart)."""
    limit = turn.runtime.config.timeouts.limit("permission")
    async with turn.write() as tx:
        if restore is None:
            request = PermissionRequest(
                id=new_id("per"),
                session_id=turn.session_id,
                call_id=call_id,
                action=action,
                resource=resource,
                status="pending",
                created_at=now_rfc3339(),
            )
            deadline_at = None if limit is None else clock.wall() + limit
            tx.insert_permission(request, turn.turn_id, deadline_at)
            tx.emit(events.permission_asked(request, restored=False))
        else:
            request = restore
            # A restored wait keeps its original deadline, measured from when it was asked.
            wait = tx.permission_wait_row(request.id)
            deadline_at = None if wait is None else wait.deadline_at
            tx.emit(events.permission_asked(request, restored=True))
    return request, clock.trio_deadline(deadline_at)


async def _already_replied(turn: TurnScope, request: PermissionRequest) -> Replied:
    """A reply that landed while no wait was live (before this restore, or before this wait opened)."""
    wait = turn.runtime.store.read.permission_wait_row(request.id)
    message = None if wait is None else wait.message
    assert request.decision is not None
    if request.decision == "reject" and message is None:
        await stops.decide(turn, Declined.by_permission(request.call_id))
        await trio.lowlevel.checkpoint()
    return Replied(decision=request.decision, message=message)


async def _settle(turn: TurnScope, handle: ActorHandle, request: PermissionRequest, restorable: bool) -> None:
    reason = handle.reason_or_failure()
    if reason.resumable and restorable:
        log.info("permission_kept", request_id=request.id, reason=reason.type)
        return
    async with turn.write() as tx:
        if tx.revoke_permission(request.id, reason):
            revoked = tx.get_permission(request.id)
            assert revoked is not None
            tx.emit(events.permission_revoked(revoked, reason))
