"""The scripted and demo models: deterministic, offline answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from coordinator.config import Config, ModelConfig
from coordinator.errors import ConfigError, ModelError
from coordinator.models.base import ChatMessage, ModelReply, ModelRequest, ModelToolCall, Usage
from coordinator.models.factory import build_model
from coordinator.models.scripted import DemoModel, ScriptedModel

SCRIPT = [
    {"tool_calls": [{"id": "c1", "name": "shell", "input": {"command": "echo hi"}}]},
    {"text": "first", "delay": 5},
    {"text": "last"},
]


def write_script(folder: Path, items: Any, name: str = "script.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(items), encoding="utf-8")
    return path


def request(index: int, *messages: ChatMessage) -> ModelRequest:
    return ModelRequest(session_id="s1", index=index, messages=messages, tools=())


def bare(reply: ModelReply) -> ModelReply:
    """The reply without its usage (tested on its own)."""
    return attrs.evolve(reply, usage=None)


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


async def test_request_i_gets_item_i_and_then_the_last_item(tmp_path: Path) -> None:
    """A short script keeps answering with its last item, so a long turn never runs out."""
    model = ScriptedModel.from_file(write_script(tmp_path, SCRIPT))
    replies = [await model.complete(request(i)) for i in (0, 2, 3, 9)]
    call = ModelToolCall(id="c1", name="shell", input={"command": "echo hi"})
    assert [bare(r) for r in replies] == [
        ModelReply(tool_calls=(call,)),
        ModelReply(text="last"),
        ModelReply(text="last"),
        ModelReply(text="last"),
    ]
    await model.aclose()


async def test_delay_waits_on_trio_clock_before_answering(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The delay is trio time, so tests drive a slow model with the mock clock."""
    model = ScriptedModel.from_file(write_script(tmp_path, SCRIPT))
    start = trio.current_time()
    assert bare(await model.complete(request(1))) == ModelReply(text="first")
    assert trio.current_time() - start == 5


async def test_delay_is_cancellable(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """A step deadline or an interrupt stops a slow answer at once."""
    model = ScriptedModel.from_file(write_script(tmp_path, SCRIPT))
    with trio.move_on_after(2) as scope:
        await model.complete(request(1))
    assert scope.cancelled_caught
    assert trio.current_time() == 2


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "invalid JSON: "),
        (json.dumps({"text": "x"}), "expected a list of items, got an object"),
        ("[]", "expected at least one item, got an empty list"),
    ],
)
def test_malformed_script_file_names_the_file(tmp_path: Path, content: str, message: str) -> None:
    """A bad script is a start-up error that points at the file."""
    path = tmp_path / "script.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        ScriptedModel.from_file(path)
    assert caught.value.where == str(path)
    assert caught.value.message.startswith(message)


@pytest.mark.parametrize(
    ("item", "where", "message"),
    [
        ("hello", "item 1", 'expected an object, got "hello"'),
        ({"delay": 1}, "item 1", 'expected "text", "chunks" or "tool_calls"'),
        (
            {"text": "x", "colour": 1},
            "item 1",
            'unknown key "colour" (expected text, chunks, chunk_delay, cut, tool_calls, delay)',
        ),
        ({"text": "x", "chunks": ["x"]}, "item 1", 'expected "text" or "chunks", not both'),
        ({"chunks": ["x", 1]}, "item 1.chunks[1]", "expected a string, got 1"),
        ({"chunks": ["x"], "cut": "yes"}, "item 1.cut", 'expected true or false, got "yes"'),
        (
            {"chunks": ["x"], "chunk_delay": -1},
            "item 1.chunk_delay",
            "expected a number of seconds >= 0, got -1",
        ),
        ({"text": 3}, "item 1.text", "expected a string, got 3"),
        ({"tool_calls": {}}, "item 1.tool_calls", "expected a list, got an object"),
        ({"text": "x", "delay": -1}, "item 1.delay", "expected a number of seconds >= 0, got -1"),
        ({"text": "x", "delay": True}, "item 1.delay", "expected a number of seconds >= 0, got true"),
        (
            {"tool_calls": [{"id": "c", "input": {}}]},
            "item 1.tool_calls[0].name",
            "expected a non-empty string, got null",
        ),
        (
            {"tool_calls": [{"id": "", "name": "shell"}]},
            "item 1.tool_calls[0].id",
            'expected a non-empty string, got ""',
        ),
        (
            {"tool_calls": [{"id": "c", "name": "shell", "input": []}]},
            "item 1.tool_calls[0].input",
            "expected an object, got a list",
        ),
        ({"tool_calls": ["c"]}, "item 1.tool_calls[0]", 'expected an object, got "c"'),
    ],
)
def test_malformed_item_names_the_file_and_its_index(
    tmp_path: Path, item: Any, where: str, message: str
) -> None:
    """The operator learns which item of which file to fix."""
    path = write_script(tmp_path, [{"text": "ok"}, item])
    with pytest.raises(ConfigError) as caught:
        ScriptedModel.from_file(path)
    assert (caught.value.where, caught.value.message) == (f"{path}: {where}", message)


