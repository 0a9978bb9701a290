"""A tool's long-lived process is recorded in the store while it runs, owned by this instance and its
call, and the record is gone once the call settled; a crash leaves the record, and the next start
deletes it. Real processes, on both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from coordinator import Coordinator
from coordinator.chaos import crash
from coordinator.ids import boot_id
from coordinator.records import Rule
from coordinator.store import open_read_view
from coordinator.store.rows import ProcessGroupRow
from tests.conftest import Recorder, make_config, running
from tests.servers import group_gone, wait_group_gone

ALLOW_ALL = (Rule(action="*", resource="*", effect="allow"),)
DONE = {"text": "done"}


def call(name: str, **input: Any) -> dict[str, Any]:
    return {"tool_calls": [{"id": f"call_{name}", "name": name, "input": input}]}


def until_exists(go: Path) -> str:
    """A command that runs until the test creates ``go``."""
    return f"while [ ! -e {go} ]; do sleep 0.01; done; echo done"


async def start(coord: Coordinator) -> str:
    session = await coord.create_session(title="groups")
    await coord.prompt(session.id, "go")
    return session.id


async def recorded(coord: Coordinator, session_id: str, call_id: str) -> ProcessGroupRow:
    """The group the call's tool recorded, once it is committed."""
    with trio.fail_after(10):
        while (group := await coord.store.read(lambda r: r.process_group_of(session_id, call_id))) is None:  # noqa: ASYNC110
            await trio.sleep(0.01)
    return group


async def assert_forgotten(coord: Coordinator, recorder: Recorder, group: ProcessGroupRow) -> None:
    await recorder.wait_for("session.idle")
    assert await coord.store.read(lambda r: r.process_groups_of(coord.instance_id)) == []
    assert await wait_group_gone(group.pgid)


@pytest.mark.parametrize("how", ["succeeds", "interrupted"])
async def test_a_shell_calls_group_is_recorded_while_it_runs_and_forgotten_once_the_call_settles(
    tmp_path: Path, how: str
) -> None:
    """The record names this instance and the call before the command can outlive anything; by the
    call's settlement the group is dead and its record deleted, however the call ended."""
    go = tmp_path / "go"
    config = make_config(tmp_path, rules=ALLOW_ALL)
    async with running(config, [call("shell", command=until_exists(go)), DONE]) as (coord, recorder):
        session_id = await start(coord)
        group = await recorded(coord, session_id, "call_shell")
        assert (group.owner, group.boot_id, group.label) == (coord.instance_id, boot_id(), None)
        assert not group_gone(group.pgid)
        if how == "succeeds":
            go.touch()
        else:
            assert await coord.interrupt(session_id, by="api")
        await assert_forgotten(coord, recorder, group)
        settled = "session.tool.succeeded" if how == "succeeds" else "session.tool.failed"
        assert [e.type for e in recorder.events if e.type.startswith("session.tool.")] == [
            "session.tool.started",
            settled,
        ]


async def test_an_execute_calls_runner_is_recorded_while_its_script_runs(tmp_path: Path) -> None:
    """The script runner is a process group of its own like a shell command, recorded the same way."""
    go = tmp_path / "go"
    code = f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.01)\nreturn 'ran'"
    config = make_config(tmp_path, rules=ALLOW_ALL)
    async with running(config, [call("execute", code=code), DONE]) as (coord, recorder):
        session_id = await start(coord)
        group = await recorded(coord, session_id, "call_execute")
        assert group.owner == coord.instance_id and not group_gone(group.pgid)
        go.touch()
        await assert_forgotten(coord, recorder, group)
        [succeeded] = recorder.of("session.tool.succeeded")
        assert succeeded.payload["output"]["result"] == "ran"


async def test_an_abandoned_coordinators_record_is_deleted_by_the_next_start(tmp_path: Path) -> None:
    """An abandoned coordinator writes nothing more, its record's deletion included: the record
    outlives it, naming its instance, and the next start on the database deletes it."""
    config = make_config(tmp_path, rules=ALLOW_ALL)
    async with running(config, [call("shell", command="exec sleep 60"), DONE]) as (coord, _):
        session_id = await start(coord)
        group = await recorded(coord, session_id, "call_shell")
        await crash(coord)
    with open_read_view(config.server.db) as reader:
        assert reader.process_group_of(session_id, "call_shell") == group
    async with running(config, [DONE]) as (coord, recorder):
        await recorder.wait_for("session.idle")
        assert await coord.store.read(lambda r: r.process_group_of(session_id, "call_shell")) is None
    assert await wait_group_gone(group.pgid)
