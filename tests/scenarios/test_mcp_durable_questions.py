"""A question asked the 2026-07-28 way (the call's result is ``input_required`` with a
``requestState``) is a durable form: answered, it retries the call once with the answer; kept across
a shutdown with the same id; refused by a server that no longer knows its state, it fails the call
with a typed error the model sees."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from tests.conftest import RecordingModel, running
from tests.scenarios.test_mcp_calls import calls, mcp_config, prompted, recorded, until_ready

pytestmark = pytest.mark.slow

ASK = [calls(("fx__ask_state", {})), {"text": "thanks"}]


def kinds(record: Path, kind: str) -> list[dict[str, object]]:
    return [r for r in recorded(record) if r["kind"] == kind]


async def test_an_answer_retries_the_call_once_with_the_servers_state(tmp_path: Path) -> None:
    config, record = mcp_config(tmp_path, revision="")
    async with running(config, ASK) as (coord, recorder):
        await until_ready(coord)
        assert coord.mcp_servers()[0].protocol == "2026-07-28"
        session_id = await prompted(coord)
        form = (await recorder.wait_for("form.asked")).payload["form"]
        assert form["source"] == {"mcp": "fx"} and form["prompt"] == "Pick a color"
        assert [(q["id"], q.get("options")) for q in form["questions"]] == [
            ("color", ["red", "green"]),
            ("n", None),
        ]
        await coord.submit_form(session_id, form["id"], {"color": "green", "n": "3"})
        await recorder.wait_for("session.idle")
        output = recorder.of("session.tool.succeeded")[0].payload["output"]
        assert output["content"][0]["text"] == "accept: {'color': 'green', 'n': 3} (fixed-state)"
    asked = kinds(record, "ask_state")
    assert [a["answered"] for a in asked] == [[], ["pick"]]


async def test_a_question_kept_across_a_shutdown_is_answered_after_the_restart(tmp_path: Path) -> None:
    config, record = mcp_config(tmp_path, revision="")
    model = RecordingModel.from_json(ASK)
    async with running(config, model=model) as (coord, recorder):
        session_id = await prompted(coord)
        form = (await recorder.wait_for("form.asked")).payload["form"]
    assert not recorder.of("form.revoked") and not recorder.of("session.tool.failed")
    assert recorder.of("session.execution.suspended")
    last = recorder.events[-1].seq
    async with running(config, model=model) as (coord, recorder):
        again = await recorder.wait_until(lambda e: e.type == "form.asked" and e.seq > last)
        assert again.payload["form"]["id"] == form["id"] and again.payload["restored"] is True
        await coord.submit_form(session_id, form["id"], {"color": "red"})
        await recorder.wait_until(lambda e: e.type == "session.idle" and e.seq > last)
        later = [e for e in recorder.events if e.seq > last]
        assert [e.type for e in later if e.type.startswith("session.execution")] == [
            "session.execution.resumed",
            "session.execution.succeeded",
        ]
        succeeded = [e for e in later if e.type == "session.tool.succeeded"]
        assert (
            succeeded[0].payload["output"]["content"][0]["text"] == "accept: {'color': 'red'} (fixed-state)"
        )
        assert not [e for e in later if e.type == "session.tool.started"]
    # Asked once before the restart, retried once after it: the call ran its question once.
    assert [a["answered"] for a in kinds(record, "ask_state")] == [[], ["pick"]]
    assert len(model.requests) == 2


async def test_a_server_that_refuses_the_kept_state_fails_the_call_and_the_model_sees_why(
    tmp_path: Path,
) -> None:
    config, _ = mcp_config(tmp_path, revision="")
    model = RecordingModel.from_json(ASK)
    async with running(config, model=model) as (coord, recorder):
        session_id = await prompted(coord)
        form = (await recorder.wait_for("form.asked")).payload["form"]
    last = recorder.events[-1].seq
    # The server starts again with another key: the state it sealed before is not its own any more.
    server = config.mcp[0]
    rekeyed = attrs.evolve(
        server, env={**server.env, "FIXTURE_STATE_KEY": "another-key-of-thirty-two-bytes!"}
    )
    config = attrs.evolve(config, mcp=(rekeyed,))
    async with running(config, model=model) as (coord, recorder):
        await recorder.wait_until(lambda e: e.type == "form.asked" and e.seq > last)
        await coord.submit_form(session_id, form["id"], {"color": "red"})
        await recorder.wait_until(lambda e: e.type == "session.idle" and e.seq > last)
        failed = [e for e in recorder.events if e.seq > last and e.type == "session.tool.failed"]
        error = failed[0].payload["error"]
        assert error["type"] == "error" and "'fx'" in error["message"]
        assert recorder.of("session.execution.succeeded")
        tool = next(m for m in model.requests[1].messages if m.role == "tool")
        assert "'fx'" in (tool.content or "")
