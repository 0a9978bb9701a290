"""Resuming after real restarts: ``coordinator serve`` processes stopped with SIGTERM or killed
with ``kill -9`` at each point of a turn, restarted on the same database.

Each test checks, after the restart and replaying the stream from seq 0: what resumed (only the
shutdown and crash turns, each once), how often the model was asked (the mock counts requests), with
which ids (a restored wait keeps its id), and that a deliberate stop never resumes.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from tests.backends import db_for
from tests.coordinator.server.harness import QUESTION_CALL, SHELL_CALL
from tests.model_server import Call, Hang, HttpError, MockModel, Reply, Text, ToolCalls, serve_model
from tests.servers import (
    ASK_SHELL_RULES,
    Watched,
    group_gone,
    process_group_record,
    recorded_process_group,
    stored_session,
    wait_group_gone,
    watched_server,
    write_config,
)

pytestmark = pytest.mark.slow

WAIT_SECONDS = 15.0
NOTE = "The server restarted"
DONE = Text(text="done")
# Shell commands led by this marker run without asking (the last matching rule wins).
ALLOWED = "ALLOWED=1; "
RULES = (*ASK_SHELL_RULES, {"action": "shell", "resource": f"{ALLOWED}*", "effect": "allow"})


def sleeper(call_id: str, *, ignore_term: bool = False) -> Call:
    """A shell call that runs (without asking) until killed; ``ignore_term`` makes its stop take the
    whole SIGTERM grace, which holds a stop's settlement open long enough to kill the server in it."""
    trap = 'trap "" TERM; ' if ignore_term else ""
    return Call(id=call_id, name="shell", input={"command": f"{ALLOWED}{trap}exec sleep 30"})


def mentions_restart(body: dict[str, Any]) -> bool:
    return any(m["role"] == "user" and NOTE in (m.get("content") or "") for m in body["messages"])


def answering(first: Reply) -> Callable[[int, dict[str, Any]], Reply]:
    """``first`` for the prompt; "done" once a tool result or the restart note is in the history."""

    def reply(index: int, body: dict[str, Any]) -> Reply:
        if mentions_restart(body) or body["messages"][-1]["role"] != "user":
            return DONE
        return first

    return reply


@attrs.frozen
class Site:
    """One test's folder, config, database and mock model; servers are started on them."""

    tmp_path: Path
    config: Path
    db: Path | str
    mock: MockModel

    def running(self, name: str) -> contextlib.AbstractAsyncContextManager[Watched]:
        return watched_server(self.config, self.db, cwd=self.tmp_path, name=name)

    async def process_group(self, session_id: str, call_id: str) -> int:
        return await recorded_process_group(self.db, session_id, call_id, WAIT_SECONDS)


@contextlib.asynccontextmanager
async def site(
    tmp_path: Path, replies: Any, timeouts: dict[str, float] | None = None, **server: Any
) -> AsyncIterator[Site]:
    async with serve_model(replies) as mock:
        config = write_config(
            tmp_path / "coordinator.toml",
            model_url=mock.base_url,
            server={"lease": 1, **server},
            timeouts=timeouts,
            permission=RULES,
        )
        yield Site(tmp_path=tmp_path, config=config, db=db_for(tmp_path), mock=mock)


async def start_turn(run: Watched, wait_for: str) -> str:
    """A new session prompted "go"; returns its id once ``wait_for`` was published."""
    session = await run.client.create_session(title="restarts")
    await run.client.prompt(session.id, "go")
    await run.log.wait_for(wait_for, session.id)
    return session.id


async def stop(run: Watched, how: str) -> None:
    """SIGTERM (a graceful shutdown that must exit 0) or ``kill -9`` of the process group."""
    if how == "sigterm":
        assert await run.server.terminate() == 0, run.server.stderr_path.read_text()
        logged = [line["event"] for line in run.server.log()]
        milestones = [e for e in logged if e in ("signal_received", "server_stopping", "server_stopped")]
        assert milestones == ["signal_received", "server_stopping", "server_stopped"]
        assert logged[-1] == "server_stopped"
    else:
        await run.server.kill()


def recovered(run: Watched) -> list[dict[str, Any]]:
    """What this server's start found to resume or settle (its ``turn_recovered`` log lines)."""
    return run.server.logged("turn_recovered")


