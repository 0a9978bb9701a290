"""Seed 002: an execute call that stops for any reason keeps its finished nested results and its logs.

Whole turns through the embedding API, with a real runner process. A plugin ``slow_wait`` is the nested
tool that finishes (0.05 s) or hangs (600 s).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import coordinator.tools.execute as execute_tool
import coordinator.tools.execute_script
from coordinator import Coordinator, open_coordinator, wire
from coordinator.config import Config, PluginConfig, TimeoutsConfig
from coordinator.events import Event
from coordinator.records import Rule, ToolPart
from tests.conftest import Recorder, RecordingModel, make_config
from tests.processes import wait_gone

PLUGIN_MODULE = "execute_scenario_tools"
PLUGIN_SOURCE = '''
import trio

async def slow_wait(seconds: float) -> str:
    """Wait for the given number of seconds."""
    await trio.sleep(seconds)
    return f"waited {seconds}s: FIRST_RESULT_42"

_parties: dict = {}

async def rendezvous(key: str, parties: int) -> int:
    """Return once `parties` calls with this key wait together: only concurrent calls can pass."""
    state = _parties.setdefault(key, {"arrived": 0, "all": trio.Event()})
    state["arrived"] += 1
    arrived = state["arrived"]
    if arrived >= parties:
        state["all"].set()
    await state["all"].wait()
    return arrived
'''

ALLOW_ALL = (Rule(action="*", resource="*", effect="allow"),)

SEED_SCRIPT = """\
first = await tools.slow_wait(seconds=0.05)
print("first:", first)
await tools.slow_wait(seconds=600)
return first
"""
FIRST_OUTPUT = "waited 0.05s: FIRST_RESULT_42"
FIRST_LOG = f"first: {FIRST_OUTPUT}"

RUN_UP = [
    "session.created",
    "session.turn.started",
    "session.step.started",
    "session.tool.started",  # call_exec
    "session.tool.started",  # call_exec.1
    "session.tool.succeeded",
    "session.tool.progress",  # nested call_exec.1
    "session.tool.progress",  # log "first: ..."
    "session.tool.started",  # call_exec.2
]


def execute_call(code: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": "call_exec", "name": "execute", "input": {"code": code}}]}


def config_for(
    tmp_path: Path, *, rules: tuple[Rule, ...] = ALLOW_ALL, timeouts: TimeoutsConfig | None = None
) -> Config:
    (tmp_path / f"{PLUGIN_MODULE}.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
    config = make_config(tmp_path, rules=rules, timeouts=timeouts)
    plugins = (
        PluginConfig(entry=f"{PLUGIN_MODULE}:slow_wait"),
        PluginConfig(entry=f"{PLUGIN_MODULE}:rendezvous"),
    )
    return attrs.evolve(config, plugin=plugins)


@contextlib.asynccontextmanager
async def running(
    config: Config, model: RecordingModel, **options: Any
) -> AsyncIterator[tuple[Coordinator, Recorder]]:
    """``tests.conftest.running`` with a model of the test's own (that one builds its own)."""
    async with open_coordinator(config, model=model, synchronous="normal", **options) as coord:
        recorder = Recorder()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_record, coord, recorder)
            yield coord, recorder
            nursery.cancel_scope.cancel()


async def _record(coord: Coordinator, recorder: Recorder) -> None:
    async for event in coord.subscribe(after=0):
        recorder.add(event)


async def wait_for_log(recorder: Recorder, prefix: str) -> str:
    """The first progress log line that starts with ``prefix``, once it is published."""
    count = 1
    while True:
        event = await recorder.wait_for("session.tool.progress", count)
        line = event.payload.get("log")
        if isinstance(line, str) and line.startswith(prefix):
            return line
        count += 1


async def start(coord: Coordinator, prompt: str = "run the script") -> str:
    session = await coord.create_session(title="execute")
    await coord.prompt(session.id, prompt)
    return session.id


def failed_event(recorder: Recorder, call_id: str) -> Event:
    return next(e for e in recorder.of("session.tool.failed") if e.payload["call_id"] == call_id)


