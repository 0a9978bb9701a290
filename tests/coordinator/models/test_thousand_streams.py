"""A thousand sessions whose models stream at once, over real HTTP from a model in its own process.

What a busy agent server does all day: every session's model streams its answer at the same time.
Each text must reach a delta subscriber whole and in order (offsets contiguous, chunks in the model's
order), be recorded as the model sent it, and no request may fail waiting for a connection.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio

from bench.model_streams import running_model
from coordinator import open_coordinator, wire
from coordinator.config import Config, ModelConfig, Rule
from coordinator.models.openai import OpenAIModel

SESSIONS = 1000
CHUNKS = 8
CHUNK_MS = 50
_CHUNK = re.compile(r"(\d+)@T\d+\.\d+;")


@pytest.mark.slow
@pytest.mark.wall_clock_limit(180)
async def test_a_thousand_streams_at_once_each_arrive_whole_and_in_order(tmp_path: Path) -> None:
    with running_model() as url:
        model = OpenAIModel.from_config(
            ModelConfig(provider="openai", base_url=url, name="paced", api_key_env="")
        )
        config = Config(base_dir=tmp_path, permission=(Rule(action="*", resource="*", effect="allow"),))
        config = config.with_overrides(db=str(tmp_path / "streams.sqlite"))
        async with open_coordinator(config, model=model, synchronous="normal") as coord:
            ids = [(await coord.create_session(title=f"s{index}")).id for index in range(SESSIONS)]
            texts: dict[str, str] = dict.fromkeys(ids, "")
            outcomes: dict[str, str] = {}
            live = trio.Event()

            async def follow() -> None:
                subscription = coord.subscribe(after=0, deltas=True)
                try:
                    async for event in subscription:
                        if event.type == "session.text.delta":
                            # Contiguous: each delta starts where the session's text so far ends.
                            assert event.payload["offset"] == len(texts[event.session_id])
                            texts[event.session_id] += event.payload["delta"]
                            live.set()
                        elif event.type == "session.idle":
                            outcomes[event.session_id] = event.payload["outcome"]
                            if len(outcomes) == SESSIONS:
                                return
                finally:
                    with trio.CancelScope(shield=True):
                        await subscription.aclose()

            with trio.fail_after(150):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(follow)
                    # Deltas are live only: the first one says the subscriber is past its replay.
                    await coord.prompt(ids[0], f"paced:{CHUNKS}:{CHUNK_MS}")
                    await live.wait()
                    for sid in ids[1:]:
                        await coord.prompt(sid, f"paced:{CHUNKS}:{CHUNK_MS}")
            assert set(outcomes.values()) == {"succeeded"}
            order = [str(index) for index in range(CHUNKS)]
            for sid in ids:
                assert _CHUNK.findall(texts[sid]) == order, sid
                assert _CHUNK.sub("", texts[sid]) == ""
            for sid in ids[:: SESSIONS // 20]:
                history = wire.unstructure(await coord.history(sid))
                assert history[-1]["parts"] == [{"type": "text", "text": texts[sid], "status": "complete"}]