async def assert_session(run: Watched, session_id: str, status: str, outcome: str | None) -> None:
    info = await run.client.get_session(session_id)
    assert (info.status, info.last_outcome) == (status, outcome)
    if status == "idle":
        assert info.claim is None
    else:
        assert info.claim is not None and info.claim.owner == run.server.instance_id()


SUSPENDED_IN_PERMISSION = [
    "session.created",
    "session.turn.started",
    "session.step.started",
    "session.tool.started",
    "permission.asked",
    "session.step.failed",
    "session.execution.suspended",
]
RESUMED_SUCCESS = [
    "session.step.started",
    "session.step.succeeded",
    "session.execution.succeeded",
    "session.idle",
]


async def test_sigterm_while_a_permission_waits_suspends_and_the_next_start_restores_it_once(
    tmp_path: Path,
) -> None:
    """Row shutdown: claim kept (suspended), the wait durable; resumed exactly once, same request id."""
    async with site(tmp_path, answering(SHELL_CALL)) as s:
        async with s.running("first") as first:
            session_id = await start_turn(first, "permission.asked")
            asked = first.log.of("permission.asked")[0]["request"]
            await stop(first, "sigterm")
            # The stream delivered the suspension before the server ended it.
            suspended = await first.log.wait_for("session.execution.suspended", session_id)
            assert first.types(session_id) == SUSPENDED_IN_PERMISSION
        assert suspended["reason"] == {"type": "shutdown"}
        kept = stored_session(s.db, session_id)
        assert kept.status == "suspended" and kept.last_outcome is None
        assert kept.claim is not None and kept.claim.owner == first.server.instance_id()
        assert len(s.mock.requests) == 1

        async with s.running("second") as second:
            assert [(r["status"], r["after"]) for r in recovered(second)] == [("suspended", "shutdown")]
            restored = await second.log.wait_for("permission.asked", session_id, count=2)
            assert restored["restored"] is True and restored["request"]["id"] == asked["id"]
            assert [r.id for r in await second.client.pending_permissions(session_id)] == [asked["id"]]
            await assert_session(second, session_id, "busy", None)
            assert len(s.mock.requests) == 1  # a restored wait asks the model nothing
            await second.client.reply_permission(session_id, asked["id"], "once")
            await second.log.wait_for("session.idle", session_id)
            assert second.types(session_id) == [
                *SUSPENDED_IN_PERMISSION,
                "session.execution.resumed",
                "permission.asked",
                "permission.replied",
                "session.tool.succeeded",
                *RESUMED_SUCCESS,
            ]
            assert second.log.of("session.execution.resumed")[0]["after"] == "shutdown"
            assert len(s.mock.requests) == 2 and mentions_restart(s.mock.requests[1])
            await assert_session(second, session_id, "idle", "succeeded")
            await stop(second, "sigterm")

        async with s.running("third") as third:
            assert recovered(third) == []
            assert third.server.logged("coordinator_started")[0]["recovered"] == 0
            stored = [e["type"] for e in await third.stored(session_id)]
            assert stored == second.types(session_id)  # nothing added by the third start
            await assert_session(third, session_id, "idle", "succeeded")
        assert len(s.mock.requests) == 2


async def test_kill_while_a_permission_waits_restores_the_same_request_as_a_crash(tmp_path: Path) -> None:
    """Row crash: nothing recorded, claim held by a dead owner; resumed once as crash, same request id."""
    async with site(tmp_path, answering(SHELL_CALL)) as s:
        async with s.running("first") as first:
            session_id = await start_turn(first, "permission.asked")
            asked = first.log.of("permission.asked")[0]["request"]
            await stop(first, "kill")
        held = stored_session(s.db, session_id)  # held by a dead owner
        assert held.status == "busy" and held.claim is not None
        assert held.claim.owner == first.server.instance_id()
        async with s.running("second") as second:
            assert [(r["status"], r["after"]) for r in recovered(second)] == [("running", "crash")]
            restored = await second.log.wait_for("permission.asked", session_id, count=2)
            assert restored["restored"] is True and restored["request"]["id"] == asked["id"]
            assert [r.id for r in await second.client.pending_permissions()] == [asked["id"]]
            await assert_session(second, session_id, "busy", None)
            assert len(s.mock.requests) == 1
            await second.client.reply_permission(session_id, asked["id"], "once")
            await second.log.wait_for("session.idle", session_id)
            assert second.types(session_id) == [
                *SUSPENDED_IN_PERMISSION[:5],  # a crash writes nothing
                "session.execution.resumed",
                "session.step.failed",
                "permission.asked",
                "permission.replied",
                "session.tool.succeeded",
                *RESUMED_SUCCESS,
            ]
            assert [e["after"] for e in second.log.of("session.execution.resumed")] == ["crash"]
            assert len(s.mock.requests) == 2 and mentions_restart(s.mock.requests[1])
            await assert_session(second, session_id, "idle", "succeeded")