def first_call_record() -> dict[str, Any]:
    return {
        "call_id": "call_exec.1",
        "name": "slow_wait",
        "input": {"seconds": 0.05},
        "status": "succeeded",
        "output": FIRST_OUTPUT,
    }


async def test_interrupt_keeps_the_finished_call_and_the_log_for_the_next_request(tmp_path: Path) -> None:
    """The seed: the model's next request must carry the finished nested result and the printed line."""
    model = RecordingModel.from_json([execute_call(SEED_SCRIPT), {"text": "follow-up"}])
    async with running(config_for(tmp_path), model) as (coord, recorder):
        session_id = await start(coord)
        await recorder.wait_for("session.tool.started", count=3)
        assert await coord.interrupt(session_id)
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id) == [
            *RUN_UP,
            "session.tool.failed",  # call_exec.2, before its parent
            "session.tool.failed",  # call_exec
            "session.step.failed",
            "session.execution.interrupted",
            "session.idle",
        ]
        nested, execute = recorder.of("session.tool.failed")
        assert nested.payload["call_id"] == "call_exec.2"
        assert nested.payload["error"]["type"] == "interrupted"
        assert execute.payload["call_id"] == "call_exec"
        assert execute.payload["error"]["type"] == "interrupted"
        assert execute.payload["partial"] == {"logs": [FIRST_LOG], "calls": [first_call_record()]}
        history = await coord.history(session_id)
        part = next(p for m in history for p in m.parts if isinstance(p, ToolPart))
        assert wire.unstructure(part.partial) == execute.payload["partial"]  # the store and the event agree

        await coord.prompt(session_id, "what did the first call return?")
        await recorder.wait_for("session.idle", count=2)
    tool_messages = [m for m in model.requests[-1].messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["call_exec"]
    received = json.loads(tool_messages[0].content or "")
    assert received["error"]["type"] == "interrupted"
    assert received["partial"]["logs"] == [FIRST_LOG]
    assert received["partial"]["calls"] == [first_call_record()]


async def test_execute_deadline_fails_the_call_with_its_partial_and_the_turn_goes_on(tmp_path: Path) -> None:
    """A timed-out execute is a tool failure the model sees, with the work it finished, not a stop."""
    config = config_for(tmp_path, timeouts=TimeoutsConfig(execute=0.8))
    model = RecordingModel.from_json([execute_call(SEED_SCRIPT), {"text": "done"}])
    async with running(config, model) as (coord, recorder):
        session_id = await start(coord)
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id) == [
            *RUN_UP,
            "session.tool.failed",  # call_exec.2
            "session.tool.failed",  # call_exec
            "session.step.succeeded",
            "session.step.started",
            "session.step.succeeded",
            "session.execution.succeeded",
            "session.idle",
        ]
        execute = failed_event(recorder, "call_exec")
        assert execute.payload["error"] == {
            "type": "timeout",
            "message": "the execute deadline of 0.8s passed",
            "started": True,
        }
        assert execute.payload["partial"] == {"logs": [FIRST_LOG], "calls": [first_call_record()]}
    received = json.loads(model.requests[1].messages[-1].content or "")
    assert received["partial"]["calls"] == [first_call_record()]


async def test_execute_deadline_fails_the_running_nested_call_as_timeout(tmp_path: Path) -> None:
    """The nested call cut off by its parent's deadline must say so, not report a reason-less stop."""
    config = config_for(tmp_path, timeouts=TimeoutsConfig(execute=0.8))
    model = RecordingModel.from_json([execute_call(SEED_SCRIPT), {"text": "done"}])
    async with running(config, model) as (coord, recorder):
        await start(coord)
        await recorder.wait_for("session.idle")
        assert failed_event(recorder, "call_exec.2").payload["error"]["type"] == "timeout"


