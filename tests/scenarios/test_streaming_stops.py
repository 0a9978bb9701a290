"""A stop at every point it can land while the model streams: the text streamed so far is kept.

For each stop the scenario checks the three places the partial text must be found:
``session.step.failed.partial_text``, the history's text part with its status, and the content
of the assistant message in the session's next model request. Points: interrupt, the step and turn
deadlines, shutdown then resume, crash then resume, a cut stream, a failed save, and a decline of a
sibling call (which can only land after the reply, and its text, were recorded).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio
import trio.testing

from coordinator import Coordinator, open_coordinator, wire
from coordinator.chaos import crash
from coordinator.config import Config, TimeoutsConfig
from coordinator.errors import StoreError
from coordinator.models.base import ChatMessage
from coordinator.models.scripted import ScriptedModel
from tests.conftest import ASK_SHELL, Recorder, make_config
from tests.scenarios.test_stop_matrix import CountingModel
from tests.scenarios.test_stop_matrix import config_for as matrix_config

# Chunks at t = 0, 1, 2, 3 s after the step starts; a stop at 1.5 s has "Once upon " streamed.
STREAM = {"chunks": ["Once ", "upon ", "a ", "time"], "chunk_delay": 1}
STREAMED = "Once upon "
DONE = {"text": "The end."}
STOP_AFTER = 1.5


@contextlib.asynccontextmanager
async def streaming(config: Config, model: CountingModel) -> AsyncIterator[tuple[Coordinator, Recorder]]:
    """A coordinator whose recorder subscribes with deltas on, from seq 0."""
    async with open_coordinator(config, model=model, synchronous="normal") as coord:
        recorder = Recorder()

        async def record() -> None:
            async for event in coord.subscribe(after=0, deltas=True):
                recorder.add(event)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(record)
            try:
                yield coord, recorder
            finally:
                await coord.shutdown()


def counting(*items: dict[str, Any]) -> CountingModel:
    return CountingModel(ScriptedModel.from_json(list(items)))


async def start_streaming(coord: Coordinator, recorder: Recorder) -> str:
    """Create a session, prompt it, and let the model stream for ``STOP_AFTER`` seconds."""
    session = await coord.create_session(title="stream")
    await coord.prompt(session.id, "tell me a story")
    await recorder.wait_for("session.step.started")
    await trio.sleep(STOP_AFTER)
    return session.id


def streamed_deltas(recorder: Recorder, session_id: str) -> str:
    """The text the deltas carried, checked to be gap-free and in order."""
    text = ""
    for event in recorder.of("session.text.delta"):
        if event.session_id != session_id:
            continue
        assert event.seq is None
        assert event.payload["offset"] == len(text)
        text += event.payload["delta"]
    return text


async def assert_text_kept(
    coord: Coordinator, recorder: Recorder, session_id: str, reason_type: str, status: str
) -> None:
    """The step's failure event and the history both keep the streamed text, with the stop's status."""
    assert streamed_deltas(recorder, session_id) == STREAMED
    failed = recorder.of("session.step.failed")[0]
    assert failed.payload["reason"]["type"] == reason_type
    assert failed.payload["partial_text"] == STREAMED
    history = await coord.history(session_id)
    last = wire.unstructure(history[-1])
    assert last["role"] == "assistant"
    assert last["parts"] == [{"type": "text", "text": STREAMED, "status": status}]
    prompt = wire.unstructure(history[0])["parts"]
    assert prompt == [{"type": "text", "text": "tell me a story", "status": "complete"}]


async def assert_next_request_sends(model: CountingModel, coord: Coordinator, session_id: str) -> None:
    """The session's next model request carries the kept text as the assistant's content."""
    await coord.prompt(session_id, "go on")
    await trio.testing.wait_all_tasks_blocked()
    messages = model.requests[-1].messages
    assert ChatMessage(role="assistant", content=STREAMED) in messages
    assert messages[-1] == ChatMessage(role="user", content="go on")


def config_for(tmp_path: Path, **timeouts: float) -> Config:
    return make_config(tmp_path, rules=ASK_SHELL, timeouts=TimeoutsConfig(**timeouts))


async def test_an_interrupt_while_the_model_streams_keeps_the_text(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """The user pressed stop half-way through an answer: what they saw stays in the conversation."""
    model = counting(STREAM, DONE)
    async with streaming(config_for(tmp_path), model) as (coord, recorder):
        session_id = await start_streaming(coord, recorder)
        assert await coord.interrupt(session_id)
        await recorder.wait_for("session.idle")
        assert [t for t in recorder.types(session_id) if t != "session.text.delta"] == [
            "session.created",
            "session.turn.started",
            "session.step.started",
            "session.step.failed",
            "session.execution.interrupted",
            "session.idle",
        ]
        await assert_text_kept(coord, recorder, session_id, "interrupt", "interrupted")
        await assert_next_request_sends(model, coord, session_id)
        await recorder.wait_for("session.idle", 2)


async def test_a_step_deadline_while_the_model_streams_keeps_the_text(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A step deadline mid-answer ends the turn timed out, with the text so far kept as "timeout"."""
    model = counting(STREAM, DONE)
    async with streaming(config_for(tmp_path, step=STOP_AFTER), model) as (coord, recorder):
        session = await coord.create_session(title="stream")
        await coord.prompt(session.id, "tell me a story")
        await recorder.wait_for("session.idle")
        reason = recorder.of("session.execution.interrupted")[0].payload["reason"]
        assert reason == {"type": "timeout", "scope": "step", "after": STOP_AFTER}
        await assert_text_kept(coord, recorder, session.id, "timeout", "timeout")
        await assert_next_request_sends(model, coord, session.id)