@pytest.mark.parametrize("how", ["sigterm", "kill"])
async def test_a_stop_while_a_shell_command_runs_fails_the_call_and_asks_the_model_once(
    tmp_path: Path, how: str
) -> None:
    """The running call fails as interrupted, its process group is gone (a dead server's too: the
    next start kills what it recorded), and the model is asked again once, with the restart note."""
    async with site(tmp_path, answering(ToolCalls(calls=(sleeper("call_sleep"),)))) as s:
        async with s.running("first") as first:
            session_id = await start_turn(first, "session.tool.started")
            pgid = await s.process_group(session_id, "call_sleep")
            await stop(first, how)
            # A graceful shutdown kills its command before exiting; a server killed with -9 cannot.
            assert group_gone(pgid) == (how == "sigterm")
        async with s.running("second") as second:
            await second.log.wait_for("session.idle", session_id)
            assert await wait_group_gone(pgid)
            assert process_group_record(s.db, session_id, "call_sleep") is None
            started = [
                "session.created",
                "session.turn.started",
                "session.step.started",
                "session.tool.started",
            ]
            if how == "sigterm":
                stopped = ["session.tool.failed", "session.step.failed", "session.execution.suspended"]
                resumed = ["session.execution.resumed"]
            else:
                stopped = []
                # Recovery settles children before parents, exactly as a live stop does.
                resumed = ["session.execution.resumed", "session.tool.failed", "session.step.failed"]
            assert second.types(session_id) == [*started, *stopped, *resumed, *RESUMED_SUCCESS]
            failed = second.log.of("session.tool.failed", session_id)
            assert len(failed) == 1 and failed[0]["error"]["type"] == "interrupted"
            if how == "kill":
                assert "restarted" in failed[0]["error"]["message"]
            after = {"sigterm": "shutdown", "kill": "crash"}[how]
            assert [e["after"] for e in second.log.of("session.execution.resumed")] == [after]
            assert len(s.mock.requests) == 2 and mentions_restart(s.mock.requests[1])
            assert [m["role"] for m in s.mock.requests[1]["messages"]] == [
                "user",
                "assistant",
                "tool",
                "user",
            ]
            await assert_session(second, session_id, "idle", "succeeded")


@pytest.mark.parametrize("how", ["sigterm", "kill"])
async def test_a_stop_while_the_model_streams_resumes_with_one_new_request(tmp_path: Path, how: str) -> None:
    """The step that was streaming fails; the resumed turn sends exactly one new request, with the note."""
    async with site(tmp_path, lambda i, body: DONE if mentions_restart(body) else Hang()) as s:
        async with s.running("first") as first:
            session_id = await start_turn(first, "session.step.started")
            with trio.fail_after(WAIT_SECONDS):
                await s.mock.wait_for_hanging(1)
            await stop(first, how)
        async with s.running("second") as second:
            await second.log.wait_for("session.idle", session_id)
            started = ["session.created", "session.turn.started", "session.step.started"]
            if how == "sigterm":
                stopped = ["session.step.failed", "session.execution.suspended", "session.execution.resumed"]
            else:
                stopped = ["session.execution.resumed", "session.step.failed"]
            assert second.types(session_id) == [*started, *stopped, *RESUMED_SUCCESS]
            after = {"sigterm": "shutdown", "kill": "crash"}[how]
            assert [e["after"] for e in second.log.of("session.execution.resumed")] == [after]
            assert len(s.mock.requests) == 2 and mentions_restart(s.mock.requests[1])
            await assert_session(second, session_id, "idle", "succeeded")


