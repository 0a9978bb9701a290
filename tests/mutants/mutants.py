"""The stop bugs the suite must catch (issue 12, item 7): each one a small exact source edit, the rule
it breaks, and the fast tests that fail because of it (``design/mutants.md``)."""

from __future__ import annotations

import attrs


@attrs.frozen(kw_only=True)
class Edit:
    """Replace the lines ``old``, which must occur exactly once in ``path``, with the lines ``new``."""

    path: str
    old: tuple[str, ...]
    new: tuple[str, ...]

    @property
    def old_text(self) -> str:
        return "".join(line + "\n" for line in self.old)

    @property
    def new_text(self) -> str:
        return "".join(line + "\n" for line in self.new)


@attrs.frozen(kw_only=True)
class Mutant:
    """A planted bug: where it comes from, the rule it breaks, its edits, and the tests that catch it."""

    name: str
    origin: str  # "issue 12" (named there), "seed 000/002/003", or "added"
    rule: str
    edits: tuple[Edit, ...]
    tests: tuple[str, ...]


STOPS = "tests/actors/test_stops.py::"
SETTLEMENT = "tests/actors/test_settlement.py::"
WAIT = "tests/actors/test_wait.py::"
TOOL_CALL = "tests/actors/test_tool_call.py::"
HANDLE = "tests/actors/test_handle.py::"
DECISIONS = "tests/coordinator/test_decisions.py::"
PERMISSIONS = "tests/coordinator/test_permissions.py::"
STEERING = "tests/scenarios/test_steering.py::"
SOFT_STOPS = "tests/scenarios/test_queue_and_soft_stop.py::"
EDITED = "tests/scenarios/test_edited_approvals.py::"
STORE_FAULTS = "tests/faults/test_store_faults.py::"
POWER_CUTS = "tests/faults/test_power_cuts.py::"

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        name="always-before-deny",
        origin="issue 12",
        rule="a configured deny wins over a session rule added by always",
        edits=(
            Edit(
                path="coordinator/permissions.py",
                old=(
                    '    if config_rule is not None and config_rule.effect == "deny":',
                    '        return Verdict(effect="deny", rule=config_rule, source="configured")',
                    "    session_rule = _last_match(session_rules, action, resource)",
                    "    if session_rule is not None:",
                    '        return Verdict(effect=session_rule.effect, rule=session_rule, source="session")',
                ),
                new=(
                    "    session_rule = _last_match(session_rules, action, resource)",
                    "    if session_rule is not None:",
                    '        return Verdict(effect=session_rule.effect, rule=session_rule, source="session")',
                    '    if config_rule is not None and config_rule.effect == "deny":',
                    '        return Verdict(effect="deny", rule=config_rule, source="configured")',
                ),
            ),
        ),
        tests=(PERMISSIONS + "test_a_configured_deny_beats_a_session_rule_for_the_same_call",),
    ),
    Mutant(
        name="always-adds-no-rule",
        origin="issue 12",
        rule="always adds its session rule and answers the other pending requests it now allows",
        edits=(
            Edit(
                path="coordinator/decisions.py",
                old=(
                    "    tx.add_session_rule(request.session_id, permissions.always_rule(request.action, request.resource))",
                ),
                new=(),
            ),
        ),
        tests=(DECISIONS + "test_always_adds_its_session_rule_and_answers_the_pending_requests_it_allows",),
    ),
    Mutant(
        name="max-resumes-ignored",
        origin="issue 12",
        rule="a turn resumed max_resumes times is failed at the next start, never resumed again",
        edits=(
            Edit(
                path="coordinator/actors/stops.py",
                old=(
                    "    if row.resumes >= max_resumes:",
                    "        return Failure.resumes_exhausted(row.resumes)",
                    "    return None",
                ),
                new=("    return None",),
            ),
        ),
        tests=(
            STOPS + "test_a_turn_resumed_max_resumes_times_settles_failed_instead_of_resuming",
            STOPS + "test_a_turn_found_stopping_at_a_start_settles_as_its_stop",
        ),
    ),
    Mutant(
        name="reasonless-cancel-is-shutdown",
        origin="issue 12",
        rule="a cancellation without a reason settles as error (reasonless_cancel), never as shutdown",
        edits=(
            Edit(
                path="coordinator/actors/handle.py",
                old=("from coordinator.reasons import StopReason, reasonless_failure",),
                new=("from coordinator.reasons import Shutdown, StopReason, reasonless_failure",),
            ),
            Edit(
                path="coordinator/actors/handle.py",
                old=("            return reasonless_failure()",),
                new=("            return Shutdown.of_coordinator()",),
            ),
        ),
        tests=(HANDLE + "test_a_reasonless_cancellation_settles_as_error_and_is_logged",),
    ),
    Mutant(
        name="decline-declines-siblings",
        origin="issue 12",
        rule="a decline fails the declined call (and its execute call) declined, its siblings interrupted",
        edits=(
            Edit(
                path="coordinator/reasons.py",
                old=('        return self.tool_error if declined else "interrupted"',),
                new=("        return self.tool_error",),
            ),
        ),
        tests=(
            SETTLEMENT
            + "test_a_decline_fails_the_declined_call_and_its_script_declined_and_their_siblings_interrupted",
        ),
    ),
    Mutant(
        name="question-deadline-as-permission",
        origin="issue 12",
        rule="a question form's deadline stops the turn as a timeout of scope question",
        edits=(
            Edit(
                path="coordinator/actors/wait.py",
                old=("    await stops.decide(turn, Timeout.deadline(kind.scope, limit))",),
                new=('    await stops.decide(turn, Timeout.deadline("permission", limit))',),
            ),
        ),
        tests=(WAIT + "test_a_question_deadline_stops_the_turn_as_a_question_timeout",),
    ),
    Mutant(
        name="resume-reruns-finished-call",
        origin="issue 12",
        rule="a resume restores only unsettled calls: a call that had finished never runs again",
        edits=(
            Edit(
                path="coordinator/actors/settlement.py",
                old=(
                    "    for call in tx.tool_calls_of_turn(turn_id):",
                    "        if call.status != CallStatus.RUNNING:",
                    "            continue",
                    "        if restorable(tx, call):",
                ),
                new=(
                    "    for call in tx.tool_calls_of_turn(turn_id):",
                    "        if restorable(tx, call):",
                ),
            ),
        ),
        tests=(SETTLEMENT + "test_recovery_never_restores_a_call_that_had_finished",),
    ),
    Mutant(
        name="stopped-call-skips-sibling-revocations",
        origin="issue 12",
        rule="a stopped call fails only after every wait of the turn is revoked",
        edits=(
            Edit(
                path="coordinator/actors/tool_call.py",
                old=(
                    "    await turn.waits.settled()",
                    '    await turn.checkpoint("settle.tool")',
                ),
                new=('    await turn.checkpoint("settle.tool")',),
            ),
        ),
        tests=(TOOL_CALL + "test_a_stopped_call_fails_only_after_every_wait_of_the_turn_is_revoked",),
    ),
    Mutant(
        name="seed-000-decline-is-resumable",
        origin="seed 000",
        rule="a decline is a deliberate stop: its intent is durable, its claim released, never resumed",
        edits=(
            Edit(
                path="coordinator/reasons.py",
                old=(
                    '    outcome: ClassVar[StopOutcome | None] = "declined"',
                    "    resumable: ClassVar[bool] = False",
                ),
                new=(
                    '    outcome: ClassVar[StopOutcome | None] = "declined"',
                    "    resumable: ClassVar[bool] = True",
                ),
            ),
        ),
        tests=(DECISIONS + "test_a_reject_without_a_message_commits_a_declined_stop_that_never_resumes",),
    ),
    Mutant(
        name="seed-002-stopped-script-drops-its-partial",
        origin="seed 002",
        rule="a stopped execute call's partial result keeps its finished nested calls and its logs",
        edits=(
            Edit(
                path="coordinator/actors/tool_call.py",
                old=(
                    "    return Partial(logs=list(context.logs), calls=list(context.calls), progress=progress)",
                ),
                new=("    return Partial(logs=[], calls=[], progress=progress)",),
            ),
        ),
        tests=(TOOL_CALL + "test_a_stopped_script_call_keeps_its_finished_nested_calls_and_logs",),
    ),
    Mutant(
        name="seed-003-revoked-without-event",
        origin="seed 003",
        rule="a stopped permission wait revokes its request with one permission.revoked event",
        edits=(
            Edit(
                path="coordinator/actors/revocation.py",
                old=(
                    "    if tx.revoke_permission(request.id, reason):",
                    "        tx.emit(events.permission_revoked(request, reason))",
                ),
                new=("    tx.revoke_permission(request.id, reason)",),
            ),
        ),
        tests=(WAIT + "test_an_interrupted_permission_wait_revokes_its_request_with_one_event",),
    ),
    Mutant(
        name="first-reason-loses",
        origin="added",
        rule="first wins: a turn that already stops for a reason (a shutdown included) takes no other",
        edits=(
            Edit(
                path="coordinator/actors/stops.py",
                old=("    return live is None or (not live.settling and live.handle.reason is None)",),
                new=("    return live is None or not live.settling",),
            ),
        ),
        tests=(
            STOPS + "test_the_turns_own_stop_during_a_shutdown_decides_nothing",
            STOPS + "test_a_decision_of_this_process_during_a_shutdown_changes_nothing",
        ),
    ),
    Mutant(
        name="intent-after-cancel",
        origin="added",
        rule="intent before effect: a stop's intent is committed before any task is cancelled",
        edits=(
            Edit(
                path="coordinator/actors/stops.py",
                old=(
                    "        decided = functools.partial(decide_in, turn_id=turn.turn_id, reason=reason, live=turn)",
                    "        if await turn.journal.write(decided) is None:",
                    "            return False",
                ),
                new=(
                    "        stopped = turn.handle.stop(reason)",
                    "        await turn.journal.write(lambda tx: tx.record_stop_intent(turn.turn_id, reason))",
                    "        return stopped",
                ),
            ),
        ),
        tests=(STOPS + "test_the_intent_is_committed_before_the_turn_is_cancelled",),
    ),
    Mutant(
        name="step-before-its-calls",
        origin="added",
        rule="children settle before parents: a step fails after every call it left unsettled",
        edits=(
            Edit(
                path="coordinator/actors/settlement.py",
                old=(
                    "    fail_calls(tx, [c for c in calls if not kept(c)], reason, tools=tools)",
                    "    keep_partial_text(tx, session_id, turn_id, partial_text, reason)",
                    "    tx.settle_step(step_id, StepStatus.FAILED, reason)",
                    "    tx.emit(events.step_failed(session_id, turn_id, step_id, reason, partial_text or None))",
                ),
                new=(
                    "    keep_partial_text(tx, session_id, turn_id, partial_text, reason)",
                    "    tx.settle_step(step_id, StepStatus.FAILED, reason)",
                    "    tx.emit(events.step_failed(session_id, turn_id, step_id, reason, partial_text or None))",
                    "    fail_calls(tx, [c for c in calls if not kept(c)], reason, tools=tools)",
                ),
            ),
        ),
        tests=(SETTLEMENT + "test_a_failed_step_settles_after_every_call_it_left_unsettled",),
    ),
    Mutant(
        name="second-interrupt-answers-true",
        origin="added",
        rule="an interrupt of a turn that already stops, or settles, answers false and changes nothing",
        edits=(
            Edit(
                path="coordinator/decisions.py",
                old=(
                    "    if turn_id is None or stop is None:",
                    "        return False",
                    "    stops.apply(runtime, turn_id, stop)",
                ),
                new=(
                    "    if turn_id is None:",
                    "        return False",
                    "    if stop is not None:",
                    "        stops.apply(runtime, turn_id, stop)",
                ),
            ),
        ),
        tests=(DECISIONS + "test_an_interrupt_answers_false_when_the_turn_already_stops_or_settles",),
    ),
    Mutant(
        name="late-reply-not-found",
        origin="added",
        rule="a late reply is a 409 naming the request's settlement, never a 404",
        edits=(
            Edit(
                path="coordinator/decisions.py",
                old=(
                    "    if request.status != PermissionStatus.PENDING:",
                    "        raise errors.PermissionAlreadySettled(",
                ),
                new=(
                    "    if request.status != PermissionStatus.PENDING:",
                    "        raise errors.PermissionNotFound(message=request_id, request_id=request_id)",
                    "        raise errors.PermissionAlreadySettled(",
                ),
            ),
        ),
        tests=(DECISIONS + "test_a_late_reply_is_refused_with_the_requests_settlement",),
    ),
    Mutant(
        name="reject-with-message-stops",
        origin="added",
        rule="a reject with a message is feedback to the model: it stops nothing",
        edits=(
            Edit(
                path="coordinator/decisions.py",
                old=('        if decision == "reject" and message is None:',),
                new=('        if decision == "reject":',),
            ),
        ),
        tests=(DECISIONS + "test_a_reject_with_a_message_is_feedback_and_stops_nothing",),
    ),
    Mutant(
        name="steer-dropped-at-the-stop",
        origin="added",
        rule="a steer its turn never reached becomes a queued turn when the turn settles: never lost",
        edits=(
            Edit(
                path="coordinator/actors/settlement.py",
                old=("    steers.queue_pending(tx, turn_id)",),
                new=("    pass",),
            ),
        ),
        tests=(STEERING + "test_a_steer_then_an_interrupt_becomes_the_next_turn[sqlite]",),
    ),
    Mutant(
        name="soft-stop-past-its-boundary",
        origin="added",
        rule="a soft stop takes effect at the turn's next step boundary, before its next model request",
        edits=(
            Edit(
                path="coordinator/actors/step.py",
                old=("        if boundary.soft_stop is not None:",),
                new=("        if False:",),
            ),
        ),
        tests=(SOFT_STOPS + "test_a_soft_stop_lets_the_step_finish_then_stops[sqlite]",),
    ),
    Mutant(
        name="edited-input-ignored",
        origin="added",
        rule="a call approved with an edited input runs with that input, not the model's",
        edits=(
            Edit(
                path="coordinator/actors/tool_call.py",
                old=(
                    "            tool_input = call.input if progress.edited_input is None else progress.edited_input",
                ),
                new=("            tool_input = call.input",),
            ),
        ),
        tests=(EDITED + "test_an_approval_with_an_edited_input_runs_it_and_tells_the_model[sqlite]",),
    ),
    Mutant(
        name="acknowledged-before-synced",
        origin="issue 39",
        rule="nothing is acknowledged before the commit behind it survives a power cut",
        edits=(
            Edit(
                path="coordinator/store/sqlite/_sync_process.py",
                old=("            os.fdatasync(fd)",),
                new=("            pass",),
            ),
        ),
        tests=(POWER_CUTS + "test_power_cuts_lose_nothing_acknowledged",),
    ),
    Mutant(
        name="synced-again-without-rewriting",
        origin="issue 39",
        rule="after a failed sync the log is written again before a sync is trusted",
        edits=(
            Edit(
                path="coordinator/store/sqlite/_log_rewrite.py",
                old=("        os.pwrite(fd, data[offset : offset + CHUNK_BYTES], offset)",),
                new=("        pass",),
            ),
        ),
        tests=(
            STORE_FAULTS
            + "test_after_a_failed_sync_the_server_writes_again_and_what_it_acknowledges_survives_a_cut",
        ),
    ),
)