def test_missing_script_file_is_a_config_error(tmp_path: Path) -> None:
    """A wrong ``script`` path fails at start, naming the path."""
    with pytest.raises(ConfigError) as caught:
        ScriptedModel.from_file(tmp_path / "absent.json")
    assert caught.value.where == str(tmp_path / "absent.json")


async def test_tool_call_without_input_gets_an_empty_object(tmp_path: Path) -> None:
    """A tool without parameters needs no ``input`` in the script."""
    model = ScriptedModel.from_file(write_script(tmp_path, [{"tool_calls": [{"id": "c", "name": "ping"}]}]))
    reply = await model.complete(request(0))
    assert reply.tool_calls == (ModelToolCall(id="c", name="ping", input={}),)


async def test_demo_model_echoes_a_prompt() -> None:
    """Without a script a newcomer still gets an answer."""
    reply = await DemoModel().complete(request(0, user("hello")))
    assert bare(reply) == ModelReply(text="You said: hello")


async def test_demo_model_runs_shell_for_run_prefix() -> None:
    """``run:`` shows the tool path: a shell call with the rest of the prompt as its command."""
    reply = await DemoModel().complete(request(3, user("run:  echo hi  ")))
    assert bare(reply) == ModelReply(
        tool_calls=(ModelToolCall(id="call_3", name="shell", input={"command": "echo hi"}),)
    )
    empty = await DemoModel().complete(request(0, user("run:   ")))
    assert empty.tool_calls == ()


async def test_demo_model_summarises_a_tool_result() -> None:
    """After the call, the turn ends with text quoting the result, so it cannot loop."""
    result = json.dumps({"exit_code": 0, "stdout": "x" * 300, "stderr": ""})
    history = (
        user("run: echo"),
        ChatMessage(role="assistant", tool_calls=(ModelToolCall(id="call_0", name="shell", input={}),)),
        ChatMessage(role="tool", tool_call_id="call_0", content=result),
    )
    reply = await DemoModel().complete(request(1, *history))
    assert bare(reply) == ModelReply(text=f"The command finished: {result[:200]}")


@pytest.mark.parametrize(
    "content",
    [json.dumps({"error": {"type": "denied", "message": "no"}}), "Error: the command was denied"],
)
async def test_demo_model_reports_a_failed_tool_call(content: str) -> None:
    """A failure is told as a failure, not as a finished command."""
    history = (user("run: rm x"), ChatMessage(role="tool", tool_call_id="call_0", content=content))
    reply = await DemoModel().complete(request(1, *history))
    assert bare(reply) == ModelReply(text=f"The tool call failed: {content}")


async def test_demo_model_ignores_a_trailing_system_note() -> None:
    """A restart note after a failed call must not make the demo run the command again."""
    history = (
        user("run: sleep 10"),
        ChatMessage(role="tool", tool_call_id="call_0", content='{"error": {"type": "interrupted"}}'),
        ChatMessage(role="system", content="The server restarted."),
    )
    reply = await DemoModel().complete(request(1, *history))
    assert reply.tool_calls == ()
    assert reply.text.startswith("The tool call failed: ")


