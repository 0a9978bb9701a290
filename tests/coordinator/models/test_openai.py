"""The OpenAI-compatible client against a real HTTP mock, plus its pure request and reply builders."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import pytest
import trio

from coordinator.config import ModelConfig
from coordinator.errors import ModelError
from coordinator.models.base import ChatMessage, ModelReply, ModelRequest, ModelToolCall, ToolSpec, Usage
from coordinator.models.openai import (
    OpenAIModel,
    SSEDecoder,
    Transient,
    assemble_reply,
    build_request_body,
    chunks_from_payloads,
    parse_retry_after,
    retry_delay,
)
from tests.model_server import (
    Call,
    Cut,
    Drop,
    Hang,
    HttpError,
    MockModel,
    RawEvents,
    Text,
    ToolCalls,
    serve_model,
    usage_of,
)

KEY_ENV = "COORDINATOR_TEST_OPENAI_KEY"


def bare(reply: ModelReply) -> ModelReply:
    """The reply without its usage (tested on its own)."""
    return attrs.evolve(reply, usage=None)


NO_WAIT = (0.0, 0.0, 0.0, 0.0)

SHELL = ToolSpec(
    name="shell",
    description="Run a shell command.",
    parameters={"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)

HISTORY = (
    ChatMessage(role="system", content="You are terse."),
    ChatMessage(role="user", content="list files"),
    ChatMessage(
        role="assistant",
        content=None,
        tool_calls=(ModelToolCall(id="call_1", name="shell", input={"command": "ls"}),),
    ),
    ChatMessage(role="tool", tool_call_id="call_1", content='{"exit_code": 0, "stdout": "a.txt\\n"}'),
    ChatMessage(role="assistant", content="There is a.txt."),
    ChatMessage(role="user", content="thanks"),
)

HISTORY_JSON = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "list files"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "shell", "arguments": '{"command": "ls"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"exit_code": 0, "stdout": "a.txt\\n"}'},
    {"role": "assistant", "content": "There is a.txt."},
    {"role": "user", "content": "thanks"},
]


def request(
    *, messages: tuple[ChatMessage, ...] = HISTORY, tools: tuple[ToolSpec, ...] = (SHELL,)
) -> ModelRequest:
    return ModelRequest(session_id="ses_1", index=0, messages=messages, tools=tools)


@asynccontextmanager
async def open_model(base_url: str, **options: Any) -> AsyncIterator[OpenAIModel]:
    config = ModelConfig(provider="openai", base_url=base_url, name="gpt-test", api_key_env=KEY_ENV)
    model = OpenAIModel.from_config(config, **{"backoff": NO_WAIT, **options})
    try:
        yield model
    finally:
        with trio.move_on_after(2, shield=True):
            await model.aclose()


@asynccontextmanager
async def served(replies: Any, **options: Any) -> AsyncIterator[tuple[MockModel, OpenAIModel]]:
    async with serve_model(replies) as mock, open_model(mock.base_url, **options) as model:
        yield mock, model


# --- pure parts -------------------------------------------------------------------------------------


def test_request_body_is_openai_chat_format() -> None:
    """Servers only understand their own wire format, so history and tools must map onto it exactly."""
    assert build_request_body(request(), "gpt-test") == {
        "model": "gpt-test",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": HISTORY_JSON,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "shell",
                    "description": SHELL.description,
                    "parameters": SHELL.parameters,
                },
            }
        ],
    }


def test_request_body_omits_empty_tools() -> None:
    """Some servers reject an empty tools list, so a request without tools must not send one."""
    body = build_request_body(request(messages=HISTORY[:2], tools=()), "m")
    assert body == {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": HISTORY_JSON[:2],
    }


def test_assemble_reply_joins_interleaved_fragments_by_index() -> None:
    """Providers may interleave the argument fragments of parallel calls; the index keeps them apart."""
    deltas = [
        {"content": "Hel"},
        {"content": "lo"},
        {
            "tool_calls": [
                {"index": 1, "id": "b", "type": "function", "function": {"name": "y", "arguments": ""}}
            ]
        },
        {
            "tool_calls": [
                {"index": 0, "id": "a", "type": "function", "function": {"name": "x", "arguments": '{"n'}}
            ]
        },
        {"tool_calls": [{"index": 1, "function": {"arguments": '{"m": [1,'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '": 1}'}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": " 2]}"}}]},
    ]
    chunks = [{"choices": [{"index": 0, "delta": delta}]} for delta in deltas]
    assert assemble_reply(chunks) == ModelReply(
        text="Hello",
        tool_calls=(
            ModelToolCall(id="a", name="x", input={"n": 1}),
            ModelToolCall(id="b", name="y", input={"m": [1, 2]}),
        ),
    )


def test_invalid_arguments_name_the_call() -> None:
    """An operator reading the turn's error must see which call the model botched."""
    fragment = {"index": 0, "id": "call_9", "function": {"name": "shell", "arguments": '{"command": '}}
    with pytest.raises(ModelError, match=r"call_9 \(shell\)"):
        assemble_reply([{"choices": [{"delta": {"tool_calls": [fragment]}}]}])


