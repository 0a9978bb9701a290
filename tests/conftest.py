"""Cross-cutting fixtures: a coordinator on a real SQLite file, and an event recorder."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from coordinator import Coordinator, open_coordinator
from coordinator.config import Config, TimeoutsConfig
from coordinator.events import Event
from coordinator.models.base import ModelReply, ModelRequest
from coordinator.models.scripted import ScriptedModel
from coordinator.records import Rule
from tests.backends import PG_ENV, db_for, unavailable


@attrs.define
class Recorder:
    """Every event a subscriber saw, in order, and a way to wait for one."""

    events: list[Event] = attrs.Factory(list)
    _changed: trio.Event = attrs.Factory(trio.Event)

    def add(self, event: Event) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = trio.Event()

    def types(self, session_id: str | None = None) -> list[str]:
        return [e.type for e in self.events if session_id is None or e.session_id == session_id]

    def of(self, type: str) -> list[Event]:
        return [e for e in self.events if e.type == type]

    async def wait_for(self, type: str, count: int = 1) -> Event:
        while len(self.of(type)) < count:
            await self._changed.wait()
        return self.of(type)[count - 1]

    async def wait_until(self, found: Callable[[Event], bool]) -> Event:
        """The first event ``found`` accepts, once it has arrived."""
        checked = 0
        while True:
            for event in self.events[checked:]:
                if found(event):
                    return event
            checked = len(self.events)
            await self._changed.wait()


@attrs.define
class RecordingModel:
    """The scripted model, remembering every request it was sent (what the model was told)."""

    inner: ScriptedModel
    requests: list[ModelRequest] = attrs.Factory(list)

    @classmethod
    def from_json(cls, script: Any) -> RecordingModel:
        return cls(ScriptedModel.from_json(script))

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.requests.append(request)
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def make_config(
    tmp_path: Path, *, rules: tuple[Rule, ...] = (), timeouts: TimeoutsConfig | None = None, **server: Any
) -> Config:
    config = Config(base_dir=tmp_path, permission=rules, timeouts=timeouts or TimeoutsConfig())
    return config.with_overrides(db=db_for(tmp_path), **server)


ASK_SHELL = (Rule(action="*", resource="*", effect="allow"), Rule(action="shell", resource="*", effect="ask"))


@contextlib.asynccontextmanager
async def running(
    config: Config, script: list[dict[str, Any]] | None = None, **kwargs: Any
) -> AsyncIterator[tuple[Coordinator, Recorder]]:
    """A coordinator with a recorder subscribed from seq 0, both closed on exit."""
    if script is not None:
        kwargs["model"] = ScriptedModel.from_json(script)
    kwargs.setdefault("synchronous", "normal")
    async with open_coordinator(config, **kwargs) as coord:
        recorder = Recorder()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_record, coord, recorder)
            try:
                yield coord, recorder
            finally:
                # Shut down while still recording, so the test sees the shutdown's events; the
                # subscription ends by itself once the bus closes.
                await coord.shutdown()


async def _record(coord: Coordinator, recorder: Recorder) -> None:
    async for event in coord.subscribe(after=0):
        recorder.add(event)


WALL_CLOCK_LIMIT_S = 60.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.obj):
            marker = item.get_closest_marker("wall_clock_limit")
            limit = float(marker.args[0]) if marker else WALL_CLOCK_LIMIT_S
            item.obj = _with_wall_clock_limit(item.obj, limit, item.nodeid)


def _with_wall_clock_limit(test: Callable[..., Any], limit: float, name: str) -> Callable[..., Any]:
    """The trio test, failed by name once it has run `limit` seconds of real time.

    A timer thread watches the wall clock (a test's trio clock may be a MockClock that jumps) and
    cancels the test's outermost scope through the run's token, so the trio run ends cleanly and the
    tests after it still run. No task is added to the test. `pytest-timeout` is the backstop for sync
    tests and for a hang that no cancellation reaches.
    """

    @functools.wraps(test)
    async def limited(*args: Any, **kwargs: Any) -> None:
        token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            timer = threading.Timer(limit, token.run_sync_soon, (scope.cancel,))
            timer.daemon = True
            timer.start()
            try:
                await test(*args, **kwargs)
            finally:
                timer.cancel()
        if scope.cancelled_caught:
            pytest.fail(f"{name} ran longer than {limit:g} s of wall-clock time", pytrace=False)

    return limited


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path, rules=ASK_SHELL)


@pytest.fixture
def open_running() -> Callable[..., Any]:
    return running


@pytest.fixture(autouse=True)
def _reap_leaked_helpers() -> Iterator[None]:
    """What the chaos tests' leaky plugin left behind is reaped after the test that ran it."""
    yield
    user_tools = sys.modules.get("tests.coordinator.chaos.user_tools")
    if user_tools is not None:
        user_tools.reap_left_behind()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line when the PostgreSQL runs were skipped (``COORDINATOR_TEST_PG`` unset, no server)."""
    why = unavailable()
    if why is not None and not os.environ.get(PG_ENV):
        terminalreporter.write_line(f"PostgreSQL runs skipped: {why} (set {PG_ENV} to require them)")