async def test_sigterm_while_a_form_waits_restores_the_same_form(tmp_path: Path) -> None:
    async with site(tmp_path, answering(QUESTION_CALL)) as s:
        async with s.running("first") as first:
            session_id = await start_turn(first, "form.asked")
            form = first.log.of("form.asked")[0]["form"]
            await stop(first, "sigterm")
        async with s.running("second") as second:
            restored = await second.log.wait_for("form.asked", session_id, count=2)
            assert restored["restored"] is True and restored["form"]["id"] == form["id"]
            assert [f.id for f in await second.client.pending_forms(session_id)] == [form["id"]]
            assert len(s.mock.requests) == 1
            await second.client.submit_form(session_id, form["id"], {"q1": "yes"})
            await second.log.wait_for("session.idle", session_id)
            assert second.types(session_id)[4:] == [
                "form.asked",
                "session.step.failed",
                "session.execution.suspended",
                "session.execution.resumed",
                "form.asked",
                "form.submitted",
                "session.tool.succeeded",
                *RESUMED_SUCCESS,
            ]
            assert len(s.mock.requests) == 2 and mentions_restart(s.mock.requests[1])
            tool_result = next(m for m in s.mock.requests[1]["messages"] if m["role"] == "tool")
            assert "yes" in tool_result["content"]
            await assert_session(second, session_id, "idle", "succeeded")


DECLINED_SEQUENCE = [
    "session.created",
    "session.turn.started",
    "session.step.started",
    "session.tool.started",
    "permission.asked",
    "permission.replied",
    "session.tool.failed",
    "session.step.failed",
    "session.execution.interrupted",
    "session.idle",
]


async def test_seed_000_a_declined_turn_is_never_resumed_by_a_restart(tmp_path: Path) -> None:
    """Seed 000 as reported, with a real kill and restart: reject, then kill -9, then start again."""
    async with site(tmp_path, answering(SHELL_CALL)) as s:
        async with s.running("first") as first:
            session_id = await start_turn(first, "permission.asked")
            request_id = first.log.of("permission.asked")[0]["request"]["id"]
            await first.client.reply_permission(session_id, request_id, "reject")
            await first.log.wait_for("session.idle", session_id)
            terminal = first.log.of("session.execution.interrupted")[0]
            assert terminal["reason"] == {"type": "declined", "via": "permission", "call_id": "call_shell"}
            await assert_session(first, session_id, "idle", "declined")
            await stop(first, "kill")
        async with s.running("second") as second:
            assert recovered(second) == []
            assert [e["type"] for e in await second.stored(session_id)] == DECLINED_SEQUENCE
            await assert_session(second, session_id, "idle", "declined")
        assert len(s.mock.requests) == 1


def asking(call_id: str, command: str) -> Call:
    return Call(id=call_id, name="shell", input={"command": command})


async def kill_while_settling(s: Site, calls: tuple[Call, ...], decide: Any) -> tuple[str, Watched, int]:
    """Start a turn running ``calls`` (``call_slow`` ignores SIGTERM), let ``decide(run, session_id,
    requests)`` commit a stop, and kill -9 the server while that stop's settlement still waits on
    ``call_slow``. Returns the session id, the finished first run and ``call_slow``'s process group."""
    asks = sum(1 for call in calls if not call.input["command"].startswith(ALLOWED))
    async with s.running("first") as first:
        session_id = await start_turn(first, "session.tool.started")
        await first.log.wait_for("permission.asked", session_id, count=asks)
        pgid = await s.process_group(session_id, "call_slow")
        requests = {e["request"]["call_id"]: e["request"]["id"] for e in first.log.of("permission.asked")}
        await decide(first, session_id, requests)
        await stop(first, "kill")
    return session_id, first, pgid


def settled_calls(run: Watched) -> dict[str, str]:
    """Each settled call's error type; every call settled exactly once."""
    failed = run.log.of("session.tool.failed")
    errors = {e["call_id"]: e["error"]["type"] for e in failed}
    assert len(errors) == len(failed)
    return errors


