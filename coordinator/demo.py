"""``coordinator demo``: six short stories on a temporary database, each turn's events printed readably.

1. a normal turn: the model runs a shell command, then answers;
2. a declined turn: the user rejects the command, so the turn ends declined and the claim is released;
3. an interrupted permission wait: the request is revoked and every client is told;
4. a shutdown with its resume: the wait is kept, and the next start restores it with the same id;
5. an interrupt while the model writes: what it had written is kept, in the event and the history;
6. a sub-agent: a `task` call runs a child session; the parent's interrupt reaches the child first.

The model's text is printed as it streams, in pieces (``session.text.delta``, live only, no seq).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TextIO

import trio

from coordinator import Coordinator, open_coordinator
from coordinator.config import Config
from coordinator.event_lines import Printer
from coordinator.models.scripted import ScriptedModel
from coordinator.records import Rule

RULES = (Rule(action="*", resource="*", effect="allow"), Rule(action="shell", resource="*", effect="ask"))
ECHO = {
    "tool_calls": [{"id": "call_echo", "name": "shell", "input": {"command": "echo hello from the demo"}}]
}
# Streamed in pieces, so the demo shows the model's text arriving as live deltas.
DONE = {"chunks": ["The command ", "printed ", "its ", "greeting."], "chunk_delay": 0.05}
STORY = {"chunks": ["Once ", "upon ", "a ", "time, ", "a ", "turn ", "was ", "stopped."], "chunk_delay": 0.1}
# The parent delegates to a sub-agent titled "helper", which asks to run the command.
DELEGATE = {
    "tool_calls": [{"id": "call_task", "name": "task", "input": {"prompt": "say hello", "title": "helper"}}]
}
SUB_AGENT_SCRIPT = {"*": [DELEGATE, {"text": "done"}], "helper": [ECHO, DONE]}


@contextlib.asynccontextmanager
async def _watched(
    db: Path, script: Any, printer: Printer, after: int
) -> AsyncIterator[tuple[Coordinator, Callable[[str], Any]]]:
    """A coordinator on ``db`` whose events after seq ``after`` are printed as they come."""
    config = Config(permission=RULES, base_dir=db.parent).with_overrides(db=str(db))
    seen: dict[str, trio.Event] = {}

    async def wait_for(type: str) -> None:
        await seen.setdefault(type, trio.Event()).wait()

    async with open_coordinator(config, model=ScriptedModel.from_json(script), synchronous="normal") as coord:
        async with trio.open_nursery() as nursery:

            async def show() -> None:
                async for event in coord.subscribe(after=after, deltas=True):
                    printer.event(event)
                    seen.setdefault(event.type, trio.Event()).set()

            nursery.start_soon(show)
            yield coord, wait_for
            await coord.shutdown()


async def _request_id(coord: Coordinator, session_id: str) -> str:
    pending = await coord.pending_permissions(session_id)
    return pending[0].id


async def _story(db: Path, printer: Printer, title: str, script: Any, act: Any) -> None:
    printer.title(title)
    async with _watched(db, script, printer, printer.last_seq) as (coord, wait_for):
        session = await coord.create_session(title=title)
        await coord.prompt(session.id, "say hello")
        await act(coord, session.id, wait_for, printer)


async def _approve(coord: Coordinator, session_id: str, wait_for: Any, printer: Printer) -> None:
    await wait_for("permission.asked")
    printer.note("the user allows the command once")
    await coord.reply_permission(session_id, await _request_id(coord, session_id), "once")
    await wait_for("session.idle")


async def _reject(coord: Coordinator, session_id: str, wait_for: Any, printer: Printer) -> None:
    await wait_for("permission.asked")
    printer.note("the user rejects the command")
    await coord.reply_permission(session_id, await _request_id(coord, session_id), "reject")
    await wait_for("session.idle")
    info = await coord.get_session(session_id)
    printer.note(f"claim {info.claim}, last outcome {info.last_outcome}: nothing will resume this turn")


async def _interrupt(coord: Coordinator, session_id: str, wait_for: Any, printer: Printer) -> None:
    await wait_for("permission.asked")
    printer.note("the user presses stop while the permission prompt is open")
    await coord.interrupt(session_id)
    await wait_for("session.idle")
    printer.note("the prompt was revoked, so every client removes it: no reply will ever 404")


async def _shutdown_and_resume(db: Path, printer: Printer) -> None:
    printer.title("4. A shutdown keeps the wait; the next start restores it")
    async with _watched(db, [ECHO, DONE], printer, printer.last_seq) as (coord, wait_for):
        session = await coord.create_session(title="shutdown")
        await coord.prompt(session.id, "say hello")
        await wait_for("permission.asked")
        printer.note("the server shuts down while the prompt is open")
    printer.note("the server starts again on the same database")
    async with _watched(db, [DONE], printer, printer.last_seq) as (coord, wait_for):
        await wait_for("permission.asked")
        printer.note("the user allows the restored request, by its original id")
        await coord.reply_permission(session.id, await _request_id(coord, session.id), "once")
        await wait_for("session.idle")


async def _interrupt_mid_stream(coord: Coordinator, session_id: str, wait_for: Any, printer: Printer) -> None:
    await wait_for("session.text.delta")
    await trio.sleep(0.15)
    printer.note("the user presses stop while the model is writing")
    await coord.interrupt(session_id)
    await wait_for("session.idle")
    history = await coord.history(session_id)
    kept = history[-1].parts[0]
    printer.note(
        f"the history keeps {getattr(kept, 'text', '')!r} with status {getattr(kept, 'status', '')!r}"
    )


async def _interrupt_the_parent(coord: Coordinator, session_id: str, wait_for: Any, printer: Printer) -> None:
    await wait_for("permission.asked")
    asked = await coord.pending_permissions(session_id)
    printer.note(f"the parent's pending list shows its sub-agent's request ({asked[0].session_id})")
    printer.note("the user presses stop on the parent")
    await coord.interrupt(session_id)
    await wait_for("session.idle")
    child = await coord.get_session(asked[0].session_id)
    printer.note(
        f"the sub-agent settled first, stopped with its parent's reason: last outcome {child.last_outcome}"
    )


async def run_demo(out: TextIO, *, colour: bool) -> None:
    printer = Printer(out=out, colour=colour)
    with tempfile.TemporaryDirectory(prefix="coordinator-demo-") as folder:
        db = Path(folder) / "demo.sqlite"
        await _story(db, printer, "1. A normal turn", [ECHO, DONE], _approve)
        await _story(db, printer, "2. A declined tool call ends the turn as declined", [ECHO, DONE], _reject)
        await _story(db, printer, "3. An interrupted permission wait is revoked", [ECHO, DONE], _interrupt)
        await _shutdown_and_resume(db, printer)
        title = "5. An interrupt while the model writes keeps what it wrote"
        await _story(db, printer, title, [STORY], _interrupt_mid_stream)
        title = "6. A sub-agent: the parent's stop reaches its child first"
        await _story(db, printer, title, SUB_AGENT_SCRIPT, _interrupt_the_parent)
    out.write("\n")


def main(args: Any = None) -> int:
    """Run the six stories and print them; exit code 0."""
    trio.run(lambda: run_demo(sys.stdout, colour=sys.stdout.isatty()))
    return 0
