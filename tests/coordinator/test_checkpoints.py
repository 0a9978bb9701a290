"""The injector protocol: what the core calls, and ``run_observed``, which runs a plugin's coroutine
exactly as under ``await``, each suspension reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from coordinator.checkpoints import run_observed
from coordinator.config import PluginConfig
from coordinator.store import Reader
from coordinator.tools.base import Tool
from tests.conftest import make_config, running
from tests.scenarios.test_stop_matrix import DONE, RULES

PROBED_PLUGIN = """
import trio

from coordinator.testing import checkpoint


async def probed() -> str:
    \"\"\"Sleep, then declare a checkpoint.\"\"\"
    await trio.sleep(0.5)
    await checkpoint("declared")
    return "ok"
"""
PROBED_CALL = {"tool_calls": [{"id": "call_1", "name": "probed", "input": {}}]}


@attrs.define
class Recording:
    """An injector that injects nothing and records each call the core makes on it."""

    observed: bool
    calls: list[str] = attrs.Factory(list)
    asked: list[str | None] = attrs.Factory(list)  # the plugin module of each tool it was asked about
    commits: int = 0

    async def at(self, name: str, turn: Any) -> None:
        self.calls.append(f"at {name}")

    def notice(self, name: str, turn: Any) -> None:
        self.calls.append(f"notice {name}")

    def observes(self, tool: Tool) -> bool:
        self.asked.append(tool.plugin_module)
        return self.observed

    def before_commit(self, read: Reader) -> None:
        self.commits += 1


@pytest.mark.parametrize("observed", [True, False])
async def test_a_plugins_awaits_reach_the_injector_only_when_it_observes_the_tool(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, observed: bool
) -> None:
    """The injector, not the tool, decides whose awaits are checkpoints (the campaign leaves its own
    plugins out, so its recorded schedules stay valid); the built-in checkpoints and every commit reach
    it either way."""
    (tmp_path / "probed.py").write_text(PROBED_PLUGIN)
    config = attrs.evolve(make_config(tmp_path, rules=RULES), plugin=(PluginConfig(entry="probed:probed"),))
    injector = Recording(observed=observed)
    async with running(config, [PROBED_CALL, DONE], injector=injector) as (coord, recorder):
        session = await coord.create_session()
        await coord.prompt(session.id, "go")
        await recorder.wait_for("session.idle")
    assert injector.asked == ["probed"]
    plugin = [call for call in injector.calls if ".probed." in call]
    built_in = [call for call in injector.calls if ".probed." not in call]
    if observed:
        assert plugin[0] == "notice plugin.probed.await" and plugin[-1] == "at plugin.probed.declared"
    else:
        assert plugin == []
    assert built_in[:3] == ["at turn.start", "at model.request", "at model.reply"]
    assert "at tool.start" in built_in and "at tool.end" in built_in
    assert injector.commits > 0


async def test_what_trio_sends_and_raises_reaches_the_coroutine_untouched(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Values received, the coroutine's own cancel scopes and its exceptions behave as without observation."""
    send, receive = trio.open_memory_channel[str](1)
    seen: list[str] = []

    async def plugin() -> tuple[str, bool]:
        item = await receive.receive()
        with trio.move_on_after(1) as own:  # its own deadline fires inside it, as usual
            await trio.sleep_forever()
        return item, own.cancelled_caught

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send.send, "hello")
        result = await run_observed(plugin(), lambda: seen.append("await"))
    assert result == ("hello", True)
    assert len(seen) >= 2  # the receive and the sleep, at least

    async def failing() -> None:
        await trio.lowlevel.checkpoint()
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        await run_observed(failing(), lambda: None)


async def test_a_cancellation_from_outside_lands_in_the_await_and_its_cleanup_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A stop while the plugin awaits reaches it there; its ``finally`` (shielded) completes."""
    events: list[str] = []

    async def plugin() -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(0.5)
                events.append("cleaned up")

    with trio.move_on_after(1) as outer:
        await run_observed(plugin(), lambda: events.append("await"))
    assert outer.cancelled_caught
    assert events == ["await", "await", "cleaned up"]
