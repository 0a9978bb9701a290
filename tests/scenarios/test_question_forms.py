"""Question forms (contract sections 3-6): answers, validation, dismissal as a declined stop, feedback,
and every other stop revoking a pending form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from coordinator.config import Config, TimeoutsConfig
from coordinator.errors import FormAlreadySettled, FormNotFound, InvalidRequest
from coordinator.models.scripted import ScriptedModel
from tests.conftest import Recorder, make_config, running
from tests.scenarios.test_stop_matrix import CountingModel

QUESTIONS = [
    {"id": "color", "prompt": "Which colour?", "options": ["red", "blue"]},
    {"id": "name", "prompt": "Your name?"},
]
ASK = {"tool_calls": [{"id": "call_q", "name": "question", "input": {"questions": QUESTIONS}}]}
DONE = {"text": "thanks"}
FORM_PREFIX = [
    "session.created",
    "session.turn.started",
    "session.step.started",
    "session.tool.started",
    "form.asked",
]


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path)


async def ask(coord: Any, recorder: Recorder) -> tuple[str, str]:
    session = await coord.create_session()
    await coord.prompt(session.id, "ask me")
    asked = await recorder.wait_for("form.asked")
    return session.id, asked.payload["form"]["id"]


async def test_submitted_answers_are_the_tool_result(config: Config, autojump_clock: Any) -> None:
    """The model receives ``{answers}`` and the turn succeeds."""
    model = CountingModel(ScriptedModel.from_json([ASK, DONE]))
    async with running(config, model=model) as (coord, recorder):
        session_id, form_id = await ask(coord, recorder)
        form = (await coord.pending_forms(session_id))[0]
        assert [q.id for q in form.questions] == ["color", "name"]
        await coord.submit_form(session_id, form_id, {"color": "red", "name": "Ada"})
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id)[5:] == [
            "form.submitted",
            "session.tool.succeeded",
            "session.step.succeeded",
            "session.step.started",
            "session.step.succeeded",
            "session.execution.succeeded",
            "session.idle",
        ]
        output = recorder.of("session.tool.succeeded")[0].payload["output"]
        assert output == {"answers": {"color": "red", "name": "Ada"}}
        assert '"answers"' in (model.requests[1].messages[-1].content or "")
        with pytest.raises(FormAlreadySettled) as caught:
            await coord.submit_form(session_id, form_id, {"color": "red", "name": "Ada"})
        assert caught.value.settlement == {"status": "submitted"}


async def test_answers_are_validated_against_the_form(config: Config, autojump_clock: Any) -> None:
    """Unknown or missing ids and answers outside the options are refused, naming each; the form still waits."""
    async with running(config, [ASK, DONE]) as (coord, recorder):
        session_id, form_id = await ask(coord, recorder)
        with pytest.raises(InvalidRequest) as caught:
            await coord.submit_form(session_id, form_id, {"color": "green", "age": "3"})
        message = str(caught.value)
        assert (
            "'age'" in message and "'name' is not answered" in message and "'color' must be one of" in message
        )
        with pytest.raises(FormNotFound):
            await coord.submit_form(session_id, "frm_never", {})
        assert [f.id for f in await coord.pending_forms(session_id)] == [form_id]
        await coord.interrupt(session_id)


async def test_dismissing_a_form_is_a_declined_stop(config: Config, autojump_clock: Any) -> None:
    """Seed 000's follow-up: a dismissed form ends the turn declined (via question), claim released."""
    async with running(config, [ASK, DONE]) as (coord, recorder):
        session_id, form_id = await ask(coord, recorder)
        await coord.dismiss_form(session_id, form_id)
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id) == [
            *FORM_PREFIX,
            "form.cancelled",
            "session.tool.failed",
            "session.step.failed",
            "session.execution.interrupted",
            "session.idle",
        ]
        reason = recorder.of("session.execution.interrupted")[0].payload["reason"]
        assert reason == {"type": "declined", "via": "question", "call_id": "call_q"}
        assert recorder.of("session.tool.failed")[0].payload["error"]["type"] == "declined"
        info = await coord.get_session(session_id)
        assert (info.claim, info.last_outcome) == (None, "declined")
    async with running(config, [DONE]) as (coord, recorder):
        await trio.testing.wait_all_tasks_blocked()
        assert "session.execution.resumed" not in recorder.types()


async def test_dismissing_with_a_message_is_feedback(config: Config, autojump_clock: Any) -> None:
    """With a message the call fails as declined carrying it, and the turn goes on."""
    model = CountingModel(ScriptedModel.from_json([ASK, DONE]))
    async with running(config, model=model) as (coord, recorder):
        session_id, form_id = await ask(coord, recorder)
        await coord.dismiss_form(session_id, form_id, "ask me later")
        await recorder.wait_for("session.idle")
        error = recorder.of("session.tool.failed")[0].payload["error"]
        assert error == {"type": "declined", "message": "ask me later", "started": True}
        assert recorder.of("session.idle")[0].payload["outcome"] == "succeeded"
        assert "ask me later" in (model.requests[1].messages[-1].content or "")


@pytest.mark.parametrize("cause", ["interrupt", "question_deadline", "turn_deadline"])
async def test_any_other_stop_revokes_the_pending_form(
    tmp_path: Path, cause: str, autojump_clock: Any
) -> None:
    """Interrupt and deadlines revoke the form with their reason, so no client keeps a stale form."""
    timeouts = {"question_deadline": TimeoutsConfig(question=60), "turn_deadline": TimeoutsConfig(turn=60)}
    config = make_config(tmp_path, timeouts=timeouts.get(cause))
    async with running(config, [ASK, DONE]) as (coord, recorder):
        session_id, form_id = await ask(coord, recorder)
        if cause == "interrupt":
            await coord.interrupt(session_id)
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id) == [
            *FORM_PREFIX,
            "form.revoked",
            "session.tool.failed",
            "session.step.failed",
            "session.execution.interrupted",
            "session.idle",
        ]
        revoked = recorder.of("form.revoked")[0].payload
        expected = {
            "interrupt": {"type": "interrupt", "by": "embedder"},
            "question_deadline": {"type": "timeout", "scope": "question", "after": 60.0},
            "turn_deadline": {"type": "timeout", "scope": "turn", "after": 60.0},
        }[cause]
        assert revoked == {"form_id": form_id, "reason": expected}
        with pytest.raises(FormAlreadySettled) as caught:
            await coord.dismiss_form(session_id, form_id)
        assert caught.value.settlement == {"status": "revoked", "reason": expected}


async def test_a_form_survives_a_shutdown_with_its_id(config: Config, autojump_clock: Any) -> None:
    """Shutdown keeps the form pending; the next start re-publishes it, restored, and waits again."""
    async with running(config, [ASK, DONE]) as (coord, recorder):
        session_id, form_id = await ask(coord, recorder)
    assert recorder.types(session_id)[-2:] == ["session.step.failed", "session.execution.suspended"]
    async with running(config, [DONE]) as (coord, recorder):
        restored = await recorder.wait_for("form.asked", 2)
        assert restored.payload["form"]["id"] == form_id and restored.payload["restored"] is True
        await coord.submit_form(session_id, form_id, {"color": "blue", "name": "Bo"})
        await recorder.wait_for("session.idle")
        assert recorder.of("session.idle")[0].payload["outcome"] == "succeeded"