def test_chunks_stop_at_done_and_reject_stream_errors() -> None:
    """Data after [DONE] is not part of the reply, and an in-stream error object is a failure, not text."""
    assert chunks_from_payloads(['{"choices": []}', "[DONE]", "not json"]) == [{"choices": []}]
    with pytest.raises(ModelError, match="overloaded"):
        chunks_from_payloads(['{"error": {"message": "overloaded"}}'])


def test_sse_decoder_joins_data_lines_and_skips_comments() -> None:
    """SSE allows multi-line data and comment keep-alives; neither may corrupt a chunk."""
    decoder = SSEDecoder()
    body = b": keep-alive\n\nevent: chunk\ndata: {\ndata:  1}\n\ndata: [DONE]"
    assert decoder.feed(body) == ["{\n 1}"]
    assert decoder.close() == ["[DONE]"]
    assert decoder.close() == []


STREAM = (
    'data: {"a": "h\u00e9llo \u2014 \U0001f600"}\r\n\r\n'  # CRLF lines, multi-byte text
    ": comment\r\r"  # bare CR lines
    "data: one\ndata: two\n\n"
    "data: [DONE]\n\n"
).encode()
PAYLOADS = ['{"a": "h\u00e9llo \u2014 \U0001f600"}', "one\ntwo", "[DONE]"]


def test_sse_decoder_gives_the_same_events_wherever_the_reads_split() -> None:
    """A read may end anywhere: inside a line, between CR and LF, inside a multi-byte character."""
    for cut in range(len(STREAM) + 1):
        decoder = SSEDecoder()
        assert decoder.feed(STREAM[:cut]) + decoder.feed(STREAM[cut:]) + decoder.close() == PAYLOADS, cut
    decoder = SSEDecoder()
    one_byte_reads = [
        payload for index in range(len(STREAM)) for payload in decoder.feed(STREAM[index : index + 1])
    ]
    assert one_byte_reads + decoder.close() == PAYLOADS


def test_sse_decoder_decodes_every_event_a_read_completes_at_once() -> None:
    """A read that brings many chunks (a busy process reading late) yields them all, in order."""
    decoder = SSEDecoder()
    many = b"".join(b"data: %d\n\n" % index for index in range(50))
    assert decoder.feed(many + b"data: 5") == [str(index) for index in range(50)]
    assert decoder.feed(b"0\n\n") == ["50"]


def test_retry_delay_prefers_the_servers_wish_up_to_the_cap() -> None:
    """Retry-After is the server's own estimate, but one header must not stall a step for minutes."""
    backoff = (0.5, 1.0)
    assert retry_delay(1, Transient(detail="x", status=500), backoff, cap=30) == 1.0
    assert retry_delay(0, Transient(detail="x", status=429, retry_after=3), backoff, cap=30) == 3
    assert retry_delay(0, Transient(detail="x", status=429, retry_after=300), backoff, cap=30) == 30
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert parse_retry_after(None) is None


# --- over HTTP --------------------------------------------------------------------------------------


async def test_text_reply_is_joined_from_deltas() -> None:
    """A streamed text reply arrives in many small deltas and must come back whole and in order."""
    async with served([Text(text="Hello there, how can I help?")]) as (_, model):
        assert bare(await model.complete(request())) == ModelReply(text="Hello there, how can I help?")


async def test_parallel_tool_calls_are_assembled_from_split_arguments() -> None:
    """Arguments stream in fragments per call; two parallel calls must each get their own input."""
    calls = (
        Call(id="call_a", name="shell", input={"command": "echo 'hé' && ls -la", "timeout": 5}),
        Call(id="call_b", name="question", input={"questions": [{"id": "q1", "prompt": "ok?"}]}),
    )
    async with served([ToolCalls(calls=calls, text="Running both.")]) as (_, model):
        reply = await model.complete(request())
    assert bare(reply) == ModelReply(
        text="Running both.",
        tool_calls=tuple(ModelToolCall(id=c.id, name=c.name, input=c.input) for c in calls),
    )


