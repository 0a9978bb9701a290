"""An MCP server's question (form-mode elicitation) as a form of the call that asked it: answered,
declined with feedback, dismissed, and revoked by every stop, the server told each time."""

from __future__ import annotations

import os
from pathlib import Path

import attrs
import pytest
import trio

from coordinator import errors
from coordinator.chaos import crash
from tests.conftest import RecordingModel, running
from tests.scenarios.test_mcp_calls import calls, mcp_config, prompted, recorded, until_recorded

pytestmark = pytest.mark.slow

ASK = [calls(("fx__ask", {})), {"text": "thanks"}]


def gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_an_accepted_form_reaches_the_server_converted_by_its_schema(tmp_path: Path) -> None:
    config, record = mcp_config(tmp_path)
    async with running(config, ASK) as (coord, recorder):
        session_id = await prompted(coord)
        asked = (await recorder.wait_for("form.asked")).payload["form"]
        assert asked["source"] == {"mcp": "fx"} and asked["call_id"] == "c0"
        assert asked["prompt"] == "Tell me about you"
        assert asked["schema"]["properties"]["age"]["type"] == "integer"
        assert [(q["id"], q["prompt"], q.get("options")) for q in asked["questions"]] == [
            ("name", "Your name", None),
            ("age", "Age", None),
            ("subscribe", "Subscribe?", None),
            ("color", "Color", ["red", "green", "blue"]),
        ]
        with pytest.raises(errors.InvalidRequest) as refused:
            await coord.submit_form(
                session_id, asked["id"], {"name": "Ada", "age": "old", "subscribe": "yes", "color": "green"}
            )
        assert "'age'" in refused.value.message
        with pytest.raises(errors.InvalidRequest) as refused:
            await coord.submit_form(
                session_id, asked["id"], {"name": "Ada", "age": 3, "subscribe": True, "color": "pink"}
            )
        assert "'color'" in refused.value.message
        answers = {"name": "Ada", "age": "36", "subscribe": "true", "color": "green"}
        form = await coord.submit_form(session_id, asked["id"], answers)
        assert form.answers == {"name": "Ada", "age": 36, "subscribe": True, "color": "green"}
        await recorder.wait_for("session.idle")
        output = recorder.of("session.tool.succeeded")[0].payload["output"]
        assert output["content"][0]["text"] == "Ada is 36, subscribe=True, likes green"
        pid = recorded(record)[0]["pid"]
    assert [r["action"] for r in recorded(record) if r["kind"] == "answer"] == ["accept"]
    assert gone(pid)


async def test_a_form_dismissed_with_a_message_declines_and_the_call_goes_on(tmp_path: Path) -> None:
    config, record = mcp_config(tmp_path)
    async with running(config, ASK) as (coord, recorder):
        session_id = await prompted(coord)
        asked = (await recorder.wait_for("form.asked")).payload["form"]
        await coord.dismiss_form(session_id, asked["id"], message="not now")
        await recorder.wait_for("session.idle")
        output = recorder.of("session.tool.succeeded")[0].payload["output"]
        assert output["content"][0]["text"] == "no profile: decline"
        assert recorder.of("session.execution.succeeded")
    assert [r["action"] for r in recorded(record) if r["kind"] == "answer"] == ["decline"]


async def test_a_dismissed_form_is_a_declined_stop_and_the_server_gets_cancel(tmp_path: Path) -> None:
    config, record = mcp_config(tmp_path)
    async with running(config, ASK) as (coord, recorder):
        session_id = await prompted(coord)
        asked = (await recorder.wait_for("form.asked")).payload["form"]
        await coord.dismiss_form(session_id, asked["id"])
        await recorder.wait_for("session.idle")
        assert recorder.of("session.execution.interrupted")[0].payload["reason"]["type"] == "declined"
        assert recorder.of("session.tool.failed")[0].payload["error"]["type"] == "declined"
        answer = await until_recorded(record, "answer")
        assert answer[0]["action"] == "cancel"


async def test_an_interrupt_revokes_the_question_and_the_server_hears_cancel_then_the_cancellation(
    tmp_path: Path,
) -> None:
    config, record = mcp_config(tmp_path)
    async with running(config, ASK) as (coord, recorder):
        session_id = await prompted(coord)
        asked = (await recorder.wait_for("form.asked")).payload["form"]
        assert await coord.interrupt(session_id)
        await recorder.wait_for("session.idle")
        revoked = recorder.of("form.revoked")[0].payload
        assert revoked["form_id"] == asked["id"] and revoked["reason"]["type"] == "interrupt"
        assert recorder.of("session.tool.failed")[0].payload["error"]["type"] == "interrupted"
        with pytest.raises(errors.FormAlreadySettled) as late:
            await coord.submit_form(
                session_id, asked["id"], {"name": "Ada", "age": 1, "subscribe": True, "color": "red"}
            )
        assert late.value.settlement["status"] == "revoked"
        await until_recorded(record, "cancelled_notification")
        kinds = [r["kind"] for r in recorded(record)]
        # The question was answered before the call was cancelled: the tool saw its answer.
        assert kinds.index("answer") < kinds.index("cancelled_notification")
        assert [r["action"] for r in recorded(record) if r["kind"] == "answer"] == ["cancel"]


