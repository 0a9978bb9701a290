"""A session's life: what it keeps is opened once, handed to every caller, and closed as it ends."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio

from coordinator.actors.session_life import CLOSE_SECONDS, SessionLives
from coordinator.errors import SessionEnded
from coordinator.tools.table import ToolTable


@attrs.define
class Journal:
    """What happened to the resources the tests keep."""

    opened: list[str] = attrs.Factory(list)
    closed: list[str] = attrs.Factory(list)


def opener(journal: Journal, name: str, *, fail: bool = False, slow_close: bool = False) -> Any:
    @contextlib.asynccontextmanager
    async def open_it() -> AsyncIterator[str]:
        await trio.sleep(1)
        if fail:
            raise OSError(f"{name} cannot open")
        journal.opened.append(name)
        try:
            yield name
        finally:
            if slow_close:
                await trio.sleep(CLOSE_SECONDS * 10)
            journal.closed.append(name)

    return open_it


@contextlib.asynccontextmanager
async def lives(busy: Any = lambda session_id: False) -> AsyncIterator[SessionLives]:
    async with trio.open_nursery() as nursery:
        lives = SessionLives(nursery, ToolTable({}), busy, idle_seconds=60)
        yield lives
        await lives.end_all()


async def test_concurrent_callers_get_the_one_resource_opened_once(autojump_clock: Any) -> None:
    journal = Journal()
    got: list[str] = []
    async with lives() as kept:

        async def ask() -> None:
            got.append(await kept.keep("ses_a", "db", opener(journal, "db")))

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(ask)
        assert got == ["db", "db", "db"] and journal.opened == ["db"]
    assert journal.closed == ["db"]


async def test_a_failure_to_open_reaches_the_caller_and_the_next_keep_tries_again(
    autojump_clock: Any,
) -> None:
    journal = Journal()
    async with lives() as kept:
        with pytest.raises(OSError, match="cannot open"):
            await kept.keep("ses_a", "db", opener(journal, "db", fail=True))
        assert await kept.keep("ses_a", "db", opener(journal, "db")) == "db"
    assert journal.opened == ["db"] and journal.closed == ["db"]


async def test_ending_while_opening_answers_session_ended_and_closes_it(autojump_clock: Any) -> None:
    journal = Journal()
    async with lives() as kept, trio.open_nursery() as nursery:

        async def ask() -> None:
            with pytest.raises(SessionEnded):
                await kept.keep("ses_a", "db", opener(journal, "db"))

        nursery.start_soon(ask)
        await trio.sleep(0.5)  # opening
        await kept.end("ses_a")
    assert journal.opened == journal.closed


async def test_a_close_that_hangs_is_cut_after_its_bound(autojump_clock: Any) -> None:
    journal = Journal()
    async with lives() as kept:
        await kept.keep("ses_a", "db", opener(journal, "db", slow_close=True))
        began = trio.current_time()
        await kept.end("ses_a")
        assert trio.current_time() - began == pytest.approx(CLOSE_SECONDS)
    assert journal.closed == []  # its close was cancelled: no ``finally`` of it ran to the end


async def test_idle_waits_for_a_running_turn(autojump_clock: Any) -> None:
    journal = Journal()
    running = {"ses_a"}
    async with lives(busy=lambda session_id: session_id in running) as kept:
        await kept.keep("ses_a", "db", opener(journal, "db"))
        await trio.sleep(200)
        assert journal.closed == []  # a turn runs: the life goes on
        running.clear()
        await trio.sleep(61)
        assert journal.closed == ["db"] and len(kept) == 0


async def test_after_end_all_nothing_more_is_kept(autojump_clock: Any) -> None:
    journal = Journal()
    async with lives() as kept:
        await kept.end_all()
        with pytest.raises(SessionEnded):
            await kept.keep("ses_a", "db", opener(journal, "db"))
    assert journal.opened == []
