"""A model stream cut short (no ``finish_reason``) over real HTTP: retried, then the step fails.

The field report: an OpenAI-compatible server ended a stream cleanly but early, and the turn ended
``succeeded`` with half a sentence. Now the stream is retried like a dropped connection, and once the
retries are spent the step fails with reason error; what it streamed is kept like any stop's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator import open_coordinator, wire
from coordinator.config import ModelConfig
from coordinator.models.openai import OpenAIModel
from tests.conftest import ASK_SHELL, Recorder, make_config
from tests.model_server import Cut, Reply, Text, serve_model

RETRIES = (0.0, 0.0)


async def test_a_cut_stream_is_retried_then_fails_the_turn_keeping_its_text(tmp_path: Path) -> None:
    """Three cut attempts: the turn fails (never succeeds), the text is kept, the next request sends it."""

    def replies(index: int, body: dict[str, Any]) -> Reply:
        return Cut(text="half a sen") if index <= len(RETRIES) else Text(text="Whole now.")

    async with serve_model(replies) as mock:
        model_config = ModelConfig(provider="openai", base_url=mock.base_url, name="mock", api_key_env="")
        model = OpenAIModel.from_config(model_config, backoff=RETRIES)
        config = make_config(tmp_path, rules=ASK_SHELL)
        async with open_coordinator(config, model=model, synchronous="normal") as coord:
            recorder = Recorder()
            session = await coord.create_session(title="cut")
            subscription = coord.subscribe(after=0, session_id=session.id)
            await coord.prompt(session.id, "write a sentence")
            async for event in subscription:
                recorder.add(event)
                if event.type == "session.idle":
                    break
            assert recorder.types() == [
                "session.created",
                "session.turn.started",
                "session.step.started",
                "session.step.failed",
                "session.execution.failed",
                "session.idle",
            ]
            assert len(mock.requests) == 1 + len(RETRIES)
            failed = recorder.of("session.step.failed")[0].payload
            assert failed["reason"]["type"] == "error"
            assert "cut short" in failed["reason"]["message"]
            assert failed["partial_text"] == "half a sen"
            history = wire.unstructure(await coord.history(session.id))
            assert history[-1]["parts"] == [{"type": "text", "text": "half a sen", "status": "interrupted"}]
            assert (await coord.get_session(session.id)).last_outcome == "failed"

            await coord.prompt(session.id, "again")
            async for event in subscription:
                if event.type == "session.idle":
                    assert event.payload["outcome"] == "succeeded"
                    break
            sent = mock.requests[-1]["messages"]
            assert sent == [
                {"role": "user", "content": "write a sentence"},
                {"role": "assistant", "content": "half a sen"},
                {"role": "user", "content": "again"},
            ]
            await subscription.aclose()