async def test_tool_deadline_fails_one_nested_call_and_the_script_may_catch_it(tmp_path: Path) -> None:
    """``[timeouts] tool`` bounds each nested call; the script sees a ToolError and goes on."""
    code = """\
try:
    await tools.slow_wait(seconds=600)
except ToolError as error:
    print("caught", error.type)
return "went on"
"""
    config = config_for(tmp_path, timeouts=TimeoutsConfig(tool=0.3))
    model = RecordingModel.from_json([execute_call(code), {"text": "done"}])
    async with running(config, model) as (coord, recorder):
        session_id = await start(coord)
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id)[3:9] == [
            "session.tool.started",
            "session.tool.started",
            "session.tool.failed",
            "session.tool.progress",
            "session.tool.progress",
            "session.tool.succeeded",
        ]
        nested = failed_event(recorder, "call_exec.1")
        assert nested.payload["error"] == {
            "type": "timeout",
            "message": "the tool deadline of 0.3s passed",
            "started": True,
        }
        output = recorder.of("session.tool.succeeded")[0].payload["output"]
        assert output["result"] == "went on"
        assert output["logs"] == ["caught timeout"]
        assert output["calls"] == [
            {
                "call_id": "call_exec.1",
                "name": "slow_wait",
                "input": {"seconds": 600},
                "status": "failed",
                "output": {"type": "timeout", "message": "the tool deadline of 0.3s passed", "started": True},
            }
        ]


async def test_shutdown_keeps_the_partial_and_suspends_the_turn(tmp_path: Path) -> None:
    """A shutdown mid-script settles the call with its partial; the resumed turn's model request has it."""
    config = config_for(tmp_path)
    model = RecordingModel.from_json([execute_call(SEED_SCRIPT), {"text": "never"}])
    async with running(config, model) as (coord, recorder):
        session_id = await start(coord)
        await recorder.wait_for("session.tool.started", count=3)
    resumed = RecordingModel.from_json([{"text": "resumed"}])
    async with running(config, resumed) as (coord, recorder):
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id)[: len(RUN_UP) + 4] == [
            *RUN_UP,
            "session.tool.failed",  # call_exec.2
            "session.tool.failed",  # call_exec
            "session.step.failed",
            "session.execution.suspended",
        ]
        execute = failed_event(recorder, "call_exec")
        assert execute.payload["error"]["type"] == "interrupted"
        assert execute.payload["partial"] == {"logs": [FIRST_LOG], "calls": [first_call_record()]}
        assert "session.execution.resumed" in recorder.types(session_id)
    tool_message = next(m for m in resumed.requests[0].messages if m.role == "tool")
    assert json.loads(tool_message.content or "")["partial"]["logs"] == [FIRST_LOG]


async def test_declined_nested_call_stops_the_turn_and_the_script_cannot_catch_it(tmp_path: Path) -> None:
    """A reject is the user's stop: the script dies, execute settles declined with its partial first."""
    code = """\
first = await tools.slow_wait(seconds=0.05)
print("first:", first)
try:
    await tools.slow_wait(seconds=600)
except BaseException:
    print("caught the decline")
    return "ignored it"
"""
    rules = (*ALLOW_ALL, Rule(action="slow_wait", resource="*", effect="ask"))
    model = RecordingModel.from_json([execute_call(code), {"text": "never"}])
    async with running(config_for(tmp_path, rules=rules), model) as (coord, recorder):
        session_id = await start(coord)
        asked = await recorder.wait_for("permission.asked")
        await coord.reply_permission(session_id, asked.payload["request"]["id"], "once")
        asked = await recorder.wait_for("permission.asked", count=2)
        await coord.reply_permission(session_id, asked.payload["request"]["id"], "reject")
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id) == [
            "session.created",
            "session.turn.started",
            "session.step.started",
            "session.tool.started",
            "session.tool.started",
            "permission.asked",
            "permission.replied",
            "session.tool.succeeded",
            "session.tool.progress",
            "session.tool.progress",
            "session.tool.started",
            "permission.asked",
            "permission.replied",
            "session.tool.failed",  # call_exec.2
            "session.tool.failed",  # call_exec
            "session.step.failed",
            "session.execution.interrupted",
            "session.idle",
        ]
        assert failed_event(recorder, "call_exec.2").payload["error"]["type"] == "declined"
        execute = failed_event(recorder, "call_exec")
        assert execute.payload["error"]["type"] == "declined"
        assert execute.payload["partial"] == {"logs": [FIRST_LOG], "calls": [first_call_record()]}
        terminal = recorder.of("session.execution.interrupted")[0]
        assert terminal.payload["reason"] == {
            "type": "declined",
            "via": "permission",
            "call_id": "call_exec.2",
        }
        assert (await coord.get_session(session_id)).last_outcome == "declined"


