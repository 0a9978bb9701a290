"""A full disk, I/O errors and a failed sync under the real server, on the rig's filesystem.

While writes fail, the server answers 503 ``StoreUnavailable`` (never a 2xx for what it could not
save), keeps answering reads and logs one line per kind of failure; the turn that was running is left
as after a crash and, once writes succeed again, resumes exactly once without a restart. A failed sync
is never retried as if it had succeeded: the disk here forgets the writes of a failed sync, as Linux
does, and the server writes its whole log again before it takes a write, so what it acknowledges
after the failure survives a cut.
"""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from coordinator import errors
from coordinator.client import CoordinatorClient
from tests.faults.power_cuts import CONFIG, TOKEN, start_server
from tests.faults.rig import Rig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

# One tool call that runs a second (counting its start), then the answer.
SCRIPT = [
    {"tool_calls": [{"id": "a", "name": "counted", "input": {"seconds": 1.0, "tag": "a"}}]},
    {"text": "done"},
]
TERMINAL = {
    "session.execution.succeeded",
    "session.execution.interrupted",
    "session.execution.failed",
    "session.execution.suspended",
}
WAIT_SECONDS = 30.0


@attrs.frozen
class Served:
    folder: Path
    db: Path
    process: trio.Process
    client: CoordinatorClient
    log: Path

    def starts(self) -> list[dict[str, Any]]:
        path = self.folder / "starts.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def logged(self, event: str) -> list[dict[str, Any]]:
        lines = self.log.read_text(errors="replace").splitlines()
        entries = [json.loads(line) for line in lines if line.startswith("{")]
        return [entry for entry in entries if entry.get("event") == event]


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, rig: Rig, life: int = 0, server: str = "") -> AsyncIterator[Served]:
    """A server on the rig; ``server``: more lines of its ``[server]`` table."""
    folder = tmp_path / "site"
    folder.mkdir(exist_ok=True)
    db = rig.mount / "db.sqlite"
    config = CONFIG.format(db=db, token=TOKEN).replace("[server]\n", f"[server]\n{server}", 1)
    (folder / "config.toml").write_text(config)
    (folder / "script.json").write_text(json.dumps(SCRIPT))
    log_path = folder / f"server-{life}.log"
    with log_path.open("wb") as log:
        process, url = await start_server(folder, log, synchronous="full", starts=folder / "starts.jsonl")
        try:
            async with CoordinatorClient(url, TOKEN, timeout=10) as client:
                yield Served(folder=folder, db=db, process=process, client=client, log=log_path)
        finally:
            with trio.CancelScope(shield=True):
                if process.returncode is None:
                    process.send_signal(signal.SIGTERM)
                    with trio.move_on_after(WAIT_SECONDS):
                        await process.wait()
                    if process.returncode is None:
                        process.kill()
                        await process.wait()


async def until(check: Any) -> None:
    """Until ``check()`` holds (what another process writes: its log, its count of starts)."""
    with trio.fail_after(WAIT_SECONDS):
        while True:
            if check():
                return
            await trio.sleep(0.02)


async def session_events(client: CoordinatorClient, session_id: str) -> list[str]:
    return [e["type"] async for e in client.events(after=0, session_id=session_id, follow=False)]


async def settled(client: CoordinatorClient, session_id: str) -> list[str]:
    """The session's event types, once its turn has ended (its terminal event and ``session.idle``)."""
    with trio.fail_after(WAIT_SECONDS):
        while True:
            types = await session_events(client, session_id)
            if any(t in TERMINAL for t in types) and types[-1] == "session.idle":
                return types
            await trio.sleep(0.05)


