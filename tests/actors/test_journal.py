"""The journal's three rules, on a real store: what is written now, with the next write, and in the
stop's one commit; and the wait book a stop's call failures wait on."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from coordinator.actors.wait_book import WaitBook
from coordinator.errors import StoreError
from coordinator.reasons import Interrupt
from coordinator.store import Store, Transaction
from tests.actors.turn_harness import open_harness


def _note(seq: list[str], name: str) -> object:
    """A body that records its name when a transaction runs it (idempotent, as carried ones are)."""

    def body(tx: Transaction) -> None:
        seq.append(name)

    return body


def _fail_the_next_write(monkeypatch: pytest.MonkeyPatch, store: Store, message: str) -> None:
    """The store's next write fails with ``StoreError(message)``; the ones after it commit."""
    original, failures = store.write, [message]

    async def failing_once(body: object, **kwargs: object) -> object:
        if failures:
            raise StoreError(failures.pop())
        return await original(body, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "write", failing_once)


async def test_a_carried_body_is_written_first_by_the_next_write(tmp_path: Path) -> None:
    """A step's success waits for the next step's start: one commit, and its events keep their order."""
    ran: list[str] = []
    async with open_harness(tmp_path) as harness:
        journal = harness.turn.journal
        await journal.step_succeeded(_note(ran, "step succeeded"))
        assert ran == []
        await journal.write(_note(ran, "next step started"))
        assert ran == ["step succeeded", "next step started"]
        await journal.write(_note(ran, "after"))
        assert ran == ["step succeeded", "next step started", "after"]


async def test_a_call_that_ends_its_step_is_carried_and_any_other_is_written_now(tmp_path: Path) -> None:
    """Only the last call of a step is followed at once by another write; a sibling's success may be
    waited on for long (the others still run), so it is committed at once."""
    ran: list[str] = []
    async with open_harness(tmp_path) as harness:
        journal = harness.turn.journal
        await journal.call_succeeded(_note(ran, "c1"), ends_its_step=False)
        assert ran == ["c1"]
        await journal.call_succeeded(_note(ran, "c2"), ends_its_step=True)
        assert ran == ["c1"]
        await journal.write(_note(ran, "step 2 started"))
        assert ran == ["c1", "c2", "step 2 started"]


async def test_a_settlement_is_written_now_while_the_turn_goes_on(tmp_path: Path) -> None:
    """A tool's own failure while the turn goes on is the model's to see at once."""
    ran: list[str] = []
    async with open_harness(tmp_path) as harness:
        assert await harness.turn.journal.settled(_note(ran, "call failed"))
        assert ran == ["call failed"]


async def test_a_stop_defers_every_settlement_to_the_turns_one_commit_in_order(tmp_path: Path) -> None:
    """While the turn stops, children's settlements wait for the turn's own, in the order they came."""
    ran: list[str] = []
    async with open_harness(tmp_path) as harness:
        journal = harness.turn.journal
        harness.turn.handle.stop(Interrupt.by_person("api"))
        assert not await journal.settled(_note(ran, "wait revoked"))
        assert not await journal.settled(_note(ran, "call failed"))
        assert ran == []
        assert len(journal.deferred) == 2
        assert await journal.settle_turn(lambda tx: ran.append("turn settled") or "done") == "done"
        assert ran == ["wait revoked", "call failed", "turn settled"]
        assert journal.deferred == ()


async def test_a_body_carried_after_a_deferred_settlement_joins_it_behind(tmp_path: Path) -> None:
    """A step's success carried after its call's deferred failure came after it: carried bodies are
    written first, so it would otherwise be written before the failure it follows."""
    ran: list[str] = []
    async with open_harness(tmp_path) as harness:
        journal = harness.turn.journal
        await journal.step_succeeded(_note(ran, "earlier step succeeded"))
        harness.turn.handle.stop(Interrupt.by_person("api"))
        await journal.settled(_note(ran, "call failed"))
        await journal.step_succeeded(_note(ran, "step succeeded"))
        await journal.settle_turn(_note(ran, "turn settled"))
        assert ran == ["earlier step succeeded", "call failed", "step succeeded", "turn settled"]


async def test_a_failed_settlement_is_written_again_without_the_deferred_but_with_the_carried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the stop's one commit fails, the sweep settles from the store what the cleanups left, and
    what was carried (the model's answer) is written with it: a failed commit wrote nothing."""
    ran: list[str] = []
    async with open_harness(tmp_path) as harness:
        journal, store = harness.turn.journal, harness.store
        await journal.answered(_note(ran, "answered"))
        harness.turn.handle.stop(Interrupt.by_person("api"))
        await journal.settled(_note(ran, "step failed"))
        _fail_the_next_write(monkeypatch, store, "the disk is full")
        await journal.settle_turn(_note(ran, "turn settled"))
        # The answer was carried before the stop, so it stays first; the deferred failure is dropped.
        assert ran == ["answered", "turn settled"]


async def test_a_settlement_that_fails_with_nothing_to_drop_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing would differ in a second try: the failure is the session's to handle."""
    async with open_harness(tmp_path) as harness:
        store = harness.store

        async def failing(body: object, **kwargs: object) -> object:
            raise StoreError("the disk is full")

        monkeypatch.setattr(store, "write", failing)
        with pytest.raises(StoreError):
            await harness.turn.journal.settle_turn(lambda tx: None)


async def test_a_carried_body_stays_carried_until_a_write_that_ran_it_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL may commit, then report a failure: the next write runs the body again, so a carried
    body must be idempotent, and is never lost."""
    ran: list[str] = []
    async with open_harness(tmp_path) as harness:
        journal, store = harness.turn.journal, harness.store
        await journal.step_succeeded(_note(ran, "step succeeded"))
        _fail_the_next_write(monkeypatch, store, "connection lost")
        with pytest.raises(StoreError):
            await journal.write(_note(ran, "next"))
        await journal.write(_note(ran, "next again"))
        assert ran == ["step succeeded", "next again"]


async def test_the_wait_book_holds_a_stops_call_failures_until_every_wait_is_settled() -> None:
    """Every revocation before any call's failure: a call's cleanup waits out the open and kept waits."""
    book = WaitBook()
    book.kept(["c3"])
    book.began("c1")
    done = trio.Event()

    async def a_calls_cleanup() -> None:
        await book.settled()
        done.set()

    async with trio.open_nursery() as nursery:
        with book.open("c1"):
            nursery.start_soon(a_calls_cleanup)
            await trio.testing.wait_all_tasks_blocked()
            assert not done.is_set()
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set()  # c3's kept wait is its call's to settle
        assert book.is_kept("c3")
        book.forget("c3")
    assert done.is_set()
    assert book.may_have_waits("c1") and book.may_have_waits("c3") and not book.may_have_waits("c2")


async def test_a_wait_whose_revocation_failed_is_left_to_its_call() -> None:
    """Its call revokes it as it settles, and meanwhile it still counts among the open waits."""
    book = WaitBook()
    book.began("c1")
    with book.open("c1"), pytest.raises(StoreError), book.settling("c1"):
        raise StoreError("the disk is full")
    assert book.is_kept("c1")
    with trio.move_on_after(0) as timer:
        await book.settled()
    assert timer.cancelled_caught
