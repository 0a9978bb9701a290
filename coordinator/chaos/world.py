"""What one run of the campaign drives: its sessions, their model scripts, its config and timeouts.

Everything here is drawn from the run's own ``random.Random``, separate from the injector's, so that a
schedule with an injection removed (shrinking) still drives the same world.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import attrs
import trio

from coordinator.chaos.streaming import Streamed, Tee
from coordinator.config import Config, PluginConfig, ServerConfig, TimeoutsConfig
from coordinator.models.base import ModelReply, ModelRequest
from coordinator.models.scripted import ScriptedModel
from coordinator.records import Rule

RULES = (
    Rule(action="*", resource="*", effect="allow"),
    Rule(action="shell", resource="*", effect="ask"),
    Rule(action="guarded", resource="*", effect="ask"),
)
PLUGINS = (
    PluginConfig(entry="coordinator.chaos.tools:slow"),
    PluginConfig(entry="coordinator.chaos.tools:guarded"),
)

# The turn deadline every run has: well beyond what a turn takes (a tool sleeps at most 5s, a person
# thinks at most 3s, the model at most 2s, three steps), so that only the ``deadline`` fault makes it
# fire. The other deadlines, when a run has them, come before it: letting time pass fires them first.
TURN_LIMIT = 120.0

SCRIPT_CODE = """\
first = await tools.slow(seconds=0.01)
print("first", first)
second = await tools.slow(seconds=0.02)
print("second", second)
third = await tools.guarded(seconds=0.01)
return [first, second, third]
"""


@attrs.frozen(kw_only=True)
class World:
    """One run's sessions (a script and a number of prompts each) and its config."""

    config: Config
    scripts: tuple[tuple[dict[str, Any], ...], ...]
    prompts: tuple[int, ...]
    # Runs with real processes keep trio's clock at real speed (autojump would leap over every bound
    # on waiting for a process), with short waits; the others run on autojump.
    processes: bool
    turn_limit: float

    def describe(self) -> str:
        kinds = sorted(
            {call["name"] for s in self.scripts for item in s for call in item.get("tool_calls", [])}
        )
        return f"{len(self.scripts)} session(s), prompts {list(self.prompts)}, tools {kinds}"


def make_world(rng: random.Random, base_dir: Path, db: Path) -> World:
    """Draw a world: 1-3 sessions (one when real processes run, to keep the run replayable)."""
    processes = rng.random() < 0.2
    sessions = 1 if processes else rng.choice((1, 1, 2, 2, 3))
    scripts = tuple(_script(rng, s, processes) for s in range(sessions))
    prompts = tuple(rng.choice((1, 1, 2)) for _ in range(sessions))
    timeouts = TimeoutsConfig(
        turn=TURN_LIMIT,
        step=rng.choice((0, 100)),
        tool=0 if processes else rng.choice((0, 0, 60)),
        execute=0,
        permission=0 if processes else rng.choice((0, 0, 90)),
        question=0 if processes else rng.choice((0, 0, 90)),
    )
    server = ServerConfig(db=str(db), lease=15, max_resumes=5, shutdown_grace=10)
    config = Config(server=server, timeouts=timeouts, permission=RULES, plugin=PLUGINS, base_dir=base_dir)
    return World(config=config, scripts=scripts, prompts=prompts, processes=processes, turn_limit=TURN_LIMIT)


def _script(rng: random.Random, session: int, processes: bool) -> tuple[dict[str, Any], ...]:
    """Tool steps (one to three, some with parallel calls), then text: every turn ends."""
    items: list[dict[str, Any]] = []
    for index in range(rng.choice((1, 1, 2, 2, 3))):
        width = 1 if processes else rng.choice((1, 1, 1, 2, 3))
        prefix = f"s{session}i{index}c"
        calls = [_call(rng, f"{prefix}{k}", processes) for k in range(width)]
        item: dict[str, Any] = {"tool_calls": calls}
        if not processes:
            item["delay"] = rng.choice((0, 0, 0, 1, 2))
        items.append(item)
    # The last answer streams in chunks, so stops land between them (``model.chunk``); no draw is added,
    # so every run keeps the world and the faults it had.
    delay = 0 if processes else rng.choice((0, 0, 1))
    items.append({"chunks": ["All ", "done", "."], "chunk_delay": 0 if processes else 0.5, "delay": delay})
    return tuple(items)


def _call(rng: random.Random, call_id: str, processes: bool) -> dict[str, Any]:
    kinds = ["slow", "guarded", "question", "slow", "guarded"]
    if processes:
        kinds = ["shell", "execute", "execute", "execute", "guarded"]
    name = rng.choice(kinds)
    if name in ("slow", "guarded"):
        seconds = rng.choice((0, 0.01, 0.02)) if processes else rng.choice((0, 1, 2, 5))
        return {"id": call_id, "name": name, "input": {"seconds": seconds}}
    if name == "question":
        questions = [{"id": "q1", "prompt": "Which one?", "options": ["a", "b"]}]
        if rng.random() < 0.5:
            questions.append({"id": "q2", "prompt": "Why?"})
        return {"id": call_id, "name": "question", "input": {"questions": questions}}
    if name == "shell":
        return {
            "id": call_id,
            "name": "shell",
            "input": {"command": rng.choice(("echo chaos", "sleep 0.05"))},
        }
    return {"id": call_id, "name": "execute", "input": {"code": SCRIPT_CODE}}


class ChaosModel:
    """Answers each session from its own script, and keeps every request it was sent (to check them)."""

    def __init__(self) -> None:
        self.scripts: dict[str, ScriptedModel] = {}
        self.requests: list[ModelRequest] = []
        self.streams: list[Streamed] = []

    def assign(self, session_id: str, script: tuple[dict[str, Any], ...]) -> None:
        self.scripts[session_id] = ScriptedModel.from_json(list(script), f"session {session_id}")

    async def complete(self, request: ModelRequest) -> ModelReply:
        """The script's answer. **Cancellation:** abandoned. **Raises:** nothing."""
        self.requests.append(request)
        stream = Streamed(session_id=request.session_id, index=request.index, messages=request.messages)
        self.streams.append(stream)
        tee = Tee(inner=request.text, record=stream)
        return await self.scripts[request.session_id].complete(attrs.evolve(request, text=tee))

    async def aclose(self) -> None:
        """Nothing to release."""
        await trio.lowlevel.checkpoint()
