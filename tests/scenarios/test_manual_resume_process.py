"""``[server] resume = "manual"`` with real ``coordinator serve`` processes: stopped
with SIGTERM or killed with ``kill -9``, started again on the same database, resumed over HTTP.

Each test checks what the restart left alone (no event, no model request, no tool started, the same
request id), what ``POST /api/session/{sid}/resume`` then ran (exactly once, as an automatic resume
would), and what the model was sent.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from tests.coordinator.server.harness import SHELL_CALL
from tests.model_server import ToolCalls
from tests.scenarios.test_restarts_process import (
    RESUMED_SUCCESS,
    RULES,
    SUSPENDED_IN_PERMISSION,
    Site,
    answering,
    assert_session,
    mentions_restart,
    recovered,
    site,
    sleeper,
    start_turn,
    stop,
)
from tests.servers import (
    Watched,
    group_gone,
    process_group_record,
    server_env,
    wait_group_gone,
    watched_server,
    write_config,
)

pytestmark = pytest.mark.slow

QUIET_SECONDS = 1.5
"""Longer than the watch interval (1 s): room for anything a start would still do on its own."""

STARTED_IN_TOOL = ["session.created", "session.turn.started", "session.step.started", "session.tool.started"]


def automatic(s: Site) -> Path:
    """The same site's config with the default policy, ``resume = "auto"``."""
    return write_config(
        s.tmp_path / "auto.toml", model_url=s.mock.base_url, server={"lease": 1}, permission=RULES
    )


@contextlib.asynccontextmanager
async def running_with(s: Site, config: Path, name: str) -> AsyncIterator[Watched]:
    async with watched_server(config, s.db, cwd=s.tmp_path, name=name) as run:
        yield run


async def post(run: Watched, session_id: str, action: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=run.server.url) as http:
        return await http.post(f"/api/session/{session_id}/{action}")


async def assert_left_alone(run: Watched, session_id: str, before: list[str]) -> None:
    """The start ran nothing of the session: no event after ``before``, the session suspended."""
    await trio.sleep(QUIET_SECONDS)
    assert run.types(session_id) == before
    assert [e["type"] for e in await run.stored(session_id)] == before
    assert recovered(run) == []
    info = await run.client.get_session(session_id)
    assert info.status == "suspended" and info.last_outcome is None


async def resume(run: Watched, session_id: str) -> str:
    """POST resume: 202 with the turn's id; a second POST at once: 409 ``NothingToResume``."""
    accepted = await post(run, session_id, "resume")
    assert accepted.status_code == 202, accepted.text
    again = await post(run, session_id, "resume")
    assert again.status_code == 409
    assert again.json()["error"]["name"] == "NothingToResume"
    assert again.json()["error"]["session_id"] == session_id
    return str(accepted.json()["turn_id"])


async def test_sigterm_during_a_permission_wait_then_a_manual_start_runs_nothing_until_resumed(
    tmp_path: Path,
) -> None:
    """The kept request keeps its id and may be answered while parked, which runs nothing; the resume
    applies the answer: the tool runs once, and the model is asked once more."""
    async with site(tmp_path, answering(SHELL_CALL), resume="manual") as s:
        async with s.running("first") as first:
            session_id = await start_turn(first, "permission.asked")
            asked = first.log.of("permission.asked")[0]["request"]
            await stop(first, "sigterm")
            await first.log.wait_for("session.execution.suspended", session_id)
        async with s.running("second") as second:
            assert [e["turn_id"] for e in second.server.logged("turn_parked")] == [
                first.log.of("session.turn.started")[0]["turn_id"]
            ]
            await assert_left_alone(second, session_id, SUSPENDED_IN_PERMISSION)
            assert [r.id for r in await second.client.pending_permissions(session_id)] == [asked["id"]]
            await second.client.reply_permission(session_id, asked["id"], "once")
            await assert_left_alone(second, session_id, [*SUSPENDED_IN_PERMISSION, "permission.replied"])
            assert len(s.mock.requests) == 1

            turn_id = await resume(second, session_id)
            await second.log.wait_for("session.idle", session_id)
            assert second.types(session_id) == [
                *SUSPENDED_IN_PERMISSION,
                "permission.replied",
                "session.execution.resumed",
                "session.tool.succeeded",
                *RESUMED_SUCCESS,
            ]
            resumed = second.log.of("session.execution.resumed")
            assert [(e["turn_id"], e["after"]) for e in resumed] == [(turn_id, "shutdown")]
            succeeded = second.log.of("session.tool.succeeded")[0]
            assert succeeded["output"]["stdout"].strip() == "hi"
            assert len(s.mock.requests) == 2 and mentions_restart(s.mock.requests[1])
            await assert_session(second, session_id, "idle", "succeeded")
            assert (await post(second, session_id, "resume")).status_code == 409