async def test_a_turn_deadline_while_the_model_streams_keeps_the_text(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """The turn's deadline lands in the step's stream: the step keeps its text, reason timeout (turn)."""
    model = counting(STREAM, DONE)
    async with streaming(config_for(tmp_path, turn=STOP_AFTER), model) as (coord, recorder):
        session = await coord.create_session(title="stream")
        await coord.prompt(session.id, "tell me a story")
        await recorder.wait_for("session.idle")
        reason = recorder.of("session.execution.interrupted")[0].payload["reason"]
        assert reason == {"type": "timeout", "scope": "turn", "after": STOP_AFTER}
        await assert_text_kept(coord, recorder, session.id, "timeout", "timeout")
        await assert_next_request_sends(model, coord, session.id)


async def test_a_cut_stream_fails_the_step_and_keeps_what_it_streamed(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A stream that ends without a finish is never an answer: the turn fails, its text is kept."""
    model = counting({**STREAM, "cut": True}, DONE)
    async with streaming(config_for(tmp_path), model) as (coord, recorder):
        session = await coord.create_session(title="cut")
        await coord.prompt(session.id, "tell me a story")
        await recorder.wait_for("session.idle")
        assert "session.step.succeeded" not in recorder.types(session.id)
        failed = recorder.of("session.step.failed")[0].payload
        assert failed["reason"]["type"] == "error" and "cut short" in failed["reason"]["message"]
        assert failed["partial_text"] == "Once upon a time"
        history = wire.unstructure(await coord.history(session.id))
        assert history[-1]["parts"] == [{"type": "text", "text": "Once upon a time", "status": "interrupted"}]
        assert (await coord.get_session(session.id)).last_outcome == "failed"


async def test_a_shutdown_while_the_model_streams_keeps_the_text_and_the_resume_sends_it(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A shutdown suspends the turn with the text kept as "shutdown"; the resumed turn's request sends it."""
    config = config_for(tmp_path)
    async with streaming(config, counting(STREAM, DONE)) as (coord, recorder):
        session_id = await start_streaming(coord, recorder)
        await coord.shutdown()
        await recorder.wait_for("session.execution.suspended")
        await assert_text_kept(coord, recorder, session_id, "shutdown", "shutdown")
    model = counting(DONE)
    async with streaming(config, model) as (coord, recorder):
        await recorder.wait_for("session.idle")
        assert recorder.of("session.execution.resumed")[0].payload["after"] == "shutdown"
        messages = model.requests[0].messages
        assert messages[:2] == (
            ChatMessage(role="user", content="tell me a story"),
            ChatMessage(role="assistant", content=STREAMED),
        )
        assert messages[2].role == "user" and "restarted" in (messages[2].content or "")
        succeeded = recorder.of("session.step.succeeded")[0].payload
        assert succeeded["message"] == {"text": "The end.", "tool_calls": []}


async def test_a_crash_while_the_model_streams_keeps_the_text_saved_before_it(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A crash loses the process's memory, but not the text saved (once a second) while it streamed:
    the start after it keeps that text in the step's failure, the history and the resumed request."""
    config = config_for(tmp_path)
    async with streaming(config, counting(STREAM, DONE)) as (coord, recorder):
        session_id = await start_streaming(coord, recorder)
        assert streamed_deltas(recorder, session_id) == STREAMED
        await crash(coord)
    model = counting(DONE)
    async with streaming(config, model) as (coord, recorder):
        await recorder.wait_for("session.idle")
        assert recorder.of("session.execution.resumed")[0].payload["after"] == "crash"
        failed = recorder.of("session.step.failed")[0].payload
        assert failed["partial_text"] == STREAMED
        history = wire.unstructure(await coord.history(session_id))
        assert [m["parts"][0].get("status") for m in history] == [
            "complete",
            "interrupted",
            "complete",
            "complete",
        ]
        assert history[1]["parts"][0]["text"] == STREAMED
        assert model.requests[0].messages[1] == ChatMessage(role="assistant", content=STREAMED)


async def test_a_failed_save_of_the_streamed_text_stops_the_turn_with_a_reason(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """The once-a-second save runs beside the step; when its commit fails, the turn fails typed (never a
    reason-less cancellation) and the step still keeps all the text it had streamed."""
    model = counting(STREAM, DONE)
    async with streaming(config_for(tmp_path), model) as (coord, recorder):
        session = await coord.create_session(title="stream")
        await coord.prompt(session.id, "tell me a story")
        await recorder.wait_for("session.step.started")
        await trio.sleep(0.5)

        def fail_once(tx: object) -> None:
            coord.store.set_commit_hook(None)
            raise StoreError("disk I/O error")

        coord.store.set_commit_hook(fail_once)
        await recorder.wait_for("session.idle")
        reason = recorder.of("session.execution.failed")[0].payload["reason"]
        assert reason["type"] == "error" and "delta flusher" in reason["message"]
        failed = recorder.of("session.step.failed")[0].payload
        assert failed["reason"] == reason
        assert failed["partial_text"] == STREAMED


async def test_a_decline_of_a_sibling_call_keeps_the_text_streamed_with_the_calls(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A decline can only land once the calls run, after the reply is whole: the text streamed in the
    same step is recorded complete with the calls, so the step's failure needs no partial text, and the
    next request still sends it with the calls and their results."""
    item = {
        "chunks": ["Let me ", "check ", "both."],
        "chunk_delay": 1,
        "tool_calls": [
            {"id": "call_slow", "name": "slow", "input": {"seconds": 1000}},
            {"id": "call_shell", "name": "shell", "input": {"command": "echo hi"}},
        ],
    }
    model = counting(item, DONE)
    async with streaming(matrix_config(tmp_path), model) as (coord, recorder):
        session = await coord.create_session(title="decline")
        await coord.prompt(session.id, "tell me a story")
        asked = await recorder.wait_for("permission.asked")
        assert streamed_deltas(recorder, session.id) == "Let me check both."
        await coord.reply_permission(session.id, asked.payload["request"]["id"], "reject")
        await recorder.wait_for("session.idle")
        failed = recorder.of("session.step.failed")[0].payload
        assert failed["reason"]["type"] == "declined" and "partial_text" not in failed
        errors = {
            e.payload["call_id"]: e.payload["error"]["type"] for e in recorder.of("session.tool.failed")
        }
        assert errors == {"call_shell": "declined", "call_slow": "interrupted"}
        history = wire.unstructure(await coord.history(session.id))
        assert history[-1]["parts"][0] == {"type": "text", "text": "Let me check both.", "status": "complete"}
        await coord.prompt(session.id, "go on")
        await recorder.wait_for("session.idle", 2)
        sent = model.requests[-1].messages
        assistant = next(m for m in sent if m.role == "assistant")
        assert assistant.content == "Let me check both." and len(assistant.tool_calls) == 2