async def test_a_kill_after_a_reject_is_committed_settles_the_turn_as_declined(tmp_path: Path) -> None:
    """Row "a stop decided before a crash": the reject is committed, its settlement still waits on a
    sibling that ignores SIGTERM when the server is killed. The next start settles the turn as
    declined (the other pending request revoked) and resumes nothing."""
    calls = (
        sleeper("call_slow", ignore_term=True),
        asking("call_shell", "echo hi"),
        asking("call_other", "echo other"),
    )

    async def reject(run: Watched, session_id: str, requests: dict[str, str]) -> None:
        await run.client.reply_permission(session_id, requests["call_shell"], "reject")

    async with site(tmp_path, answering(ToolCalls(calls=calls))) as s:
        session_id, first, pgid = await kill_while_settling(s, calls, reject)
        assert "session.execution.interrupted" not in first.types(session_id)
        async with s.running("second") as second:
            assert [(r["status"], r["after"]) for r in recovered(second)] == [("stopping", "crash")]
            await second.log.wait_for("session.idle", session_id)
            types = second.types(session_id)
            assert "session.execution.resumed" not in types
            assert types[-3:] == ["session.step.failed", "session.execution.interrupted", "session.idle"]
            declined = {"type": "declined", "via": "permission", "call_id": "call_shell"}
            assert [e["reason"] for e in second.log.of("session.execution.interrupted")] == [declined]
            revoked = second.log.of("permission.revoked")
            requests = {
                e["request"]["call_id"]: e["request"]["id"] for e in second.log.of("permission.asked")
            }
            assert [(e["request_id"], e["reason"]) for e in revoked] == [(requests["call_other"], declined)]
            assert settled_calls(second) == {
                "call_shell": "declined",
                "call_slow": "interrupted",
                "call_other": "interrupted",
            }
            assert await wait_group_gone(pgid)
            assert process_group_record(s.db, session_id, "call_slow") is None
            await assert_session(second, session_id, "idle", "declined")
        assert len(s.mock.requests) == 1


async def test_a_kill_after_an_interrupt_is_committed_settles_the_turn_as_interrupted(tmp_path: Path) -> None:
    calls = (sleeper("call_slow", ignore_term=True), asking("call_shell", "echo hi"))

    async def interrupt(run: Watched, session_id: str, requests: dict[str, str]) -> None:
        assert await run.client.interrupt(session_id) is True

    async with site(tmp_path, answering(ToolCalls(calls=calls))) as s:
        session_id, first, pgid = await kill_while_settling(s, calls, interrupt)
        assert "session.execution.interrupted" not in first.types(session_id)
        async with s.running("second") as second:
            assert [(r["status"], r["after"]) for r in recovered(second)] == [("stopping", "crash")]
            await second.log.wait_for("session.idle", session_id)
            types = second.types(session_id)
            assert "session.execution.resumed" not in types
            assert types[-3:] == ["session.step.failed", "session.execution.interrupted", "session.idle"]
            interrupt_api = {"type": "interrupt", "by": "api"}
            assert [e["reason"] for e in second.log.of("session.execution.interrupted")] == [interrupt_api]
            revoked = second.log.of("permission.revoked")
            asked = second.log.of("permission.asked")[0]["request"]["id"]
            assert [(e["request_id"], e["reason"]) for e in revoked] == [(asked, interrupt_api)]
            assert settled_calls(second) == {"call_slow": "interrupted", "call_shell": "interrupted"}
            assert await wait_group_gone(pgid)
            assert process_group_record(s.db, session_id, "call_slow") is None
            await assert_session(second, session_id, "idle", "interrupted")
        assert len(s.mock.requests) == 1


def by_prompt(index: int, body: dict[str, Any]) -> Reply:
    """Each session's model by its prompt: a running command, a shell call that asks, a model error."""
    if body["messages"][-1]["role"] != "user":
        return DONE
    prompt = body["messages"][0]["content"]
    if prompt == "interrupt":
        return ToolCalls(calls=(sleeper("call_slow"),))
    if prompt == "timeout":
        return SHELL_CALL
    return HttpError(status=400, message="no such model")