@pytest.mark.parametrize("how", ["sigterm", "kill"])
async def test_a_stop_while_a_shell_command_runs_then_a_manual_start_kills_it_and_resume_runs_once(
    tmp_path: Path, how: str
) -> None:
    """The command is gone before anyone resumes (a dead server's too: the parking start kills what it
    recorded); the resume fails the call as interrupted, once, and asks the model once again."""
    async with site(tmp_path, answering(ToolCalls(calls=(sleeper("call_sleep"),))), resume="manual") as s:
        async with s.running("first") as first:
            session_id = await start_turn(first, "session.tool.started")
            pgid = await s.process_group(session_id, "call_sleep")
            await stop(first, how)
            assert group_gone(pgid) == (how == "sigterm")
        if how == "sigterm":
            stopped = ["session.tool.failed", "session.step.failed", "session.execution.suspended"]
            resumed = ["session.execution.resumed"]
        else:
            stopped = []  # a crash writes nothing; its resume settles children before parents
            resumed = ["session.execution.resumed", "session.tool.failed", "session.step.failed"]
        async with s.running("second") as second:
            assert await wait_group_gone(pgid)
            assert process_group_record(s.db, session_id, "call_sleep") is None
            await assert_left_alone(second, session_id, [*STARTED_IN_TOOL, *stopped])
            assert len(s.mock.requests) == 1
            await resume(second, session_id)
            await second.log.wait_for("session.idle", session_id)
            assert second.types(session_id) == [*STARTED_IN_TOOL, *stopped, *resumed, *RESUMED_SUCCESS]
            failed = second.log.of("session.tool.failed", session_id)
            assert len(failed) == 1 and failed[0]["error"]["type"] == "interrupted"
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


