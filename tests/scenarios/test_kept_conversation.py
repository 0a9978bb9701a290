"""Long, varied sessions: every request the model receives equals the conversation rebuilt from the store.

A step keeps each session's settled turns converted (``Conversations`` in coordinator/models/history.py)
and reads only the rest. Whatever the turns did (text, tool calls, failed and unknown calls, a stream
cut by an interrupt, a declined call, a tool interrupted, a shutdown and a crash with their resumed
turns, a turn run by another coordinator on the same database), the request must be exactly the one
a rebuild from scratch gives.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from coordinator import Coordinator
from coordinator.chaos import crash
from coordinator.config import Config, PluginConfig
from coordinator.events import Event
from coordinator.models import history
from coordinator.models.base import ChatMessage, ModelReply, ModelRequest
from coordinator.models.history import conversation_for_model
from coordinator.models.scripted import ScriptedModel
from coordinator.store import open_read_view
from tests.conftest import ASK_SHELL, Recorder, make_config, running

# ``fail`` raises a ToolFailure (with a partial result), not any exception: an exception is logged
# with its traceback, and rendering a dozen of them would be most of the test's time.
PLUGIN = '''
import trio

from coordinator.errors import ToolFailure


async def noop() -> str:
    """Do nothing."""
    await trio.lowlevel.checkpoint()
    return "ok"


async def fail(why: str) -> str:
    """Fail with ``why``."""
    await trio.lowlevel.checkpoint()
    raise ToolFailure(type="error", message=why, partial={"written": ["a.txt"]})


async def slow(seconds: float, progress=None) -> dict:
    """Report progress, sleep, then say how long."""
    progress({"stage": "sleeping", "of": seconds})
    await trio.sleep(seconds)
    return {"slept": seconds}
'''

# The model reuses its call ids from turn to turn, as models may: the store renames its own ids and
# each request must send the model's id back.
TEXT = {"text": "Plain answer, é."}
NOOP = {"tool_calls": [{"id": "c1", "name": "noop"}]}
FAIL = {"text": "Trying.", "tool_calls": [{"id": "c1", "name": "fail", "input": {"why": "no disk"}}]}
PAIR = {
    "text": "Two at once.",
    "tool_calls": [{"id": "c1", "name": "noop"}, {"id": "c2", "name": "nonexistent", "input": {"x": [1]}}],
}
STREAM = {"chunks": ["Once ", "upon ", "a ", "time"], "chunk_delay": 1}
SHELL = {"tool_calls": [{"id": "c1", "name": "shell", "input": {"command": "echo hi"}}]}
SLOW = {"tool_calls": [{"id": "c1", "name": "slow", "input": {"seconds": 1000}}]}
LONG_STREAM = {"chunks": ["Saved ", "before ", "the ", "crash"], "chunk_delay": 1}

# Each kind of turn: the model's answers to its requests.
TURNS: dict[str, list[dict[str, Any]]] = {
    "text": [TEXT],
    "tool": [NOOP, TEXT],
    "fail": [FAIL, TEXT],
    "pair": [PAIR, TEXT],
    "stream_interrupted": [STREAM],
    "declined": [SHELL],
    "tool_interrupted": [SLOW],
}
CYCLE = list(TURNS)


@attrs.define
class CheckingModel:
    """Answers each session from its own script and keeps, for every request, the request's messages
    and the conversation rebuilt from scratch from the store at that moment (on a connection of its own)."""

    db_path: str
    # Not in the repr: a logged traceback renders its frames' locals, this model among them.
    scripts: dict[str, list[dict[str, Any]]] = attrs.field(factory=dict, repr=False)
    sent: list[tuple[tuple[ChatMessage, ...], tuple[ChatMessage, ...]]] = attrs.field(
        factory=list, repr=False
    )

    async def complete(self, request: ModelRequest) -> ModelReply:
        with open_read_view(str(self.db_path)) as reader:
            rebuilt = conversation_for_model(reader, request.session_id)
        self.sent.append((request.messages, rebuilt))
        return await ScriptedModel.from_json(self.scripts[request.session_id]).complete(request)

    async def aclose(self) -> None:
        return None

    def assert_every_request_rebuilt(self) -> None:
        for index, (messages, rebuilt) in enumerate(self.sent):
            assert messages == rebuilt, f"request {index}"


def config_for(tmp_path: Path) -> Config:
    (tmp_path / "longtools.py").write_text(PLUGIN)
    config = make_config(tmp_path, rules=ASK_SHELL)
    plugins = tuple(PluginConfig(entry=f"longtools:{name}") for name in ("noop", "fail", "slow"))
    return attrs.evolve(config, plugin=plugins)


def of_turn(type: str, turn_id: str) -> Callable[[Event], bool]:
    return lambda event: event.type == type and event.payload.get("turn_id") == turn_id


@attrs.define
class Driver:
    """Runs turns of each kind in a session and waits for their end."""

    coord: Coordinator
    recorder: Recorder
    model: CheckingModel

    async def turn(self, session_id: str, kind: str) -> None:
        self.model.scripts[session_id].extend(TURNS[kind])
        turn_id = await self.coord.prompt(session_id, f"please do {kind}")
        if kind == "stream_interrupted":
            await self.recorder.wait_until(of_turn("session.step.started", turn_id))
            await trio.sleep(1.5)  # "Once upon " streamed
            assert await self.coord.interrupt(session_id)
        elif kind == "declined":
            call_id = (await self.recorder.wait_until(of_turn("session.tool.started", turn_id))).payload[
                "call_id"
            ]
            asked = await self.recorder.wait_until(
                lambda e: (
                    e.type == "permission.asked"
                    and e.session_id == session_id
                    and e.payload["request"]["call_id"] == call_id
                )
            )
            await self.coord.reply_permission(session_id, asked.payload["request"]["id"], "reject")
        elif kind == "tool_interrupted":
            await self.recorder.wait_until(of_turn("session.tool.started", turn_id))
            await trio.testing.wait_all_tasks_blocked()
            assert await self.coord.interrupt(session_id)
        await self.recorder.wait_until(of_turn("session.idle", turn_id))

    async def cycles(self, session_ids: list[str], count: int) -> None:
        """``count`` times every kind of turn, the sessions taking turns."""
        for _ in range(count):
            for kind in CYCLE:
                for session_id in session_ids:
                    await self.turn(session_id, kind)


async def long_sessions(tmp_path: Path) -> tuple[CheckingModel, int]:
    """Two sessions through three coordinators: cycles of every kind of turn, a shutdown while a tool
    runs, a crash while the model streams, each turn resumed by the next start, and a turn run by a
    second coordinator on the same database. Returns the model and how many messages of the first session were kept at the end."""
    config = config_for(tmp_path)
    model = CheckingModel(db_path=config.server.db)
    async with running(config, model=model) as (coord, recorder):
        drive = Driver(coord, recorder, model)
        sessions = [(await coord.create_session(title=f"long {i}")).id for i in range(2)]
        model.scripts.update({session_id: [] for session_id in sessions})
        await drive.cycles(sessions, 2)
        model.scripts[sessions[0]].extend([SLOW, TEXT])  # the resumed turn answers text
        suspended = await coord.prompt(sessions[0], "a tool, then shut down")
        await recorder.wait_until(of_turn("session.tool.started", suspended))
        await trio.testing.wait_all_tasks_blocked()
    async with running(config, model=model) as (coord, recorder):
        await recorder.wait_until(of_turn("session.idle", suspended))
        drive = Driver(coord, recorder, model)
        await drive.cycles(sessions, 1)
        model.scripts[sessions[1]].extend([LONG_STREAM, TEXT])
        crashed = await coord.prompt(sessions[1], "stream, then crash")
        await recorder.wait_until(of_turn("session.step.started", crashed))
        await trio.sleep(2.5)  # the text is saved once a second while it streams
        await crash(coord)
    async with running(config, model=model) as (coord, recorder):
        await recorder.wait_until(of_turn("session.idle", crashed))
        drive = Driver(coord, recorder, model)
        await drive.cycles(sessions, 1)
        async with running(config, model=model) as (other, other_recorder):
            await Driver(other, other_recorder, model).turn(sessions[0], "tool")
        await drive.cycles(sessions, 1)
        kept = coord._runtime.conversations.kept_messages(sessions[0])
    return model, kept


@pytest.mark.parametrize("budget", ["default", "tiny"])
async def test_every_request_equals_the_conversation_rebuilt_from_the_store(
    tmp_path: Path, budget: str, autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept conversation must never send the model anything but what the store holds, whether a
    session's conversation stays kept (default budget) or is dropped at every step (a tiny one)."""
    if budget == "tiny":
        monkeypatch.setattr(history, "CONVERSATIONS_BUDGET_BYTES", 1000)
    model, kept = await long_sessions(tmp_path)
    model.assert_every_request_rebuilt()
    # 2 sessions x 5 cycles x (1 + 2 + 2 + 2 + 1 + 1 + 1 requests), the two restarts' 2 each, one more turn.
    assert len(model.sent) == 2 * 5 * 10 + 2 * 2 + 2
    assert max(len(messages) for messages, _ in model.sent) > 100
    if budget == "tiny":
        assert kept == 0
    else:
        assert kept > 100


