"""Revoking a pending wait on a person: the one place a permission request or a question form is
revoked in the store, with its event.

Every path that revokes goes through here: a live wait's own cleanup (its kind's ``revoke``), a
call's settlement (``settlement.revoke_waits_of_call``) and a turn's sweep (``settlement.sweep``).
Each runs inside the caller's transaction and never awaits. The store's update is a compare-and-set
on a pending wait, so a wait answered or revoked already is left as it is and gets no second event.
"""

from __future__ import annotations

from coordinator import events
from coordinator.reasons import StopReason
from coordinator.records import Form, PermissionRequest
from coordinator.statuses import FormStatus
from coordinator.store import Transaction


def revoke_permission(tx: Transaction, request: PermissionRequest, reason: StopReason) -> None:
    """Revoke ``request`` with ``reason`` if it is still pending, with one ``permission.revoked``."""
    if tx.revoke_permission(request.id, reason):
        tx.emit(events.permission_revoked(request, reason))


def revoke_form(tx: Transaction, form: Form, reason: StopReason) -> None:
    """Revoke ``form`` with ``reason`` if it is still pending, with one ``form.revoked``."""
    if tx.settle_form(form.id, FormStatus.REVOKED, reason=reason):
        tx.emit(events.form_revoked(form, reason))