def test_build_model_picks_demo_or_script(tmp_path: Path) -> None:
    """``scripted`` without a script is the demo; with one, the script found next to the config."""
    assert isinstance(build_model(Config(base_dir=tmp_path)), DemoModel)
    write_script(tmp_path, SCRIPT, name="s.json")
    config = Config(model=ModelConfig(provider="scripted", script="s.json"), base_dir=tmp_path)
    model = build_model(config)
    assert isinstance(model, ScriptedModel)
    assert len(model.items) == 3


async def test_build_model_loads_the_openai_client_lazily(tmp_path: Path) -> None:
    """``openai`` gets the HTTP model; it is imported only when a config asks for it."""
    from coordinator.models.openai import OpenAIModel

    model = build_model(Config(model=ModelConfig(provider="openai"), base_dir=tmp_path))
    assert isinstance(model, OpenAIModel)
    await model.aclose()


def test_build_model_rejects_an_unknown_provider(tmp_path: Path) -> None:
    """A Config built in code skips the file's checks; the factory still refuses a provider it lacks."""
    config = Config(model=ModelConfig(provider="local"), base_dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as caught:
        build_model(config)
    assert str(caught.value) == '[model].provider: expected one of openai, scripted, got "local"'


@attrs.define
class Pieces:
    """A ``TextSink`` that records what a model streamed, and when."""

    pieces: list[tuple[float, str]] = attrs.Factory(list)
    boundaries: int = 0

    def append(self, piece: str) -> None:
        self.pieces.append((trio.current_time(), piece))

    def restart(self) -> None:
        self.pieces.clear()

    async def between_chunks(self) -> None:
        self.boundaries += 1
        await trio.lowlevel.checkpoint()


async def test_chunks_stream_one_by_one_chunk_delay_apart(autojump_clock: trio.testing.MockClock) -> None:
    """Each chunk reaches the step as it is sent, so a stop between two keeps exactly the first ones."""
    model = ScriptedModel.from_json([{"chunks": ["He", "llo", " wörld"], "chunk_delay": 0.5, "delay": 1}])
    sink = Pieces()
    start = trio.current_time()
    reply = await model.complete(
        ModelRequest(session_id="s", index=0, messages=(user("hi there"),), tools=(), text=sink)
    )
    assert [(t - start, p) for t, p in sink.pieces] == [(1, "He"), (1.5, "llo"), (2, " wörld")]
    assert sink.boundaries == 2
    assert reply.text == "Hello wörld"
    # Usage is estimated from characters sent (8) and answered (11), over 4, rounded down.
    assert reply.usage == Usage(input_tokens=2, output_tokens=2)


async def test_cut_streams_its_chunks_then_fails_the_request() -> None:
    """A stream that ends without a finish is broken: the request fails after what it streamed."""
    model = ScriptedModel.from_json([{"chunks": ["half a ", "sent"], "cut": True}])
    sink = Pieces()
    with pytest.raises(ModelError, match="cut short"):
        await model.complete(ModelRequest(session_id="s", index=0, messages=(), tools=(), text=sink))
    assert [p for _, p in sink.pieces] == ["half a ", "sent"]


async def test_a_script_object_answers_each_session_by_its_title(tmp_path: Path) -> None:
    """Sub-agent sessions need their own script: a session takes its title's list, else "*"."""
    model = ScriptedModel.from_file(
        write_script(tmp_path, {"helper": [{"text": "h0"}, {"text": "h1"}], "*": [{"text": "any"}]})
    )

    def titled(title: str, index: int) -> ModelRequest:
        return ModelRequest(session_id="s1", index=index, messages=(), tools=(), title=title)

    answers = [(await model.complete(titled(t, i))).text for t, i in [("helper", 0), ("helper", 5), ("x", 3)]]
    assert answers == ["h0", "h1", "any"]
    only_named = ScriptedModel.from_json({"helper": [{"text": "h"}]})
    with pytest.raises(ModelError, match="no list for the title 'other'"):
        await only_named.complete(titled("other", 0))
    with pytest.raises(ConfigError) as caught:
        ScriptedModel.from_json({"helper": []}, "s.json")
    assert caught.value.where == 's.json: "helper"'