async def test_reject_with_a_message_is_feedback_the_script_can_catch(tmp_path: Path) -> None:
    """A reject with a message is not a stop: the script gets a declined ToolError and goes on."""
    code = """\
try:
    await tools.slow_wait(seconds=0.05)
except ToolError as error:
    return [error.type, error.message]
"""
    rules = (*ALLOW_ALL, Rule(action="slow_wait", resource="*", effect="ask"))
    model = RecordingModel.from_json([execute_call(code), {"text": "done"}])
    async with running(config_for(tmp_path, rules=rules), model) as (coord, recorder):
        session_id = await start(coord)
        asked = await recorder.wait_for("permission.asked")
        await coord.reply_permission(session_id, asked.payload["request"]["id"], "reject", "not now")
        await recorder.wait_for("session.idle")
        output = recorder.of("session.tool.succeeded")[0].payload["output"]
        assert output["result"] == ["declined", "not now"]
        assert (await coord.get_session(session_id)).last_outcome == "succeeded"


async def test_exception_in_the_script_fails_with_its_traceback_and_partial(tmp_path: Path) -> None:
    """The model needs the script's own traceback (not the runner's) and the work done before it."""
    code = """\
first = await tools.slow_wait(seconds=0.05)
print("before the error")
def explode():
    raise ValueError("boom")
explode()
"""
    model = RecordingModel.from_json([execute_call(code), {"text": "done"}])
    async with running(config_for(tmp_path), model) as (coord, recorder):
        session_id = await start(coord)
        await recorder.wait_for("session.idle")
        assert recorder.types(session_id)[-6:] == [
            "session.tool.failed",
            "session.step.succeeded",
            "session.step.started",
            "session.step.succeeded",
            "session.execution.succeeded",
            "session.idle",
        ]
        execute = failed_event(recorder, "call_exec")
        assert execute.payload["error"] == {
            "type": "error",
            "message": (
                "Traceback (most recent call last):\n"
                '  File "<script>", line 5, in __script__\n'
                "    explode()\n"
                '  File "<script>", line 4, in explode\n'
                '    raise ValueError("boom")\n'
                "ValueError: boom\n"
            ),
            "started": True,
        }
        assert execute.payload["partial"] == {
            "logs": ["before the error"],
            "calls": [{**first_call_record(), "input": {"seconds": 0.05}}],
        }


async def test_uncaught_tool_error_shows_only_the_script_frames(tmp_path: Path) -> None:
    """A failed nested call the script did not catch reads as the script's line, not the runner's."""
    model = RecordingModel.from_json([execute_call("await tools.no_such_tool(x=1)\n"), {"text": "done"}])
    async with running(config_for(tmp_path), model) as (coord, recorder):
        await start(coord)
        await recorder.wait_for("session.idle")
        message = failed_event(recorder, "call_exec").payload["error"]["message"]
        assert message == (
            "Traceback (most recent call last):\n"
            '  File "<script>", line 1, in __script__\n'
            "    await tools.no_such_tool(x=1)\n"
            "ToolError: error: unknown tool 'no_such_tool'\n"
        )
        assert (
            failed_event(recorder, "call_exec.1").payload["error"]["message"] == "unknown tool 'no_such_tool'"
        )


async def test_syntax_error_fails_the_call_before_anything_runs(tmp_path: Path) -> None:
    """A script that does not compile fails as error with the compiler's message and an empty partial."""
    model = RecordingModel.from_json([execute_call("print('a')\nx = = 1\n"), {"text": "done"}])
    async with running(config_for(tmp_path), model) as (coord, recorder):
        await start(coord)
        await recorder.wait_for("session.idle")
        execute = failed_event(recorder, "call_exec")
        message = execute.payload["error"]["message"]
        assert message.startswith('  File "<script>", line 2\n')
        assert message.endswith("SyntaxError: invalid syntax\n")
        assert execute.payload["partial"] == {}  # empty lists are left out of the wire form


