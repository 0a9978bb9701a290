"""Core bugs the chaos campaign found (``coordinator/chaos/known.py``), each as a minimal failing scenario.

Each was written as ``xfail(strict=True)`` when found, and lost its marker with the fix; it now guards
against the bug coming back. A stop is injected at an
exact await point through the coordinator's own checkpoints (``coordinator/checkpoints.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from coordinator import decisions, errors
from coordinator.chaos import crash
from coordinator.config import Config
from coordinator.reasons import REASONLESS, Shutdown
from coordinator.records import Rule
from coordinator.store import Reader, Store
from coordinator.tools.base import Tool
from tests.conftest import running
from tests.scenarios.test_stop_matrix import DONE, SHELL_CALL, config_for

QUESTION_CALL = {
    "tool_calls": [
        {"id": "call_q", "name": "question", "input": {"questions": [{"id": "q1", "prompt": "Go?"}]}}
    ]
}
SHORT_CALL = {"tool_calls": [{"id": "call_1", "name": "slow", "input": {"seconds": 1}}]}


def execute_call(code: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": "call_exec", "name": "execute", "input": {"code": code}}]}


class AtCheckpointsOnly:
    """The injector's calls these scenarios inject nothing at: a plugin's awaits, a commit (they fail
    one through the store itself, ``fail_next_commit``)."""

    def notice(self, name: str, turn: Any) -> None:
        """A plugin's own await."""

    def observes(self, tool: Tool) -> bool:
        return False

    def before_commit(self, read: Reader) -> None:
        """Every commit passes."""


@attrs.define
class OnCheckpoint(AtCheckpointsOnly):
    """The campaign's injector cut to one fault: ``action(turn)`` at the first checkpoint ``name``."""

    name: str
    action: Callable[[Any], Awaitable[None]]
    done: bool = False

    async def at(self, name: str, turn: Any) -> None:
        if name == self.name and not self.done:
            self.done = True
            await self.action(turn)


def as_another_process(runtime: Any) -> Any:
    """The runtime as a second process sharing the database sees it: not shutting down, and running
    none of this process's turns. Its reply lands while this process suspends the turn (this one
    refuses decisions from then on)."""
    return attrs.evolve(runtime, closing=False, turns={})


def fail_next_commit(store: Store) -> None:
    """Make the store's next commit fail, as a full or failing disk would, once."""

    def fail_once(tx: object) -> None:
        store.set_commit_hook(None)
        raise errors.StoreError("injected: the disk failed")

    store.set_commit_hook(fail_once)