async def test_kill_during_a_permission_wait_then_resume_restores_the_same_request_as_a_crash(
    tmp_path: Path,
) -> None:
    """After kill -9 the session reads suspended (its claim no longer held by the dead owner); the
    resume (here by the CLI) is a crash's: the step fails, the request is re-published with its id."""
    async with site(tmp_path, answering(SHELL_CALL), resume="manual") as s:
        async with s.running("first") as first:
            session_id = await start_turn(first, "permission.asked")
            asked = first.log.of("permission.asked")[0]["request"]
            await stop(first, "kill")
        async with s.running("second") as second:
            await assert_left_alone(second, session_id, SUSPENDED_IN_PERMISSION[:5])
            info = await second.client.get_session(session_id)
            assert info.claim is not None and info.claim.owner == first.server.instance_id()
            assert [r.id for r in await second.client.pending_permissions()] == [asked["id"]]
            # `coordinator resume SID`, as an operator at a terminal would: it prints the turn's id.
            argv = [sys.executable, "-m", "coordinator", "resume", "--url", second.server.url, session_id]
            cli = await trio.run_process(argv, capture_stdout=True, env=server_env())
            turn_id = first.log.of("session.turn.started")[0]["turn_id"]
            assert cli.stdout.decode() == f"{turn_id}\n"
            restored = await second.log.wait_for("permission.asked", session_id, count=2)
            assert restored["restored"] is True and restored["request"]["id"] == asked["id"]
            assert (await post(second, session_id, "resume")).status_code == 409
            assert len(s.mock.requests) == 1
            await second.client.reply_permission(session_id, asked["id"], "once")
            await second.log.wait_for("session.idle", session_id)
            assert second.types(session_id) == [
                *SUSPENDED_IN_PERMISSION[:5],
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
async def test_an_interrupt_of_a_parked_turn_settles_it_as_interrupted(tmp_path: Path, how: str) -> None:
    """Its kept request is revoked with reason interrupt, its call fails, the claim is released; the
    model is never asked again and there is nothing left to resume."""
    async with site(tmp_path, answering(SHELL_CALL), resume="manual") as s:
        async with s.running("first") as first:
            session_id = await start_turn(first, "permission.asked")
            asked = first.log.of("permission.asked")[0]["request"]
            await stop(first, how)
        before = SUSPENDED_IN_PERMISSION if how == "sigterm" else SUSPENDED_IN_PERMISSION[:5]
        # The step failed with the shutdown; after a crash it fails with the interrupt.
        step = [] if how == "sigterm" else ["session.step.failed"]
        async with s.running("second") as second:
            await assert_left_alone(second, session_id, before)
            interrupted = await post(second, session_id, "interrupt")
            assert (interrupted.status_code, interrupted.json()) == (200, {"interrupted": True})
            await second.log.wait_for("session.idle", session_id)
            assert second.types(session_id) == [
                *before,
                "permission.revoked",
                "session.tool.failed",
                *step,
                "session.execution.interrupted",
                "session.idle",
            ]
            interrupt_api = {"type": "interrupt", "by": "api"}
            revoked = second.log.of("permission.revoked")
            assert [(e["request_id"], e["reason"]) for e in revoked] == [(asked["id"], interrupt_api)]
            terminal = second.log.of("session.execution.interrupted")
            assert [e["reason"] for e in terminal] == [interrupt_api]
            assert second.log.of("session.tool.failed")[0]["error"]["type"] == "interrupted"
            await assert_session(second, session_id, "idle", "interrupted")
            assert await second.client.interrupt(session_id) is False
            assert (await post(second, session_id, "resume")).status_code == 409
            assert await second.client.pending_permissions() == []
        assert len(s.mock.requests) == 1


async def test_a_parked_turn_survives_restarts_and_an_automatic_start(tmp_path: Path) -> None:
    """Parked is the operator's decision, kept in the store: a second manual start and then an "auto"
    start leave it suspended; resumed at last, it runs exactly once."""
    async with site(tmp_path, answering(SHELL_CALL), resume="manual") as s:
        async with s.running("first") as first:
            session_id = await start_turn(first, "permission.asked")
            asked = first.log.of("permission.asked")[0]["request"]
            await stop(first, "sigterm")
        async with s.running("second") as second:
            await assert_left_alone(second, session_id, SUSPENDED_IN_PERMISSION)
            await stop(second, "sigterm")
        async with s.running("third") as third:
            assert third.server.logged("turn_parked") == []  # parked already
            await assert_left_alone(third, session_id, SUSPENDED_IN_PERMISSION)
            await stop(third, "kill")
        async with running_with(s, automatic(s), "fourth") as fourth:
            await assert_left_alone(fourth, session_id, SUSPENDED_IN_PERMISSION)
            assert fourth.server.logged("coordinator_started")[0]["recovered"] == 0
            assert len(s.mock.requests) == 1
            await resume(fourth, session_id)
            restored = await fourth.log.wait_for("permission.asked", session_id, count=2)
            assert restored["request"]["id"] == asked["id"]
            await fourth.client.reply_permission(session_id, asked["id"], "once")
            await fourth.log.wait_for("session.idle", session_id)
            assert fourth.types(session_id).count("session.execution.resumed") == 1
            assert fourth.types(session_id)[-4:] == RESUMED_SUCCESS
            await assert_session(fourth, session_id, "idle", "succeeded")
        assert len(s.mock.requests) == 2


async def test_resume_auto_is_the_default_behaviour_and_resume_finds_nothing(tmp_path: Path) -> None:
    """``resume = "auto"`` written out: the start resumes the suspended turn itself, and a POST resume
    answers 409 (nothing is suspended), never a second run."""
    async with site(tmp_path, answering(SHELL_CALL), resume="auto") as s:
        async with s.running("first") as first:
            session_id = await start_turn(first, "permission.asked")
            asked = first.log.of("permission.asked")[0]["request"]
            await stop(first, "sigterm")
        async with s.running("second") as second:
            assert [(r["status"], r["after"]) for r in recovered(second)] == [("suspended", "shutdown")]
            assert second.server.logged("turn_parked") == []
            await second.log.wait_for("permission.asked", session_id, count=2)
            refused = await post(second, session_id, "resume")
            assert (refused.status_code, refused.json()["error"]["name"]) == (409, "NothingToResume")
            await second.client.reply_permission(session_id, asked["id"], "once")
            await second.log.wait_for("session.idle", session_id)
            assert second.types(session_id).count("session.execution.resumed") == 1
            assert (await post(second, session_id, "resume")).status_code == 409
            missing = await post(second, "ses_unknown", "resume")
            assert (missing.status_code, missing.json()["error"]["name"]) == (404, "SessionNotFound")
        assert len(s.mock.requests) == 2


async def test_a_manual_node_parks_the_turn_of_a_node_that_died_instead_of_taking_it_over(
    tmp_path: Path,
) -> None:
    """Two processes on one database: the "auto" owner is killed; the live "manual" node's watch parks
    its turn (it does not take it over), and a resume through that node runs it once, as a crash."""
    async with site(tmp_path, answering(SHELL_CALL), resume="manual") as s:
        async with running_with(s, automatic(s), "auto") as owner:
            session_id = await start_turn(owner, "permission.asked")
            asked = owner.log.of("permission.asked")[0]["request"]
            async with s.running("manual") as other:
                await other.log.wait_for("permission.asked", session_id)
                await owner.server.kill()
                with trio.fail_after(10):  # the lease (1 s) and the watch interval (1 s), with room
                    while not other.server.logged("turn_parked"):  # noqa: ASYNC110 (another process's log)
                        await trio.sleep(0.05)
                await assert_left_alone(other, session_id, SUSPENDED_IN_PERMISSION[:5])
                await resume(other, session_id)
                restored = await other.log.wait_for("permission.asked", session_id, count=2)
                assert restored["request"]["id"] == asked["id"]
                await other.client.reply_permission(session_id, asked["id"], "once")
                await other.log.wait_for("session.idle", session_id)
                assert other.types(session_id)[5:] == [
                    "session.execution.resumed",
                    "session.step.failed",
                    "permission.asked",
                    "permission.replied",
                    "session.tool.succeeded",
                    *RESUMED_SUCCESS,
                ]
                assert [e["after"] for e in other.log.of("session.execution.resumed")] == ["crash"]
                await assert_session(other, session_id, "idle", "succeeded")
        assert len(s.mock.requests) == 2 and mentions_restart(s.mock.requests[1])