async def test_the_calls_deadline_does_not_count_the_time_a_person_takes_to_answer(tmp_path: Path) -> None:
    config, _ = mcp_config(tmp_path)
    config = attrs.evolve(config, mcp=(attrs.evolve(config.mcp[0], timeout=0.5),))
    async with running(config, ASK) as (coord, recorder):
        session_id = await prompted(coord)
        asked = (await recorder.wait_for("form.asked")).payload["form"]
        await trio.sleep(1.0)
        await coord.submit_form(
            session_id, asked["id"], {"name": "A", "age": 1, "subscribe": False, "color": "red"}
        )
        await recorder.wait_for("session.idle")
        assert recorder.of("session.tool.succeeded")


async def test_a_shutdown_revokes_a_servers_question_and_the_resume_asks_the_model_again(
    tmp_path: Path,
) -> None:
    config, record = mcp_config(tmp_path)
    script = [calls(("fx__ask", {})), {"text": "after the restart"}]
    async with running(config, script) as (coord, recorder):
        await prompted(coord)
        asked = (await recorder.wait_for("form.asked")).payload["form"]
        pid = recorded(record)[0]["pid"]
    assert gone(pid)
    revoked = recorder.of("form.revoked")[0].payload
    assert revoked["form_id"] == asked["id"] and revoked["reason"]["type"] == "shutdown"
    failed = recorder.of("session.tool.failed")[0].payload["error"]
    assert failed["type"] == "interrupted"
    assert [r["action"] for r in recorded(record) if r["kind"] == "answer"] == ["cancel"]
    before = recorder.of("form.revoked")[0].seq
    async with running(config, script) as (coord, recorder):
        await recorder.wait_until(lambda e: e.type == "session.idle" and e.seq > before)
        assert not [e for e in recorder.of("form.asked") if e.payload.get("restored")]
        assert recorder.of("session.execution.succeeded")


async def test_two_questions_of_one_call_are_two_forms_each_answered_once(tmp_path: Path) -> None:
    config, _ = mcp_config(tmp_path)
    async with running(config, [calls(("fx__ask_twice", {})), {"text": "ok"}]) as (coord, recorder):
        session_id = await prompted(coord)
        first = (await recorder.wait_for("form.asked")).payload["form"]
        await coord.submit_form(session_id, first["id"], {"color": "red"})
        second = (await recorder.wait_for("form.asked", 2)).payload["form"]
        assert second["id"] != first["id"] and second["prompt"] == "Second question"
        await coord.submit_form(session_id, second["id"], {"color": "blue"})
        await recorder.wait_for("session.idle")
        output = recorder.of("session.tool.succeeded")[0].payload["output"]
        assert output["content"][0]["text"] == "red then blue"


async def test_after_a_crash_a_servers_2025_question_is_revoked_before_the_model_is_asked_again(
    tmp_path: Path,
) -> None:
    config, _ = mcp_config(tmp_path)
    model = RecordingModel.from_json([calls(("fx__ask", {})), {"text": "after the crash"}])
    async with running(config, model=model) as (coord, recorder):
        await prompted(coord)
        asked = (await recorder.wait_for("form.asked")).payload["form"]
        await crash(coord)
    last = recorder.events[-1].seq
    async with running(config, model=model) as (coord, recorder):
        await recorder.wait_until(lambda e: e.type == "session.idle" and e.seq > last)
        later = [e for e in recorder.events if e.seq > last]
        types = [e.type for e in later]
        revoked = next(e for e in later if e.type == "form.revoked")
        assert revoked.payload == {"form_id": asked["id"], "reason": {"type": "shutdown"}}
        failed = next(e for e in later if e.type == "session.tool.failed")
        assert failed.payload["error"]["type"] == "interrupted"
        assert (
            types.index("form.revoked")
            < types.index("session.tool.failed")
            < types.index("session.step.started")
        )
        assert not [e for e in later if e.type == "form.asked"]
        assert types[-2:] == ["session.execution.succeeded", "session.idle"]
    assert len(model.requests) == 2
