"""Progress that survives: a tool's latest progress is stored, published, and kept by a stop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import trio

from coordinator.config import PluginConfig
from tests.conftest import make_config, running

CRUNCH = """
import trio

async def crunch(items: int, progress=None) -> str:
    \"\"\"Work through items, reporting each one done.\"\"\"
    for done in range(1, items + 1):
        await trio.sleep(1)
        progress({"done": done, "of": items})
    return f"crunched {items}"
"""


async def test_progress_is_published_stored_and_kept_in_the_partial_result(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """An interrupted long call keeps its latest progress detail: its work so far is never lost."""
    (tmp_path / "crunchtools.py").write_text(CRUNCH)
    config = attrs.evolve(make_config(tmp_path), plugin=(PluginConfig(entry="crunchtools:crunch"),))
    call = {"tool_calls": [{"id": "c1", "name": "crunch", "input": {"items": 100}}]}
    async with running(config, [call, {"text": "done"}]) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.tool.progress", 3)
        await trio.sleep(0.5)  # between two reports
        await coord.interrupt(session.id)
        await recorder.wait_for("session.idle")
        details = [e.payload["detail"] for e in recorder.of("session.tool.progress")]
        assert details[:3] == [{"done": 1, "of": 100}, {"done": 2, "of": 100}, {"done": 3, "of": 100}]
        failed = recorder.of("session.tool.failed")[0].payload
        assert failed["partial"] == {"progress": details[-1]}
        stored = await coord.store.read(lambda reader: reader.get_tool_call(session.id, "c1"))
        assert stored is not None and stored.progress == details[-1]
        assert stored.partial is not None and stored.partial.progress == details[-1]