async def test_server_receives_the_exact_request_body() -> None:
    """Tool results must reach the model paired with the calls that asked for them."""
    async with served([{"text": "ok"}]) as (mock, model):
        assert bare(await model.complete(request())) == ModelReply(text="ok")
    assert mock.requests == [build_request_body(request(), "gpt-test")]
    assert mock.requests[0]["messages"] == HISTORY_JSON
    assert [tool["function"]["name"] for tool in mock.requests[0]["tools"]] == ["shell"]


async def test_non_streamed_json_reply_is_accepted() -> None:
    """Some compatible servers ignore stream=true and answer one JSON object; that is still a reply."""
    calls = (Call(id="c1", name="shell", input={"command": "pwd"}),)
    async with served([ToolCalls(calls=calls, text="", streamed=False)]) as (_, model):
        reply = await model.complete(request())
    assert bare(reply) == ModelReply(
        tool_calls=(ModelToolCall(id="c1", name="shell", input={"command": "pwd"}),)
    )


async def test_server_errors_are_retried_until_success() -> None:
    """A transient 5xx must not fail a turn while the provider recovers."""
    replies = [HttpError(status=500), HttpError(status=502), Text(text="recovered")]
    async with served(replies) as (mock, model):
        assert bare(await model.complete(request())) == ModelReply(text="recovered")
    assert len(mock.requests) == 3


async def test_dropped_stream_is_retried_whole() -> None:
    """A connection cut mid-stream is a transport error; the partial text must not leak into the reply."""
    async with served([Drop(text="partial "), Text(text="whole")]) as (mock, model):
        assert bare(await model.complete(request())) == ModelReply(text="whole")
    assert len(mock.requests) == 2


async def test_rate_limit_waits_for_retry_after_up_to_the_cap() -> None:
    """A 429's Retry-After is honoured (here capped at 0.2 s) before the request is sent again."""
    replies = [HttpError(status=429, retry_after="1"), Text(text="ok")]
    async with served(replies, retry_after_cap=0.2) as (mock, model):
        started = trio.current_time()
        assert bare(await model.complete(request())) == ModelReply(text="ok")
        elapsed = trio.current_time() - started
    assert len(mock.requests) == 2
    assert 0.2 <= elapsed < 1.0


async def test_gives_up_after_the_retries_with_status_and_body() -> None:
    """After the last retry the turn must fail with an error saying what the provider answered."""
    async with served([HttpError(status=503, message="upstream overloaded")]) as (mock, model):
        with pytest.raises(ModelError) as raised:
            await model.complete(request())
    assert len(mock.requests) == 1 + len(NO_WAIT)
    assert "after 5 attempts" in str(raised.value)
    assert "HTTP 503" in str(raised.value)
    assert "upstream overloaded" in str(raised.value)


async def test_client_error_fails_at_once() -> None:
    """A 400 will not get better by asking again, so it must not be retried."""
    async with served([HttpError(status=400, message="bad tools schema"), Text(text="never")]) as (
        mock,
        model,
    ):
        with pytest.raises(ModelError, match=r"HTTP 400 .*bad tools schema"):
            await model.complete(request())
    assert len(mock.requests) == 1


