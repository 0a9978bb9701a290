"""Every stop at every point of an MCP call: while the server works on it, after it reported
progress, while its question waits for a person, after its result arrived but before it settled. Each cause (interrupt, a decline, a dismissal, the
tool's, the question's and the turn's deadlines, a shutdown, a parent's stop) settles the call with its reason, in
order, tells the server (``notifications/cancelled`` for the call, ``cancel`` for its question), and
nothing resumes that must not; no server process outlives the coordinator."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from coordinator import Coordinator
from coordinator.config import TimeoutsConfig
from tests.conftest import Recorder, running
from tests.scenarios.test_chaos_findings import OnCheckpoint
from tests.scenarios.test_mcp_calls import mcp_config, recorded, until_ready, until_recorded

pytestmark = pytest.mark.slow

TOOL_AT = {
    "running": ("fx__slow", {"seconds": 60}),
    "progress": ("fx__working", {"seconds": 60}),
    "question": ("fx__ask", {}),
}
SHELL = ("shell", {"command": "echo hi"})
REASON = {
    "interrupt": "interrupt",
    "decline": "declined",
    "dismiss": "declined",
    "turn_deadline": "timeout",
    "question_deadline": "timeout",
    "shutdown": "shutdown",
}
TOOL_ERROR = {
    "interrupt": "interrupted",
    "decline": "interrupted",
    "dismiss": "declined",
    "turn_deadline": "timeout",
    "question_deadline": "timeout",
    "tool_deadline": "timeout",
    "shutdown": "interrupted",
}

CASES = [
    (point, cause)
    for point in TOOL_AT
    for cause in ("interrupt", "decline", "turn_deadline", "tool_deadline", "shutdown")
    if not (point == "question" and cause == "tool_deadline")  # paused while a person answers
] + [("question", "dismiss"), ("question", "question_deadline")]


def step_of(point: str, cause: str) -> dict[str, Any]:
    items = [TOOL_AT[point], SHELL] if cause == "decline" else [TOOL_AT[point]]
    return {"tool_calls": [{"id": f"c{i}", "name": n, "input": a} for i, (n, a) in enumerate(items)]}


async def reach(point: str, cause: str, recorder: Recorder, record: Path) -> None:
    await until_recorded(record, "start")
    if point == "progress":
        await recorder.wait_for("session.tool.progress")
    if point == "question":
        await recorder.wait_for("form.asked")
    if cause == "decline":
        await recorder.wait_for("permission.asked")


async def stop(cause: str, coord: Coordinator, session_id: str, recorder: Recorder) -> None:
    if cause == "interrupt":
        assert await coord.interrupt(session_id)
    elif cause == "decline":
        request = recorder.of("permission.asked")[0].payload["request"]["id"]
        await coord.reply_permission(session_id, request, "reject")
    elif cause == "dismiss":
        form = recorder.of("form.asked")[0].payload["form"]["id"]
        await coord.dismiss_form(session_id, form)
    # The deadlines pass by themselves; the shutdown is leaving the block.


@pytest.mark.parametrize(("point", "cause"), CASES)
async def test_a_stop_at_any_point_of_an_mcp_call_reaches_the_server(
    tmp_path: Path, point: str, cause: str
) -> None:
    config, record = mcp_config(tmp_path)
    timeouts = {"turn_deadline": {"turn": 1.0}, "question_deadline": {"question": 0.5}}.get(cause, {})
    config = attrs.evolve(config, timeouts=TimeoutsConfig(**timeouts))
    if cause == "tool_deadline":
        config = attrs.evolve(config, mcp=(attrs.evolve(config.mcp[0], timeout=0.5),))
    script = [step_of(point, cause), {"text": "after"}]
    async with running(config, script) as (coord, recorder):
        await until_ready(coord)
        session = await coord.create_session(title="matrix")
        await coord.prompt(session.id, "go")
        await reach(point, cause, recorder, record)
        await stop(cause, coord, session.id, recorder)
        if cause != "shutdown":
            await recorder.wait_for("session.idle")
    pid = recorded(record)[0]["pid"]
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the server's whole group is gone with the coordinator
    await check_settled(point, cause, recorder, record)
    if cause == "shutdown":
        await check_resumed_once(config, script, recorder)


async def check_settled(point: str, cause: str, recorder: Recorder, record: Path) -> None:
    failed = next(e.payload for e in recorder.of("session.tool.failed") if e.payload["call_id"] == "c0")
    assert failed["error"]["type"] == TOOL_ERROR[cause], failed
    types = [e.type for e in recorder.events if e.type != "session.tool.progress" or point == "progress"]
    started, settled = types.index("session.tool.started"), types.index("session.tool.failed")
    if point == "question":
        asked = types.index("form.asked")
        ended = types.index("form.cancelled" if cause == "dismiss" else "form.revoked")
        assert started < asked < ended < settled
        if cause != "dismiss":
            assert recorder.of("form.revoked")[0].payload["reason"]["type"] == REASON[cause]
        (answer,) = [r for r in recorded(record) if r["kind"] == "answer"]
        assert answer["action"] == "cancel"
    if point == "progress":
        assert started < types.index("session.tool.progress") < settled
    if cause == "tool_deadline":
        assert recorder.of("session.execution.succeeded")  # a tool's deadline: the turn goes on
    elif cause != "shutdown":
        stopped = recorder.of("session.execution.interrupted")[0].payload["reason"]
        assert stopped["type"] == REASON[cause]
    else:
        assert recorder.of("session.execution.suspended")
    start = next(r for r in recorded(record) if r["kind"] == "start")
    with trio.fail_after(5):
        cancelled = await until_recorded(record, "cancelled_notification")
    assert cancelled[0]["params"]["requestId"] == int(start["request_id"])


async def check_resumed_once(config: Any, script: list[dict[str, Any]], before: Recorder) -> None:
    """The next start resumes the suspended turn once: the model is asked again, nothing re-runs."""
    last = before.events[-1].seq
    async with running(config, script) as (coord, recorder):
        await recorder.wait_until(lambda e: e.type == "session.idle" and e.seq > last)
        later = [e for e in recorder.events if e.seq > last]
        assert [e.type for e in later if e.type.startswith("session.execution")] == [
            "session.execution.resumed",
            "session.execution.succeeded",
        ]
        assert not [e for e in later if e.type in ("session.tool.started", "form.asked")]
        del coord


async def test_a_parents_stop_reaches_the_server_of_its_sub_agents_call(tmp_path: Path) -> None:
    config, record = mcp_config(tmp_path)
    task = {"tool_calls": [{"id": "t0", "name": "task", "input": {"prompt": "wait", "title": "helper"}}]}
    script = {
        "helper": [
            {"tool_calls": [{"id": "h0", "name": "fx__slow", "input": {"seconds": 60}}]},
            {"text": "x"},
        ],
        "*": [task, {"text": "after"}],
    }
    async with running(config, script) as (coord, recorder):
        await until_ready(coord)
        session = await coord.create_session(title="parent")
        await coord.prompt(session.id, "go")
        await until_recorded(record, "start")
        assert await coord.interrupt(session.id)
        await recorder.wait_until(lambda e: e.type == "session.idle" and e.session_id == session.id)
        child = next(e for e in recorder.of("session.tool.failed") if e.payload["call_id"] == "h0")
        assert child.payload["error"]["type"] == "interrupted"
        stopped = [e for e in recorder.of("session.execution.interrupted") if e.session_id != session.id]
        assert stopped[0].payload["reason"]["type"] == "interrupt"
        assert stopped[0].payload["reason"]["parent"]["session_id"] == session.id
        start = next(r for r in recorded(record) if r["kind"] == "start")
        cancelled = await until_recorded(record, "cancelled_notification")
        assert cancelled[0]["params"]["requestId"] == int(start["request_id"])


async def test_a_stop_after_the_result_arrived_but_before_it_settled_drops_the_result(tmp_path: Path) -> None:
    config, record = mcp_config(tmp_path)
    stopped: dict[str, Coordinator] = {}

    async def interrupt(turn: Any) -> None:
        assert await stopped["coord"].interrupt(turn.session_id)

    injector = OnCheckpoint("tool.end", interrupt)
    script = [{"tool_calls": [{"id": "c0", "name": "fx__echo", "input": {"text": "late"}}]}, {"text": "x"}]
    async with running(config, script, injector=injector) as (coord, recorder):
        stopped["coord"] = coord
        await until_ready(coord)
        session = await coord.create_session(title="t")
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
        assert injector.done
        assert not recorder.of("session.tool.succeeded")
        failed = recorder.of("session.tool.failed")[0].payload["error"]
        assert failed["type"] == "interrupted" and failed["started"] is True
        assert recorder.of("session.execution.interrupted")[0].payload["reason"]["type"] == "interrupt"
    assert [r["kind"] for r in recorded(record)] == ["echo"]  # it ran; its result is not the call's