async def test_interrupt_kills_a_script_that_ignores_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM is a request; after the grace period the whole group is killed, and the runner reaped."""
    monkeypatch.setattr(coordinator.tools.execute_script, "TERM_GRACE", 0.2)
    code = """\
import os, signal, subprocess
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen(["sleep", "600"])
print("pids", os.getpid(), child.pid)
await asyncio.sleep(600)
"""
    model = RecordingModel.from_json([execute_call(code), {"text": "never"}])
    async with running(config_for(tmp_path), model) as (coord, recorder):
        session_id = await start(coord)
        line = await wait_for_log(recorder, "pids ")
        runner_pid, child_pid = (int(word) for word in line.split()[1:])
        interrupted_at = trio.current_time()
        assert await coord.interrupt(session_id)
        await recorder.wait_for("session.idle")
        assert trio.current_time() - interrupted_at >= 0.2
        with pytest.raises(ProcessLookupError):
            os.kill(runner_pid, 0)  # dead and reaped: a zombie would still take the signal
        # It ignored SIGTERM too: only the group's SIGKILL ends it, which the kernel completes
        # asynchronously for a process that is not ours to reap.
        assert await wait_gone(child_pid)
        execute = failed_event(recorder, "call_exec")
        assert execute.payload["partial"]["logs"] == [line]


async def test_flooding_output_keeps_the_first_lines_and_counts_the_rest(tmp_path: Path) -> None:
    """A script that prints without end must neither grow memory nor lose the note of what was dropped."""
    code = """\
import sys
for i in range(20000):
    print("line", i)
sys.stderr.write("y" * 100000 + "\\n")
return "flooded"
"""
    model = RecordingModel.from_json([execute_call(code), {"text": "done"}])
    async with running(config_for(tmp_path), model) as (coord, recorder):
        await start(coord)
        await recorder.wait_for("session.idle")
        output = recorder.of("session.tool.succeeded")[0].payload["output"]
    assert output["result"] == "flooded"
    logs = output["logs"]
    assert len(logs) == execute_tool.MAX_LOG_LINES + 1
    assert logs[:2] == ["line 0", "line 1"]
    assert logs[999] == "line 999"
    # Past the limits the runner only counts: lines, and their bytes without the newlines.
    dropped_bytes = sum(len(f"line {i}") for i in range(1000, 20000)) + 100000
    assert logs[-1] == (
        f"[... 19001 more lines ({dropped_bytes} bytes) dropped: the log keeps the first 1000 lines and 64 KiB]"
    )


async def test_long_lines_are_cut_whichever_way_they_are_written(tmp_path: Path) -> None:
    """One giant line, through print or the raw file descriptor, keeps its head and says what was cut."""
    code = """\
import os
print("x" * 10000)
os.write(1, b"r" * 10000 + b"\\n")
"""
    model = RecordingModel.from_json([execute_call(code), {"text": "done"}])
    async with running(config_for(tmp_path), model) as (coord, recorder):
        await start(coord)
        await recorder.wait_for("session.idle")
        logs = recorder.of("session.tool.succeeded")[0].payload["output"]["logs"]
    limit = execute_tool.MAX_LINE_BYTES
    # Printed lines and raw writes come through different channels: their order is not kept.
    assert sorted(logs) == [
        "r" * limit + f" [... {10000 - limit} bytes cut]",
        "x" * limit + f" [... {10000 - limit} bytes cut]",
    ]


async def test_the_byte_limit_keeps_whole_lines(tmp_path: Path) -> None:
    """Long lines reach the byte limit before the line limit; the kept lines stay whole and within it."""
    code = """\
for i in range(100):
    print(str(i % 10) * 1000)
