"""The bus: replay then live with no gap and no duplicate; a slow subscriber never blocks a commit."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.lowlevel
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.bus import Bus, Subscription
from coordinator.events import Draft, Event
from coordinator.store import SqliteStore, open_store


async def commit(store: SqliteStore, count: int) -> None:
    async with store.transaction() as tx:
        for n in range(count):
            tx.emit(Draft(type="test", session_id="s" if n % 2 else "t", payload={"n": n}))


@settings(max_examples=25, deadline=None)
@given(
    before=st.lists(st.integers(1, 4), max_size=4),
    after=st.lists(st.integers(1, 4), max_size=4),
    start=st.integers(0, 6),
)
def test_replay_then_live_has_no_gap_and_no_duplicate(
    tmp_path_factory: pytest.TempPathFactory, before: list[int], after: list[int], start: int
) -> None:
    """Events committed before and while a subscriber catches up arrive once each, in seq order."""

    async def scenario() -> None:
        with open_store(str(tmp_path_factory.mktemp("bus") / "b.sqlite"), synchronous="off") as store:
            bus = Bus(store, store.read.last_seq())
            store.on_commit(bus.publish)
            for count in before:
                await commit(store, count)
            seen: list[int] = []

            async def subscriber() -> None:
                async for event in bus.subscribe(after=start):
                    seen.append(event.seq)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(subscriber)
                for count in after:
                    await commit(store, count)
                    await trio.lowlevel.checkpoint()
                await trio.testing.wait_all_tasks_blocked()
                bus.close()
            total = sum(before) + sum(after)
            assert seen == list(range(start + 1, total + 1))

    trio.run(scenario)


async def test_a_subscriber_that_falls_behind_catches_up_from_the_store(tmp_path: Path) -> None:
    """Overflowing a live buffer never blocks the committer and never loses an event."""
    with open_store(str(tmp_path / "b.sqlite"), synchronous="off") as store:
        bus = Bus(store, store.read.last_seq(), live_buffer=3)
        store.on_commit(bus.publish)
        subscription = bus.subscribe(after=0)
        got = []

        async def read_one() -> None:
            got.append(await subscription.__anext__())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_one)
            await trio.testing.wait_all_tasks_blocked()  # caught up, attached live
            await commit(store, 1)
        first = got[0]
        for _ in range(10):
            await commit(store, 2)  # the subscriber reads nothing meanwhile: its buffer overflows
        assert bus.lagged == 1
        bus.close()
        rest = [event.seq async for event in subscription]
        assert [first.seq, *rest] == list(range(1, 22))


async def test_a_batch_gathers_what_the_next_passes_publish_and_what_comes_later_waits(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """With ``gather_passes``, what is published in the loop's passes after the first event joins its
    batch; what comes once they have run goes into the next batch. Passes, not time: the clock here
    never moves, and a batch that waited on it would never come."""
    with open_store(str(tmp_path / "b.sqlite"), synchronous="off") as store:
        bus = Bus(store, store.read.last_seq())
        committed: list[Event] = []
        store.on_commit(committed.extend)  # published by hand below, at chosen passes
        subscription = bus.subscribe(after=0)
        batches: list[list[int | None]] = []

        async def read_two() -> None:
            for _ in range(2):
                batch = await subscription.next_batch(100, gather_passes=4)
                batches.append([event.seq for event in batch])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_two)
            await trio.testing.wait_all_tasks_blocked()  # attached live, waiting
            for _ in range(6):
                await commit(store, 1)
            bus.publish(committed[0:1])
            for event in committed[1:3]:  # one pass apart: inside the first event's four
                await trio.lowlevel.checkpoint()
                bus.publish([event])
            for _ in range(8):  # the batch is taken, whichever order each pass ran its tasks in
                await trio.lowlevel.checkpoint()
            for event in committed[3:]:
                bus.publish([event])
                await trio.lowlevel.checkpoint()
        assert batches == [[1, 2, 3], [4, 5, 6]]
        assert trio.current_time() == 0


async def test_among_many_subscribers_a_batch_waits_for_the_syncs_due_and_no_longer_than_its_wait(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """With ``sync_among`` subscribers attached, a batch waits while an event this process committed
    waits for its sync: each publish joins it, until none is due (the clock never moves); a publish
    that does not come is waited for ``sync_wait`` at most. With fewer attached, nothing waits."""
    with open_store(str(tmp_path / "b.sqlite"), synchronous="off") as store:
        bus = Bus(store, store.read.last_seq())
        committed: list[Event] = []
        store.on_commit(committed.extend)  # published by hand below, as syncs would
        store.on_commit(bus.note_committed)
        subscriptions = [bus.subscribe(after=0) for _ in range(3)]
        batches: list[list[list[int | None]]] = [[], [], []]

        async def read(index: int, among: int) -> None:
            while True:
                batch = await subscriptions[index].next_batch(
                    100, gather_passes=2, sync_among=among, sync_wait=1.0
                )
                batches[index].append([event.seq for event in batch])

        async def publish(events: list[Event]) -> list[list[list[int | None]]]:
            bus.publish(events)
            await trio.testing.wait_all_tasks_blocked()
            return batches

        async with trio.open_nursery() as nursery:
            for index in range(3):
                nursery.start_soon(read, index, 3)
            await trio.testing.wait_all_tasks_blocked()  # attached live, waiting
            for _ in range(5):
                await commit(store, 1)
            assert await publish(committed[0:1]) == [[], [], []]  # 2 to 5 are due
            assert await publish(committed[1:3]) == [[], [], []]  # 4 and 5 still are
            assert await publish(committed[3:5]) == [[[1, 2, 3, 4, 5]]] * 3
            await commit(store, 2)  # 7 is never published
            assert await publish(committed[5:6]) == [[[1, 2, 3, 4, 5]]] * 3
            mock_clock.jump(0.999)
            await trio.testing.wait_all_tasks_blocked()
            assert batches == [[[1, 2, 3, 4, 5]]] * 3
            mock_clock.jump(0.001)
            await trio.testing.wait_all_tasks_blocked()
            assert batches == [[[1, 2, 3, 4, 5], [6]]] * 3
            nursery.cancel_scope.cancel()

        # Fewer attached than ``sync_among``: the batch is taken once the passes ran, and the clock
        # (which now jumps whenever every task waits) does not move.
        mock_clock.autojump_threshold = 0
        bus.publish(committed[6:7])
        for subscription in subscriptions[1:]:
            await subscription.aclose()
        subscriptions[0] = bus.subscribe(after=7)
        batches[0] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read, 0, 2)
            await trio.testing.wait_all_tasks_blocked()
            await commit(store, 2)  # 9 is due when 8 is published
            assert (await publish(committed[7:8]))[0] == [[8]]
            nursery.cancel_scope.cancel()
        assert trio.current_time() == 1.0


async def test_a_session_subscription_sees_only_that_session(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "b.sqlite"), synchronous="off") as store:
        bus = Bus(store, store.read.last_seq())
        store.on_commit(bus.publish)
        await commit(store, 4)
        bus.close()
        assert [e.payload["n"] async for e in bus.subscribe(session_id="s")] == [1, 3]


async def _drain(subscription: Subscription, last_seq: int) -> list[tuple[int | None, str | None]]:
    """What the subscription delivers until it reached ``last_seq``, as (seq, session)."""
    seen: list[tuple[int | None, str | None]] = []
    with trio.fail_after(5):
        while not seen or seen[-1][0] != last_seq:
            event = await subscription.__anext__()
            seen.append((event.seq, event.session_id))
    return seen


async def test_a_deleted_sessions_events_leave_every_subscriber_and_its_own_streams_end(
    tmp_path: Path,
) -> None:
    """Once a session is deleted, no subscriber gets its events any more, whether they were queued in
    its live buffer or in a replay page it held, and a subscription of that session alone ends."""
    with open_store(str(tmp_path / "b.sqlite"), synchronous="off") as store:
        bus = Bus(store, store.read.last_seq())
        store.on_commit(bus.publish)
        async with store.transaction() as tx:
            tx.insert_session("s", "doomed", "now")
        await commit(store, 4)  # seqs 1..4: t, s, t, s
        replaying = bus.subscribe(after=0)
        assert (await replaying.__anext__()).seq == 1  # holds 2..4 in its page
        live_everything = bus.subscribe(after=4)
        live_s = bus.subscribe(after=4, session_id="s")
        replaying_s = bus.subscribe(after=0, session_id="s")
        assert (await replaying_s.__anext__()).seq == 2  # holds 4 in its page
        with trio.move_on_after(0.01):  # both attach live, and wait
            await live_everything.__anext__()
        with trio.move_on_after(0.01):
            await live_s.__anext__()
        await commit(store, 4)  # seqs 5..8, queued in the live buffers
        async with store.transaction() as tx:
            tx.delete_session("s")
        bus.forget_session("s")
        await commit(store, 2)  # 9 (t), 10 (s: a session id no longer known, as the store allows)
        assert await _drain(replaying, 10) == [(3, "t"), (5, "t"), (7, "t"), (9, "t"), (10, "s")]
        assert await _drain(live_everything, 10) == [(5, "t"), (7, "t"), (9, "t"), (10, "s")]
        for ended in (live_s, replaying_s):
            with trio.fail_after(5), pytest.raises(StopAsyncIteration):
                await ended.__anext__()
