"""Every input a person sends into a session, at every moment it can arrive.

Inputs: a steer, a queued prompt, the cancellation of a queued turn, a soft stop, an approval with
an edited input. Moments: while the model streams, while a tool runs, while a permission waits, while
the turn settles, during a shutdown, and just before a crash. Each case drives one session through
the embedding API (and a restart where the moment is a shutdown or a crash), then asserts the events
the input caused, the store, and what the model was sent next.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from coordinator import Coordinator, errors
from coordinator.chaos import crash
from coordinator.config import Config, PluginConfig
from coordinator.models.history import EDITED_NOTE
from coordinator.records import Rule
from coordinator.tools.base import Tool
from tests.conftest import Recorder, RecordingModel, make_config, running

INPUTS = ("steer", "queue", "cancel", "soft", "edit")
MOMENTS = ("streaming", "tool", "permission", "settling", "shutdown", "crash")
# An edited approval needs a pending request: it arrives only where one waits.
CASES = [
    (kind, moment)
    for kind in INPUTS
    for moment in MOMENTS
    if kind != "edit" or moment in ("permission", "shutdown", "crash")
]

RULES = (
    Rule(action="*", resource="*", effect="allow"),
    Rule(action="guarded", resource="*", effect="ask"),
)
TEXT = {"steer": "steered text", "queue": "queued text"}


async def slow(seconds: float) -> str:
    """A tool that takes ``seconds`` of trio time."""
    await trio.sleep(seconds)
    return "slept"


async def guarded(x: str) -> str:
    """A tool that asks first, then answers with its input."""
    await trio.lowlevel.checkpoint()
    return f"ran with {x}"


def _config(tmp_path: Path) -> Config:
    config = make_config(tmp_path, rules=RULES)
    plugins = (PluginConfig(entry=f"{__name__}:slow"), PluginConfig(entry=f"{__name__}:guarded"))
    return attrs.evolve(config, plugin=plugins)


def _script(moment: str) -> list[dict[str, Any]]:
    """The first step streams three chunks a second apart, then asks for one call: a slow one (the
    tool moment), a guarded one (a moment that waits on a person), or a quick one; then text."""
    if moment == "tool":
        call = {"id": "call_1", "name": "slow", "input": {"seconds": 10}}
    elif moment in ("permission", "shutdown", "crash"):
        call = {"id": "call_1", "name": "guarded", "input": {"x": "model"}}
    else:
        call = {"id": "call_1", "name": "slow", "input": {"seconds": 0}}
    first = {"chunks": ["thinking ", "about ", "it"], "chunk_delay": 1.0, "tool_calls": [call]}
    return [first, {"text": "done"}]


@attrs.define
class Moment:
    """Holds the turn at ``settle.turn`` (the settling moment) or at a stopped step's settlement in a
    shutdown (the shutdown moment) until ``send`` has run there: the coordinator's injector protocol,
    the same one the chaos campaign uses."""

    checkpoint: str | None = None
    send: Callable[[], Awaitable[None]] | None = None
    sent: trio.Event = attrs.Factory(trio.Event)

    async def at(self, name: str, turn: Any) -> None:
        if name != self.checkpoint or self.sent.is_set() or self.send is None:
            return
        if name == "settle.step" and (turn.handle.reason is None or turn.handle.reason.type != "shutdown"):
            return
        try:
            await self.send()
        finally:
            self.sent.set()

    def notice(self, name: str, turn: Any) -> None:
        return None

    def observes(self, tool: Tool) -> bool:
        return False

    def before_commit(self, read: Any) -> None:
        return None


@attrs.define
class Case:
    """One run: what the input answered (or raised), and what the session did."""

    kind: str
    moment: str
    session_id: str = ""
    first_turn: str = ""
    queued_turn: str | None = None
    answer: Any = None
    refused: Exception | None = None
    events: list[Any] = attrs.Factory(list)
    requests: list[Any] = attrs.Factory(list)

    def types(self) -> list[str]:
        return [e.type for e in self.events if e.session_id == self.session_id]

    def of(self, type: str) -> list[Any]:
        return [e for e in self.events if e.type == type and e.session_id == self.session_id]

    def outcome(self, turn_id: str) -> str:
        return next(e.payload["outcome"] for e in self.of("session.idle") if e.payload["turn_id"] == turn_id)


async def _send(coord: Coordinator, case: Case) -> None:
    """The input itself; a refusal is kept, not raised."""
    sid = case.session_id
    try:
        if case.kind == "steer":
            case.answer = await coord.steer(sid, TEXT["steer"])
        elif case.kind == "queue":
            case.answer = await coord.prompt(sid, TEXT["queue"])
        elif case.kind == "cancel":
            assert case.queued_turn is not None
            case.answer = await coord.cancel_turn(sid, case.queued_turn)
        elif case.kind == "soft":
            case.answer = await coord.interrupt(sid, when="after_step")
        else:
            request = (await coord.pending_permissions(sid))[0]
            case.answer = await coord.reply_permission(sid, request.id, "once", input={"x": "edited"})
    except (errors.CoordinatorClosed, errors.TurnNotQueued) as exc:
        case.refused = exc


async def _reached(recorder: Recorder, case: Case) -> None:
    """Until the moment the input must arrive (the settling and shutdown moments come to ``Moment``)."""
    if case.moment == "streaming":
        await recorder.wait_for("session.step.started")
        await trio.sleep(1.5)  # between the second chunk and the third
    elif case.moment == "tool":
        await recorder.wait_for("session.tool.started")
        await trio.sleep(1)
    else:
        await recorder.wait_for("permission.asked")


@contextlib.asynccontextmanager
async def _phase(
    tmp_path: Path, case: Case, moment: Moment | None = None
) -> AsyncIterator[tuple[Coordinator, Recorder]]:
    model = RecordingModel.from_json(_script(case.moment))
    async with running(_config(tmp_path), model=model, injector=moment) as (coord, recorder):
        yield coord, recorder
        case.events = list(recorder.events)
    case.requests += model.requests


async def _run(tmp_path: Path, case: Case) -> None:
    moment = Moment()
    async with _phase(tmp_path, case, moment) as (coord, recorder):
        session = await coord.create_session(title="t")
        case.session_id = session.id
        case.first_turn = await coord.prompt(session.id, "go")
        if case.kind == "cancel":
            case.queued_turn = await coord.prompt(session.id, "to cancel")
        moment.send = lambda: _send(coord, case)
        if case.moment == "settling":
            moment.checkpoint = "settle.turn"
            await _answer_when_asked(coord, recorder, session.id)
            await moment.sent.wait()
            await _until_quiet(recorder, case)
        elif case.moment == "shutdown":
            moment.checkpoint = "settle.step"
            await recorder.wait_for("permission.asked")
            await coord.shutdown()
        else:
            await _reached(recorder, case)
            await _send(coord, case)
            if case.moment == "crash":
                await crash(coord)
            else:
                if case.kind != "edit":
                    await _answer_when_asked(coord, recorder, session.id)
                await _until_quiet(recorder, case)
    if case.moment not in ("shutdown", "crash"):
        return
    # A restart after the shutdown or the crash: the turn resumes (or settles), then runs out.
    async with _phase(tmp_path, case) as (coord, recorder):
        await _answer_when_asked(coord, recorder, case.session_id)
        await _until_quiet(recorder, case)


async def _answer_when_asked(coord: Coordinator, recorder: Recorder, sid: str) -> None:
    """Allow the guarded call once, if it asks (again, after a restart)."""
    for request in await coord.pending_permissions(sid):
        with contextlib.suppress(errors.PermissionAlreadySettled, errors.CoordinatorClosed):
            await coord.reply_permission(sid, request.id, "once")


async def _until_quiet(recorder: Recorder, case: Case) -> None:
    """Until every turn of the session has settled: no turn is left unsettled in the store."""
    while True:
        await trio.sleep(5)  # the clock jumps: this only lets the session run out
        queued = [e.payload["turn_id"] for e in recorder.events if e.type == "session.turn.queued"]
        started = {e.payload["turn_id"] for e in recorder.events if e.type == "session.turn.started"}
        idle = {e.payload["turn_id"] for e in recorder.events if e.type == "session.idle"}
        if started <= idle and all(q in idle or q in _cancelled(recorder) for q in queued):
            return


def _cancelled(recorder: Recorder) -> set[str]:
    return {e.payload["turn_id"] for e in recorder.events if e.type == "session.turn.cancelled"}


def _user_texts(request: Any) -> list[str]:
    return [m.content or "" for m in request.messages if m.role == "user"]


@pytest.mark.parametrize(("kind", "moment"), CASES, ids=[f"{k}-{m}" for k, m in CASES])
async def test_an_input_at_a_moment(tmp_path: Path, autojump_clock: object, kind: str, moment: str) -> None:
    case = Case(kind=kind, moment=moment)
    await _run(tmp_path, case)
    check = CHECKS[kind]
    check(case)


def _check_steer(case: Case) -> None:
    if case.moment == "shutdown":
        assert isinstance(case.refused, errors.CoordinatorClosed)
        assert not case.of("session.turn.steered") and not case.of("session.turn.queued")
        assert case.outcome(case.first_turn) == "succeeded"
        return
    steer_id = case.answer.steer_id
    if case.moment == "settling":
        # The turn was settling: the steer runs as a turn of its own, after it.
        [queued] = case.of("session.turn.queued")
        assert queued.payload["from_steer"] == steer_id and case.answer.turn_id == queued.payload["turn_id"]
        assert case.outcome(queued.payload["turn_id"]) == "succeeded"
        assert _user_texts(case.requests[-1])[-1] == TEXT["steer"]
        assert not case.of("session.turn.steered")
        return
    # Delivered once, at the first step boundary, to the running turn; the next request carries it last.
    [steered] = case.of("session.turn.steered")
    assert steered.payload == {"turn_id": case.first_turn, "steer_id": steer_id, "text": TEXT["steer"]}
    types = case.types()
    at = types.index("session.turn.steered")
    # After the step whose call settled (after a crash, the restored call settles on its own: its
    # step was failed by the restart), before the step that reads the steer.
    before = "session.tool.succeeded" if case.moment == "crash" else "session.step.succeeded"
    assert types[at - 1] == before and types[at + 1] == "session.step.started"
    second = case.requests[-1]
    assert _user_texts(second)[-1] == TEXT["steer"] and _user_texts(second).count(TEXT["steer"]) == 1
    assert _user_texts(case.requests[0]).count(TEXT["steer"]) == 0
    assert case.outcome(case.first_turn) == "succeeded" and not case.of("session.turn.queued")


def _check_queue(case: Case) -> None:
    started = [e.payload["prompt"] for e in case.of("session.turn.started")]
    if case.moment == "shutdown":
        assert isinstance(case.refused, errors.CoordinatorClosed)
        assert started == ["go"]
        return
    assert started == ["go", TEXT["queue"]]
    assert case.of("session.turn.started")[1].payload["turn_id"] == case.answer
    assert _user_texts(case.requests[-1])[-1] == TEXT["queue"]
    assert case.outcome(case.first_turn) == "succeeded" and case.outcome(case.answer) == "succeeded"


def _check_cancel(case: Case) -> None:
    # A queued turn is cancelled at every moment, a shutdown included (a person's decision): it never runs.
    assert case.refused is None
    assert [e.payload["turn_id"] for e in case.of("session.turn.cancelled")] == [case.queued_turn]
    assert [e.payload["prompt"] for e in case.of("session.turn.started")] == ["go"]
    assert all("to cancel" not in _user_texts(r) for r in case.requests)
    assert case.outcome(case.first_turn) == "succeeded"


def _check_soft(case: Case) -> None:
    terminal = case.of("session.execution.interrupted")
    if case.moment in ("settling", "shutdown"):
        # Settling already, or suspended by the shutdown: the soft stop changes nothing.
        assert case.answer is False and not terminal
        assert case.outcome(case.first_turn) == "succeeded"
        return
    assert case.answer is True
    assert [e.payload["reason"] for e in terminal] == [{"type": "interrupt", "by": "embedder", "soft": True}]
    assert case.outcome(case.first_turn) == "interrupted"
    assert "session.execution.resumed" not in case.types()
    if case.moment == "crash":
        # Found at the restart: due at once, never resumed; the kept request is revoked with it.
        assert case.of("permission.revoked")[0].payload["reason"]["soft"] is True
        assert len(case.requests) == 1
        return
    # The step and its call finished; the model was not asked again.
    types = case.types()
    assert types[-3:] == ["session.step.succeeded", "session.execution.interrupted", "session.idle"]
    assert case.of("session.tool.succeeded") and len(case.requests) == 1


def _check_edit(case: Case) -> None:
    if case.moment == "shutdown":
        # Refused while the coordinator closes: the request is kept, answered after the restart.
        assert isinstance(case.refused, errors.CoordinatorClosed)
        assert [e.payload["output"] for e in case.of("session.tool.succeeded")] == ["ran with model"]
        return
    replied = case.of("permission.replied")[0]
    assert replied.payload["input"] == {"x": "edited"}
    # The call ran once, with the edited input (after the crash too: the reply is durable, and a
    # call whose tool had not started is restored with it); the model sees its call as it asked it.
    outputs = [e.payload["output"] for e in case.of("session.tool.succeeded")]
    failed = case.of("session.tool.failed")
    assert outputs == ["ran with edited"] or (
        case.moment == "crash" and failed and failed[0].payload["error"]["started"]
    )
    if outputs:
        request = case.requests[-1]
        assistant = next(m for m in request.messages if m.role == "assistant" and m.tool_calls)
        assert assistant.tool_calls[0].input == {"x": "model"}
        tool = next(m for m in request.messages if m.role == "tool")
        assert tool.content == "ran with edited\n\n" + EDITED_NOTE + '{"x":"edited"}'
    assert case.outcome(case.first_turn) == "succeeded"


CHECKS: dict[str, Callable[[Case], None]] = {
    "steer": _check_steer,
    "queue": _check_queue,
    "cancel": _check_cancel,
    "soft": _check_soft,
    "edit": _check_edit,
}