async def test_deliberate_stops_settled_before_a_kill_are_never_resumed(tmp_path: Path) -> None:
    """Rows interrupt, timeout and error: each turn settled (claim released, waits revoked) before the
    server is killed; the next start finds nothing to resume and asks the model nothing."""
    outcomes = {"interrupt": "interrupted", "timeout": "timed_out", "error": "failed"}
    async with site(tmp_path, by_prompt, timeouts={"permission": 1}) as s:
        async with s.running("first") as first:
            sessions = {}
            for prompt in outcomes:
                session = await first.client.create_session(title=prompt)
                await first.client.prompt(session.id, prompt)
                sessions[prompt] = session.id
            await first.log.wait_for("session.tool.started", sessions["interrupt"])
            assert await first.client.interrupt(sessions["interrupt"]) is True
            for prompt, session_id in sessions.items():
                await first.log.wait_for("session.idle", session_id)
                await assert_session(first, session_id, "idle", outcomes[prompt])
            revoked = first.log.of("permission.revoked", sessions["timeout"])
            assert [e["reason"] for e in revoked] == [
                {"type": "timeout", "scope": "permission", "after": 1.0}
            ]
            failed = first.log.of("session.execution.failed", sessions["error"])[0]
            assert failed["reason"]["type"] == "error" and "400" in failed["reason"]["message"]
            before = {sid: first.types(sid) for sid in sessions.values()}
            await stop(first, "kill")
        async with s.running("second") as second:
            assert recovered(second) == []
            for prompt, session_id in sessions.items():
                assert [e["type"] for e in await second.stored(session_id)] == before[session_id]
                await assert_session(second, session_id, "idle", outcomes[prompt])
            assert await second.client.pending_permissions() == []
        assert len(s.mock.requests) == 3


async def test_a_turn_that_keeps_crashing_fails_after_max_resumes(tmp_path: Path) -> None:
    """``max_resumes = 1``: killed while a command runs, resumed once, killed again: then it fails."""

    def reply(index: int, body: dict[str, Any]) -> Reply:
        return ToolCalls(calls=(sleeper(f"call_{index}"),))

    async with site(tmp_path, reply, max_resumes=1) as s:
        async with s.running("first") as first:
            session_id = await start_turn(first, "session.tool.started")
            first_group = await s.process_group(session_id, "call_0")
            await stop(first, "kill")
        async with s.running("second") as second:
            await second.log.wait_for("session.tool.started", session_id, count=2)
            second_group = await s.process_group(session_id, "call_1")
            assert await wait_group_gone(first_group)
            await stop(second, "kill")
        async with s.running("third") as third:
            failed = await third.log.wait_for("session.execution.failed", session_id)
            assert failed["reason"]["type"] == "error"
            assert "resumed 1 times" in failed["reason"]["message"]
            await third.log.wait_for("session.idle", session_id)
            assert third.types(session_id).count("session.execution.resumed") == 1
            assert third.types(session_id)[-4:] == [
                "session.tool.failed",
                "session.step.failed",
                "session.execution.failed",
                "session.idle",
            ]
            assert await wait_group_gone(second_group)
            await assert_session(third, session_id, "idle", "failed")
        assert len(s.mock.requests) == 2 and mentions_restart(s.mock.requests[1])


def two_steps(index: int, body: dict[str, Any]) -> Reply:
    """A shell call, a second one after its result, then "done" (at once after a restart)."""
    results = sum(1 for m in body["messages"] if m["role"] == "tool")
    if mentions_restart(body) or results >= 2:
        return DONE
    command = ["echo one", "echo two"][results]
    return ToolCalls(calls=(Call(id=f"call_{results + 1}", name="shell", input={"command": command}),))


async def owner_waiting_on_a_person(a: Watched, b: Watched) -> tuple[str, Watched, Watched, dict[str, Any]]:
    """A session prompted via ``a`` whose turn waits on a permission: (its id, owner, other, request)."""
    session = await a.client.create_session(title="shared")
    await a.client.prompt(session.id, "go")
    request = (await b.log.wait_for("permission.asked", session.id))["request"]
    info = await b.client.get_session(session.id)
    assert info.claim is not None
    owner = {run.server.instance_id(): run for run in (a, b)}[info.claim.owner]
    return session.id, owner, (b if owner is a else a), request