async def test_unreachable_server_fails_after_retries() -> None:
    """Connection errors are retried like 5xx and then reported, never hung on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with open_model(f"http://127.0.0.1:{port}/v1") as model:
        with pytest.raises(ModelError, match="ConnectError"):
            await model.complete(request())


async def test_malformed_chunk_is_a_model_error() -> None:
    """A stream that is not JSON must fail the step rather than yield a garbled reply."""
    async with served([RawEvents(payloads=("{not json", "[DONE]"))]) as (_, model):
        with pytest.raises(ModelError, match="malformed stream chunk"):
            await model.complete(request())


async def test_cancel_mid_stream_closes_the_connection_promptly() -> None:
    """A stopped step must not keep a provider stream (and its bill) running."""
    async with served([Hang(text="thinking")]) as (mock, model):
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(model.complete, request())
                await mock.wait_for_hanging()
                cancelled_at = trio.current_time()
                nursery.cancel_scope.cancel()
            assert trio.current_time() - cancelled_at < 1.0
            await mock.wait_for_aborted(1)
        assert len(mock.requests) == 1


async def test_requests_beyond_max_streams_wait_for_a_slot_not_for_the_pool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With every stream slot taken, the next request waits, unsent, however long (never a pool
    timeout), says so once in the log, and goes out as soon as a stream ends."""

    def replies(index: int, body: dict[str, Any]) -> Text | Hang:
        return Hang(text=f"hanging {index}") if index < 2 else Text(text=f"answer {index}")

    config = ModelConfig(provider="openai", base_url="", name="gpt-test", api_key_env="", max_streams=2)
    async with serve_model(replies) as mock:
        model = OpenAIModel.from_config(
            attrs.evolve(config, base_url=mock.base_url),
            backoff=NO_WAIT,
            timeout=httpx.Timeout(5.0, pool=0.01),
        )
        results: list[ModelReply] = []
        answered = trio.Event()

        async def third() -> None:
            results.append(await model.complete(request()))
            answered.set()

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                first = trio.CancelScope()

                async def hanging() -> None:
                    with first:
                        await model.complete(request())

                nursery.start_soon(hanging)
                nursery.start_soon(model.complete, request())
                await mock.wait_for_hanging(2)
                nursery.start_soon(third)
                await trio.sleep(0.2)  # twenty times the pool timeout
                assert len(mock.requests) == 2
                first.cancel()
                await answered.wait()
                nursery.cancel_scope.cancel()
        await model.aclose()
    assert bare(results[0]) == ModelReply(text="answer 2")
    full = [record.getMessage() for record in caplog.records if "model_streams_full" in record.getMessage()]
    assert len(full) == 1 and "max_streams=2" in full[0]


async def test_empty_api_key_sends_no_authorization(monkeypatch: pytest.MonkeyPatch) -> None:
    """Local servers take no key; an empty 'Bearer ' header would be rejected by some of them."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    async with served(lambda index, body: Text(text=f"{index}:{body['model']}")) as (mock, model):
        assert bare(await model.complete(request())) == ModelReply(text="0:gpt-test")
    assert "authorization" not in mock.headers[0]


async def test_api_key_from_env_is_sent_as_bearer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key lives in the named env var, never in the config file."""
    monkeypatch.setenv(KEY_ENV, "sk-test-123")
    async with served([Text(text="ok")]) as (mock, model):
        await model.complete(request())
    assert mock.headers[0]["authorization"] == "Bearer sk-test-123"


@attrs.define
class Pieces:
    """A ``TextSink`` recording what the client streamed, and how often it started over."""

    pieces: list[str] = attrs.Factory(list)
    restarts: int = 0

    def append(self, piece: str) -> None:
        self.pieces.append(piece)

    def restart(self) -> None:
        self.restarts += 1
        self.pieces.clear()

    async def between_chunks(self) -> None:
        await trio.lowlevel.checkpoint()


async def test_text_streams_to_the_sink_as_it_arrives_and_usage_is_reported() -> None:
    """Deltas need the text piece by piece, in order; usage is what the endpoint reported."""
    sink = Pieces()
    async with served([Text(text="Hello there, friend")]) as (mock, model):
        reply = await model.complete(attrs.evolve(request(), text=sink))
    assert sink.pieces == ["Hell", "o th", "ere,", " fri", "end"]
    assert reply.text == "Hello there, friend"
    expected = usage_of(mock.requests[0], reply.text)
    assert reply.usage == Usage(
        input_tokens=expected["prompt_tokens"], output_tokens=expected["completion_tokens"]
    )


@pytest.mark.parametrize("done", [True, False])
async def test_a_stream_without_finish_reason_is_retried_then_fails(done: bool) -> None:
    """A clean but early end is a cut, never a whole answer: retried, then a model error saying so."""
    sink = Pieces()
    async with served([Cut(text="half a sen", done=done)]) as (mock, model):
        with pytest.raises(ModelError, match="cut short") as raised:
            await model.complete(attrs.evolve(request(), text=sink))
    assert len(mock.requests) == 1 + len(NO_WAIT)
    assert "after 5 attempts" in str(raised.value)
    assert sink.restarts == len(NO_WAIT)
    assert "".join(sink.pieces) == "half a sen"


async def test_a_cut_stream_that_recovers_on_retry_restarts_the_text() -> None:
    """The retry's text replaces the cut one: nothing of the first attempt leaks into the reply."""
    sink = Pieces()
    async with served([Cut(text="half"), Text(text="whole answer")]) as (_, model):
        reply = await model.complete(attrs.evolve(request(), text=sink))
    assert reply.text == "whole answer"
    assert "".join(sink.pieces) == "whole answer"
    assert sink.restarts == 1