@pytest.mark.parametrize("fault", ["ENOSPC", "EIO"])
async def test_refused_writes_answer_503_and_the_running_turn_resumes_once_they_succeed(
    tmp_path: Path, rig: Rig, fault: str
) -> None:
    async with serving(tmp_path, rig) as served:
        client = served.client
        session = await client.create_session("working")
        await client.prompt(session.id, "go")
        await until(lambda: served.starts())

        rig.fail(write=fault)
        with pytest.raises(errors.StoreUnavailable) as refused:
            await client.create_session("refused")
        assert "nothing of this request was saved" in refused.value.message
        with pytest.raises(errors.StoreUnavailable):
            await client.prompt(session.id, "refused too")
        assert (await client.get_session(session.id)).id == session.id  # reads are served
        # The tool ends and its result cannot be written: the turn is left as after a crash.
        await until(lambda: served.logged("session_store_failed"))
        assert (await client.get_session(session.id)).status == "busy"

        rig.fail()
        types = await settled(client, session.id)
        # And a write is accepted again.
        await client.create_session("accepted")

    assert served.process.returncode == 0
    assert types.count("session.execution.resumed") == 1
    assert [t for t in types if t in TERMINAL] == ["session.execution.succeeded"]
    assert len(served.starts()) == 1  # the call that started before the failure never ran again
    assert len(served.logged("store_unavailable")) == 1  # one line for two refused requests
    assert [e["refused"] for e in served.logged("store_available")] == [2]
    assert [e["cause"] for e in served.logged("turn_recovered")] == ["store_failed"]


async def test_with_manual_resume_the_turn_a_refused_write_stopped_is_parked_until_a_person_resumes_it(
    tmp_path: Path, rig: Rig
) -> None:
    async with serving(tmp_path, rig, server='resume = "manual"\n') as served:
        client = served.client
        session = await client.create_session("working")
        await client.prompt(session.id, "go")
        await until(lambda: served.starts())
        rig.fail(write="ENOSPC")
        await until(lambda: served.logged("session_store_failed"))
        rig.fail()
        await until(lambda: served.logged("turn_parked"))
        assert (await client.get_session(session.id)).status == "suspended"
        assert "session.execution.resumed" not in await session_events(client, session.id)

        await client.resume(session.id)
        types = await settled(client, session.id)

    assert types.count("session.execution.resumed") == 1
    assert [t for t in types if t in TERMINAL] == ["session.execution.succeeded"]
    assert len(served.starts()) == 1


async def test_after_a_failed_sync_the_server_writes_again_and_what_it_acknowledges_survives_a_cut(
    tmp_path: Path, rig: Rig
) -> None:
    """The disk forgets the writes of a failed sync (as Linux does): the server answers 503 and serves
    reads until the disk takes its log again, then recovers in the same process; a later cut keeps
    everything it acknowledged, after the failure too, and the turn the failure stopped ran once."""
    async with serving(tmp_path, rig) as served:
        client = served.client
        kept = await client.create_session("acknowledged before the failure")
        working = await client.create_session("working")
        await client.prompt(working.id, "go")
        await until(lambda: served.starts())

        rig.fail(sync="EIO")
        # Its commit is made; its sync fails: no 2xx, and the answer says the write may be kept.
        with pytest.raises(errors.StoreUnavailable) as unknown:
            await client.create_session("unknown")
        assert "could not make this request's write durable" in unknown.value.message
        with pytest.raises(errors.StoreUnavailable) as refused:
            await client.create_session("refused")
        assert "nothing of this request was saved" in refused.value.message
        assert (await client.get_session(kept.id)).title == "acknowledged before the failure"
        # The tool ends and its result cannot be written: the turn is left as after a crash.
        await until(lambda: served.logged("session_store_failed"))

        rig.fail()
        types = await settled(client, working.id)
        after = await client.create_session("acknowledged after the recovery")
        assert served.process.returncode is None
        served.process.kill()  # and its sync process with it: nothing more is synced
        await served.process.wait()

    assert len(served.logged("store_sync_failed")) == 1
    assert len(served.logged("store_recovered")) == 1
    assert types.count("session.execution.resumed") == 1
    assert [t for t in types if t in TERMINAL] == ["session.execution.succeeded"]

    rig.cut(seed=1, mode="lose")  # what was written and never synced is gone
    async with serving(tmp_path, rig, life=1) as again:
        titles = {s.id: s.title for s in await again.client.list_sessions()}
        assert titles.get(kept.id) == "acknowledged before the failure"
        assert titles.get(after.id) == "acknowledged after the recovery"
        assert "refused" not in titles.values()
        assert await session_events(again.client, working.id) == types
    assert len(served.starts()) == 1  # the call that started before the failure never ran again