async def test_two_server_processes_share_sessions_and_the_survivor_takes_over(tmp_path: Path) -> None:
    """One turn runs in exactly one process; a reply made in the other reaches it; when its owner is
    killed, the other takes the turn over as a crash, resumes it once, with the same request id."""
    async with site(tmp_path, two_steps) as s, s.running("a") as a, s.running("b") as b:
        session_id, owner, other, first = await owner_waiting_on_a_person(a, b)
        await other.client.reply_permission(session_id, first["id"], "once")
        second = (await owner.log.wait_for("permission.asked", session_id, count=2))["request"]
        assert second["call_id"] == "call_2"
        await other.log.wait_for("permission.asked", session_id, count=2)
        for run in (a, b):
            assert len(run.log.of("session.turn.started", session_id)) == 1
        assert len(s.mock.requests) == 2  # one request per step, from one process

        await owner.server.kill()
        restored = await other.log.wait_for("permission.asked", session_id, count=3)
        assert restored["restored"] is True and restored["request"]["id"] == second["id"]
        resumed = other.log.of("session.execution.resumed", session_id)
        assert [e["after"] for e in resumed] == ["crash"]
        await assert_session(other, session_id, "busy", None)
        await other.client.reply_permission(session_id, second["id"], "once")
        await other.log.wait_for("session.idle", session_id)
        assert other.types(session_id).count("session.execution.resumed") == 1
        assert other.types(session_id)[-4:] == RESUMED_SUCCESS
        assert len(s.mock.requests) == 3 and mentions_restart(s.mock.requests[2])
        await assert_session(other, session_id, "idle", "succeeded")
        await stop(other, "sigterm")


async def test_an_unreaped_dead_owner_is_taken_over_too(tmp_path: Path) -> None:
    """kill -9 of the owner whose parent does not reap it (a container whose init never waits): its
    pid lingers as a zombie, its heartbeat stops; the survivor must still take the turn over."""
    async with site(tmp_path, two_steps) as s, s.running("a") as a, s.running("b") as b:
        session_id, owner, other, _ = await owner_waiting_on_a_person(a, b)
        await owner.server.kill(reap=False)
        with trio.move_on_after(3):  # the lease (1 s) and the watch interval (1 s), with room
            await other.log.wait_for("session.execution.resumed", session_id)
        resumed = other.log.of("session.execution.resumed", session_id)
        await owner.server.process.wait()
        assert [e["after"] for e in resumed] == ["crash"]


async def test_a_frozen_owner_loses_its_turn_after_the_lease_and_commits_nothing_when_it_wakes(
    tmp_path: Path,
) -> None:
    """SIGSTOP of the owner in the middle of a tool call: its pid lives on, but once its heartbeat is
    older than the lease the other process takes the turn over as a crash; woken with SIGCONT, the old
    owner is fenced out: no commit, no model request, and the tool started exactly once."""
    starts = tmp_path / "starts.log"
    call = Call(
        id="call_frozen", name="shell", input={"command": f"{ALLOWED}echo started >> {starts}; exec sleep 30"}
    )
    async with (
        site(tmp_path, answering(ToolCalls(calls=(call,)))) as s,
        s.running("a") as a,
        s.running("b") as b,
    ):
        session = await a.client.create_session(title="frozen")
        await a.client.prompt(session.id, "go")
        await b.log.wait_for("session.tool.started", session.id)
        info = await b.client.get_session(session.id)
        assert info.claim is not None
        owner = {run.server.instance_id(): run for run in (a, b)}[info.claim.owner]
        other = b if owner is a else a
        await s.process_group(session.id, "call_frozen")  # the command runs
        owner.server.process.send_signal(signal.SIGSTOP)
        try:
            await other.log.wait_for("session.idle", session.id)
        finally:
            owner.server.process.send_signal(signal.SIGCONT)
        with trio.fail_after(WAIT_SECONDS):
            while not owner.server.logged("claim_lost"):  # noqa: ASYNC110 (another process's log file)
                await trio.sleep(0.05)
        settled = other.types(session.id)
        await trio.sleep(1.5)  # room for anything the woken owner might still try to commit
        assert other.types(session.id) == settled
        assert settled.count("session.tool.started") == 1 and settled.count("session.tool.succeeded") == 0
        assert [e["after"] for e in other.log.of("session.execution.resumed", session.id)] == ["crash"]
        assert settled[-4:] == RESUMED_SUCCESS
        assert starts.read_text().splitlines() == ["started"]
        assert len(s.mock.requests) == 2 and mentions_restart(s.mock.requests[1])
        assert owner.server.returncode is None  # the woken process lives on, fenced out of that turn
        await assert_session(other, session.id, "idle", "succeeded")