async def _turn_of_kind(drive: Driver, session_id: str, kind: str) -> str | None:
    """A turn of ``kind`` run to its end; a ``resumed`` one is left running a tool for the shutdown
    that suspends it, and its id returned."""
    if kind != "resumed":
        await drive.turn(session_id, {"succeeded": "pair", "stopped": "stream_interrupted"}[kind])
        return None
    drive.model.scripts[session_id].extend([SLOW, TEXT])
    turn_id = await drive.coord.prompt(session_id, "a tool, then shut down")
    await drive.recorder.wait_until(of_turn("session.tool.started", turn_id))
    await trio.testing.wait_all_tasks_blocked()
    return turn_id


# What the request after a turn of each kind must hold of it: its answer, the text a stop cut short,
# the note its resume added.
KIND_MARKERS = {
    "succeeded": "Two at once.",
    "stopped": "Once upon ",
    "resumed": "The server restarted while you were working.",
}


@pytest.mark.parametrize("kind", list(KIND_MARKERS))
async def test_after_each_kind_of_turn_the_kept_conversation_is_the_conversation_for_the_model(
    tmp_path: Path, kind: str, autojump_clock: Any
) -> None:
    """After a turn that succeeded, one stopped with its partial output kept, or one resumed after a
    shutdown, the next request is built from the kept settled turns (all but its own prompt) and
    must equal ``conversation_for_model``, the history read and converted from scratch."""
    config = config_for(tmp_path)
    model = CheckingModel(db_path=config.server.db)
    async with running(config, model=model) as (coord, recorder):
        session_id = (await coord.create_session(title=kind)).id
        model.scripts[session_id] = []
        await Driver(coord, recorder, model).turn(session_id, "tool")  # settled before: kept converted
        suspended = await _turn_of_kind(Driver(coord, recorder, model), session_id, kind)
        if suspended is None:
            await Driver(coord, recorder, model).turn(session_id, "text")
            kept = coord._runtime.conversations.kept_messages(session_id)
    if suspended is not None:
        async with running(config, model=model) as (coord, recorder):
            await recorder.wait_until(of_turn("session.idle", suspended))
            await Driver(coord, recorder, model).turn(session_id, "text")
            kept = coord._runtime.conversations.kept_messages(session_id)
    model.assert_every_request_rebuilt()
    after, reference = model.sent[-1]
    assert after == reference
    assert kept == len(after) - 1  # everything before the prompt came from the kept conversation
    assert any(KIND_MARKERS[kind] in (message.content or "") for message in after)