"""
    model = RecordingModel.from_json([execute_call(code), {"text": "done"}])
    async with running(config_for(tmp_path), model) as (coord, recorder):
        await start(coord)
        await recorder.wait_for("session.idle")
        logs = recorder.of("session.tool.succeeded")[0].payload["output"]["logs"]
    kept = execute_tool.MAX_LOG_BYTES // 1000
    assert logs[:-1] == [str(i % 10) * 1000 for i in range(kept)]
    assert logs[-1] == (
        f"[... {100 - kept} more lines ({(100 - kept) * 1000} bytes) dropped: "
        "the log keeps the first 1000 lines and 64 KiB]"
    )


async def test_nested_calls_in_asyncio_gather_run_concurrently(tmp_path: Path) -> None:
    """``asyncio.gather`` over nested calls must run them at once: each waits until all have started."""
    # A key of this test's own: the plugin's module (and its counts) outlives a test in the process.
    code = f"""\
arrivals = await asyncio.gather(*(tools.rendezvous(key="{tmp_path.name}", parties=20) for _ in range(20)))
return sorted(arrivals)
"""
    config = config_for(tmp_path, timeouts=TimeoutsConfig(tool=10))
    model = RecordingModel.from_json([execute_call(code), {"text": "done"}])
    async with running(config, model) as (coord, recorder):
        session_id = await start(coord)
        await recorder.wait_for("session.idle")
        types = recorder.types(session_id)
        assert types.count("session.tool.started") == 21
        assert types.count("session.tool.succeeded") == 21
        output = recorder.of("session.tool.succeeded")[-1].payload["output"]
    assert output["result"] == list(range(1, 21))
    assert sorted(call["call_id"] for call in output["calls"]) == sorted(
        f"call_exec.{n}" for n in range(1, 21)
    )
    assert all(call["status"] == "succeeded" for call in output["calls"])


async def test_nested_shell_calls_go_through_permission_rules(tmp_path: Path) -> None:
    """A script's shell call is a real shell call: it runs, a deny rule refuses it, and execute is not nestable."""
    code = """\
out = await tools.shell(command="echo hello from shell")
for attempt in (tools.shell(command="rm -rf nothing"), tools.execute(code="return 1")):
    try:
        await attempt
    except ToolError as error:
        print("refused:", error.type, error.message)
return out["stdout"]
"""
    rules = (*ALLOW_ALL, Rule(action="shell", resource="rm *", effect="deny"))
    model = RecordingModel.from_json([execute_call(code), {"text": "done"}])
    async with running(config_for(tmp_path, rules=rules), model) as (coord, recorder):
        await start(coord)
        await recorder.wait_for("session.idle")
        output = recorder.of("session.tool.succeeded")[-1].payload["output"]
        nested_starts = [
            e.payload for e in recorder.of("session.tool.started") if e.payload.get("parent_call_id")
        ]
    assert output["result"] == "hello from shell\n"
    assert output["logs"] == [
        'refused: denied denied by configured rule action="shell" resource="rm *" effect=deny',
        "refused: error execute cannot be called from a script",
    ]
    assert [(s["call_id"], s["name"]) for s in nested_starts] == [
        ("call_exec.1", "shell"),
        ("call_exec.2", "shell"),
    ]
    assert [call["status"] for call in output["calls"]] == ["succeeded", "failed"]


async def test_script_that_leaves_without_returning_fails(tmp_path: Path) -> None:
    """A runner that dies (``os._exit``) ends the call as error, keeping what the script printed."""
    code = "import os\nprint('going')\nos._exit(3)\n"
    model = RecordingModel.from_json([execute_call(code), {"text": "done"}])
    async with running(config_for(tmp_path), model) as (coord, recorder):
        await start(coord)
        await recorder.wait_for("session.idle")
        execute = failed_event(recorder, "call_exec")
    assert execute.payload["error"] == {
        "type": "error",
        "message": "the script process exited with code 3 before the script returned",
        "started": True,
    }
    assert execute.payload["partial"] == {"logs": ["going"]}


async def test_a_result_that_is_not_json_fails_the_call(tmp_path: Path) -> None:
    """The result goes to the model as JSON; anything else is the script's error, said plainly."""
    model = RecordingModel.from_json([execute_call("return {1, 2}\n"), {"text": "done"}])
    async with running(config_for(tmp_path), model) as (coord, recorder):
        await start(coord)
        await recorder.wait_for("session.idle")
        message = failed_event(recorder, "call_exec").payload["error"]["message"]
    assert message.startswith("TypeError: the script's return value is not JSON-able (set)")