async def test_an_exception_unwinding_a_step_settles_it_as_an_internal_error(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A failed commit in a step is an internal error (reason error); never a reason-less cancellation.

    The step's ``except BaseException`` cleanup asks its handle for a reason before ``failing_on_error``
    (outside it) has stopped the turn with a typed ``Failure``: it logs ``reasonless_cancel`` and settles
    the step with "reason-less cancellation". Seen in the campaign whenever a store failure hits a commit
    inside a step or a tool call (seed 0, run 54: ``--schedule '3:model.reply:store_failure/error'``).
    """

    async def fail(turn: Any) -> None:
        fail_next_commit(turn.runtime.store)  # the next commit records the model's reply

    injector = OnCheckpoint("model.reply", fail)
    async with running(config_for(tmp_path), [SHORT_CALL, DONE], injector=injector) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        reason = recorder.of("session.step.failed")[0].payload["reason"]
        assert reason["type"] == "error"
        assert reason["message"] != REASONLESS


async def test_an_interrupt_while_the_turn_settles_answers_false(tmp_path: Path, autojump_clock: Any) -> None:
    """An interrupt that arrives while the turn is already settling answers false.

    ``decisions.interrupt`` looks only at ``turns.status``, which says ``running`` until the settlement
    commits (a turn that succeeds, or stops for a shutdown or an internal error, records no intent): it
    records an interrupt intent and answers true, and the settlement then overwrites it (the turn
    succeeds, or is suspended and resumed).
    """
    answers: list[bool] = []

    async def interrupt(turn: Any) -> None:
        answers.append(await decisions.interrupt(turn.runtime, turn.session_id, "api"))

    injector = OnCheckpoint("settle.turn", interrupt)
    async with running(config_for(tmp_path), [DONE], injector=injector) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        assert recorder.types(session.id)[-2:] == ["session.execution.succeeded", "session.idle"]
        assert answers == [False]


async def test_a_decline_during_a_shutdown_is_not_resumed(tmp_path: Path, autojump_clock: Any) -> None:
    """A reject (no message) committed while a shutdown settles the turn must not let the turn resume.

    The reply records a declined stop intent (the turn is still ``running`` in the store), the shutdown
    then suspends the turn over it, and the next start resumes the turn the user declined (seed 000's
    harm). Campaign: seed 0, run 1654, ``--schedule '6:permission.wait:shutdown,9:settle.tool:decline/stop'``.
    """
    config = config_for(tmp_path)

    async def decline(turn: Any) -> None:
        request = (await turn.runtime.store.read(lambda r: r.pending_permissions(turn_id=turn.turn_id)))[0]
        await decisions.reply_permission(
            as_another_process(turn.runtime), turn.session_id, request.id, "reject", None
        )

    async with running(config, [SHELL_CALL, DONE], injector=OnCheckpoint("settle.tool", decline)) as (
        coord,
        rec,
    ):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await rec.wait_for("permission.asked")
        await trio.testing.wait_all_tasks_blocked()
        await coord.shutdown()
    async with running(config, [DONE]) as (coord, recorder):
        await recorder.wait_for("session.idle")
        assert recorder.of("session.idle")[-1].payload["outcome"] == "declined"


async def test_a_failed_heartbeat_commit_does_not_bring_the_coordinator_down(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """One failed heartbeat commit (a busy or full disk) is retried at the next beat; the lease covers it.

    ``claims.serve_heartbeat`` lets the ``StoreError`` out of the coordinator's root nursery: the whole
    coordinator, and the embedder's block with it, fails. After a crash (``crash(coord)``) the heartbeat
    keeps running too, and the first beat raises the same way.
    """
    config = config_for(tmp_path)
    async with running(config, [DONE]) as (coord, recorder):
        fail_next_commit(coord.store)
        await trio.sleep(config.server.lease)  # three heartbeats: the first one fails
        session = await coord.create_session()
        await coord.prompt(session.id, "still there?")
        await recorder.wait_for("session.idle")


async def test_a_nested_permission_kept_by_a_shutdown_is_settled_at_the_restart(tmp_path: Path) -> None:
    """A shutdown keeps the pending request of a nested call, which no restart can restore.

    The script's process is gone, so the restart fails the nested call (``_fail_interrupted_work``) but
    leaves its request pending with no wait behind it: every reply is refused and the dialog stays (seed
    003's harm). Campaign: seed 0, run 6.
    """
    config = config_for(tmp_path)
    script = [execute_call('return await tools.shell(command="echo nested")'), DONE]
    async with running(config, script) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        asked = await recorder.wait_for("permission.asked")
        await coord.shutdown()
    request_id = asked.payload["request"]["id"]
    async with running(config, [DONE]) as (coord, recorder):
        await recorder.wait_for("session.idle")
        request = await coord.store.read(lambda reader: reader.get_permission(request_id))
        assert request is not None and request.status != "pending"


async def test_a_restored_form_whose_call_is_denied_at_the_restart_is_settled(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A restored question call that fails before it opens its form again must settle the form.

    After a crash the call is restarted; if it fails first (here a ``deny`` rule added meanwhile; in the
    campaign a tool exception or an interrupt at ``tool.start``), the form stays pending for ever.
    """
    config = config_for(tmp_path)
    async with running(config, [QUESTION_CALL, DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        asked = await recorder.wait_for("form.asked")
        await trio.testing.wait_all_tasks_blocked()
        await crash(coord)
    denied = attrs.evolve(config, permission=(*config.permission, Rule(action="question", effect="deny")))
    async with running(denied, [DONE]) as (coord, recorder):
        await recorder.wait_for("session.idle")
        form = await coord.store.read(lambda reader: reader.get_form(asked.payload["form"]["id"]))
        assert form is not None and form.status != "pending"


async def test_a_crash_keeps_the_finished_nested_calls_of_execute(tmp_path: Path) -> None:
    """An execute call that stops for any reason settles with its finished calls.

    After a crash the restart fails the running call as interrupted with no partial result, though its
    finished nested calls are in the store (``tool_calls.parent_call_id``); the sweep of a turn does the
    same to a call whose own settlement could not be written. Campaign: seed 0, run 87.
    """
    config = config_for(tmp_path)
    code = "first = await tools.slow(seconds=0.01)\nawait tools.slow(seconds=600)\nreturn first"
    async with running(config, [execute_call(code), DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.tool.started", 3)  # execute, then its first and second calls
        await crash(coord)
    async with running(config, [DONE]) as (coord, recorder):
        await recorder.wait_for("session.idle")
        failed = [e for e in recorder.of("session.tool.failed") if e.payload["call_id"] == "call_exec"]
        calls = failed[0].payload.get("partial", {}).get("calls", [])
        assert [c["call_id"] for c in calls] == ["call_exec.1"]


async def test_a_nested_call_whose_settlement_failed_settles_before_its_execute_call(
    tmp_path: Path,
) -> None:
    """Children settle before parents, even when a child's own settlement could not be written.

    A nested call whose settlement commit fails leaves its row running; its execute call settles, and the
    session's sweep settles the nested call last. Campaign: seed 0, run 112.
    """
    config = config_for(tmp_path)
    code = "await tools.slow(seconds=0.01)\nreturn 1"

    async def fail(turn: Any) -> None:
        fail_next_commit(turn.runtime.store)  # the nested call's settlement

    injector = OnCheckpoint("tool.end", fail)
    async with running(config, [execute_call(code), DONE], injector=injector) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        ends = ("session.tool.succeeded", "session.tool.failed")
        settled = [e.payload["call_id"] for e in recorder.events if e.type in ends]
        assert settled.index("call_exec.1") < settled.index("call_exec")


async def test_a_decline_before_the_resume_ends_the_turn_declined(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A reject (no message) of a request kept by a shutdown, before the turn resumes, declines the turn.

    ``record_stop_intent`` only stops a ``running`` turn: for a suspended one the reply is accepted
    (``permission.replied`` reject) but records no stop, and the resume fails the call as "the server
    restarted" and asks the model again: the turn the user declined goes on (seed 000's harm). Campaign:
    seed 0, run 54, ``--schedule '4:permission.wait:shutdown,8:turn.start:decline/stop'``.
    """
    config: Config = config_for(tmp_path)
    async with running(config, [SHELL_CALL, DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        asked = await recorder.wait_for("permission.asked")
        await trio.testing.wait_all_tasks_blocked()
        await coord.shutdown()
    request_id = asked.payload["request"]["id"]

    async def decline(turn: Any) -> None:  # the reply lands as the restart takes the turn over
        await decisions.reply_permission(turn.runtime, turn.session_id, request_id, "reject", None)

    async with running(config, [DONE], injector=OnCheckpoint("turn.start", decline)) as (coord, recorder):
        await recorder.wait_for("session.idle")
        assert recorder.of("session.idle")[-1].payload["outcome"] == "declined"


async def test_an_interrupt_while_a_failing_turn_settles_answers_false(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """An interrupt that arrives while the turn is already settling answers false.

    An internal error (here a failed commit) stops the turn with a ``Failure`` that records no intent, so
    ``turns.status`` still says ``running``: the interrupt records its intent, answers true, and the turn
    ends interrupted instead of failed. (A stop committed during a shutdown's suspension is another
    matter: it rightly wins, or the turn would resume though the user stopped it.) Campaign: seed 0,
    run 927, ``--schedule '4:turn.start:store_failure/error,5:settle.step:interrupt'``.
    """
    answers: list[bool] = []

    async def act(turn: Any) -> None:
        if not turn.stopping:
            fail_next_commit(turn.runtime.store)  # the next commit records the model's reply
        else:
            answers.append(await decisions.interrupt(turn.runtime, turn.session_id, "api"))

    injector = Steps([("model.reply", act), ("settle.step", act)])
    async with running(config_for(tmp_path), [SHORT_CALL, DONE], injector=injector) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        assert answers == [False]
        assert recorder.types(session.id)[-2:] == ["session.execution.failed", "session.idle"]


@attrs.define
class Steps(AtCheckpointsOnly):
    """Several one-shot actions, each at the first checkpoint of its name."""

    steps: list[tuple[str, Callable[[Any], Awaitable[None]]]]

    async def at(self, name: str, turn: Any) -> None:
        for position, (wanted, action) in enumerate(self.steps):
            if wanted == name:
                del self.steps[position]
                await action(turn)
                return


async def test_a_restored_wait_revoked_before_it_reopens_carries_the_stop_reason(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A stop revokes every wait of the turn with its own reason, a restored one not yet re-opened too.

    After a crash, a restored call that the stop reaches before it re-opens its wait (here a question
    call held at ``tool.start`` while its sibling's request is declined) has no wait actor: the call's
    own settlement revokes the form, for reason error "tool call ... settled before this" instead of the
    turn's declined stop. Campaign: seed 0, run 67, ``--schedule '10:permission.wait:crash,14:permission.wait:decline/stop'``.
    """
    config = config_for(tmp_path)
    both = {"tool_calls": [SHELL_CALL["tool_calls"][0], QUESTION_CALL["tool_calls"][0]]}
    async with running(config, [both, DONE]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("permission.asked")
        form = (await recorder.wait_for("form.asked")).payload["form"]["id"]
        await trio.testing.wait_all_tasks_blocked()
        await crash(coord)
    declined = trio.Event()

    async def hold(turn: Any) -> None:  # the question call, until its sibling is declined
        await declined.wait()

    async def decline(turn: Any) -> None:
        request = (await turn.runtime.store.read(lambda r: r.pending_permissions(turn_id=turn.turn_id)))[0]
        await decisions.reply_permission(turn.runtime, turn.session_id, request.id, "reject", None)
        declined.set()

    injector = Steps([("tool.start", hold), ("permission.wait", decline)])
    async with running(config, [DONE], injector=injector) as (coord, recorder):
        await recorder.wait_for("session.idle")
        revoked = [e for e in recorder.of("form.revoked") if e.payload["form_id"] == form]
        assert revoked[0].payload["reason"]["type"] == "declined"


async def test_a_decline_during_a_shutdown_settles_children_before_parents(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A stop that wins over a shutdown's suspension still settles children before parents.

    The decline lands while the calls settle for the shutdown: the step fails with reason shutdown, then
    the turn's settlement (the decline wins) fails the kept call and revokes its request, after the step.
    Campaign: seed 0, run 1654, ``--schedule '6:permission.wait:shutdown,9:settle.tool:decline/stop'``.
    """
    config = config_for(tmp_path)
    two = {"tool_calls": [{**SHELL_CALL["tool_calls"][0], "id": f"call_{n}"} for n in (1, 2)]}

    async def decline(turn: Any) -> None:
        request = (await turn.runtime.store.read(lambda r: r.pending_permissions(turn_id=turn.turn_id)))[-1]
        await decisions.reply_permission(
            as_another_process(turn.runtime), turn.session_id, request.id, "reject", None
        )

    async with running(config, [two, DONE], injector=OnCheckpoint("settle.tool", decline)) as (
        coord,
        recorder,
    ):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("permission.asked", 2)
        await trio.testing.wait_all_tasks_blocked()
        await coord.shutdown()
        stored = await coord.store.read(lambda reader: reader.events_after(0))
        types = [e.type for e in stored if e.session_id == session.id]
        assert types.index("session.step.failed") > max(
            i for i, t in enumerate(types) if t == "session.tool.failed"
        )


async def test_a_call_whose_settlement_failed_settles_before_its_step(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """Children settle before parents, even when a call's own settlement could not be written.

    The failed commit stops the turn (an internal error); the step fails at once, leaving the call's row
    running, and the session's sweep fails the call after the step (F6 fixed this for the nested calls of
    execute, not for a step's calls). Campaign: seed 1, run 105, ``--schedule '14:tool.end:store_failure/busy'``.
    The first of two calls ends: its success is committed at once (the other still runs), and fails.
    """

    async def fail(turn: Any) -> None:
        fail_next_commit(turn.runtime.store)  # the call's own settlement

    calls = {"tool_calls": [{"id": f"c{n}", "name": "slow", "input": {"seconds": n}} for n in (1, 2)]}
    injector = OnCheckpoint("tool.end", fail)
    async with running(config_for(tmp_path), [calls, DONE], injector=injector) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        types = recorder.types(session.id)
        assert types.count("session.tool.failed") == 2
        assert types.index("session.step.failed") > max(
            i for i, t in enumerate(types) if t == "session.tool.failed"
        )


async def test_a_carried_call_success_whose_commit_failed_is_written_before_the_turn_fails(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """The step's last call carries its success to the next step's start (``TurnScope.carry``). When
    that commit fails, the turn fails, and its settlement writes the call's success and the step's
    first: the call succeeded and is kept so, children before parents."""

    async def fail(turn: Any) -> None:
        fail_next_commit(turn.runtime.store)  # the next step's start, carrying the call's success

    async with running(config_for(tmp_path), [SHORT_CALL, DONE], injector=OnCheckpoint("tool.end", fail)) as (
        coord,
        recorder,
    ):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        assert recorder.types(session.id) == [
            "session.created",
            "session.turn.started",
            "session.step.started",
            "session.tool.started",
            "session.tool.succeeded",
            "session.step.succeeded",
            "session.execution.failed",
            "session.idle",
        ]
        calls = await coord.store.read(lambda reader: reader.tool_calls_of_session(session.id))
        assert [(c.call_id, c.status) for c in calls] == [("call_1", "succeeded")]


async def test_a_stop_while_a_step_starts_its_calls_settles_them_before_the_step(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A stop that lands between a step recording its calls and starting their actors fails them first.

    The step publishes every call's ``session.tool.started`` in one commit, then starts an actor per
    call, awaiting each start: a stop in between leaves the calls not started yet without an actor, the
    step fails, and the session's sweep fails those calls after it. Campaign: seed 0, run 7 (a shutdown
    from another session's checkpoint while this step started its calls), ``--schedule '7:permission.wait:shutdown'``.
    """
    turns: list[Any] = []

    async def keep(turn: Any) -> None:
        turns.append(turn)

    three = {"tool_calls": [{"id": f"c{n}", "name": "slow", "input": {"seconds": 1}} for n in range(3)]}
    async with running(config_for(tmp_path), [three, DONE], injector=OnCheckpoint("model.reply", keep)) as (
        coord,
        recorder,
    ):

        def stop_once_recorded(events: Any) -> None:
            if turns and any(e.type == "session.tool.started" for e in events):
                turns.pop().handle.stop(Shutdown())  # what a shutdown does to a running turn

        coord.store.on_commit(stop_once_recorded)
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.execution.suspended")
        types = recorder.types(session.id)
        assert types.count("session.tool.failed") == 3
        assert max(i for i, t in enumerate(types) if t == "session.tool.failed") < types.index(
            "session.step.failed"
        )


async def test_a_turn_deadline_whose_stop_cannot_be_committed_still_stops_with_a_reason(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """The turn deadline's intent commit fails (the store fails as the deadline passes): the turn still
    stops, for that failure, and no actor is cancelled without a reason (chaos F16: the deadline's
    task raised into the turn's nursery, which cancelled the step and the call reason-less). Campaign:
    seed 41, run 2173, ``--schedule '5:tool.start:store_failure/error,6:tool.end:deadline'``.
    """
    long_call = {"tool_calls": [{"id": "call_1", "name": "slow", "input": {"seconds": 60}}]}

    async def fail(turn: Any) -> None:
        fail_next_commit(turn.runtime.store)  # the next commit is the deadline's intent, at 2 s

    injector = OnCheckpoint("tool.start", fail)
    config = config_for(tmp_path, turn=2)
    async with running(config, [long_call, DONE], injector=injector) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        idle = await recorder.wait_for("session.idle")
    assert idle.payload["outcome"] == "failed"
    reasons = [e.payload["reason"] for e in recorder.events if "reason" in e.payload]
    assert reasons and all(r["type"] == "error" and r["message"] != REASONLESS for r in reasons), reasons
    assert "the turn deadline" in reasons[-1]["message"], reasons


async def test_a_tool_that_raises_while_its_deadline_passes_fails_its_call_not_the_turn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """F18: a tool's own error, met by its deadline while the tool cleans up, fails the call; the turn goes on.

    The user's campaign found it (seed 0, run 200 of the README's plugin, ``tool_error`` at a declared
    checkpoint, then ``deadline`` at the cleanup's await): the progress nursery wrapped the tool's error
    with the deadline's Cancelled, the group escaped as an internal error, and the turn failed.
    """
    from coordinator.config import PluginConfig, TimeoutsConfig
    from tests.conftest import make_config

    config = make_config(tmp_path, timeouts=TimeoutsConfig(tool=1))
    config = attrs.evolve(
        config, plugin=(PluginConfig(entry="tests.coordinator.chaos.user_tools:unwinding"),)
    )
    call = {"tool_calls": [{"id": "call_1", "name": "unwinding", "input": {"seconds": 5}}]}
    async with running(config, [call, DONE]) as (coord, recorder):
        session = await coord.create_session(title="f18")
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
    failed = recorder.of("session.tool.failed")
    assert [e.payload["error"] for e in failed] == [
        {"type": "error", "message": "RuntimeError: it broke", "started": True}
    ]
    assert recorder.of("session.idle")[0].payload["outcome"] == "succeeded"
