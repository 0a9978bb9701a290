"""Live-only deltas on the bus: opt-in, merged for a slow reader, lost (detectably) only on overflow."""

from __future__ import annotations

from pathlib import Path

import attrs
import trio
import trio.testing

from coordinator.bus import Bus, Subscription
from coordinator.events import Draft, Event, text_delta
from coordinator.store import SqliteStore, open_store


def delta(offset: int, text: str, session_id: str = "s", step_id: str = "step_1") -> Event:
    return text_delta(session_id, "turn_1", step_id, offset, text, "2026-12-03T00:00:00.000Z")


async def commit(store: SqliteStore, type: str, session_id: str = "s") -> None:
    async with store.transaction() as tx:
        tx.emit(Draft(type=type, session_id=session_id, payload={}))


@attrs.define
class Streaming:
    """A step's text as the bus sees it while it streams."""

    session_id: str
    text: str
    started_seq: int = 0

    def catch_up(self) -> Event | None:
        return delta(0, self.text, self.session_id) if self.text else None


async def drain(subscription: Subscription) -> list[Event]:
    """What the subscription has at hand now (it never waits once something is there)."""
    batch: list[Event] = []
    with trio.move_on_after(0.001):
        while True:
            batch += await subscription.next_batch(1000)
    return batch


def summary(events: list[Event]) -> list[tuple[str, int | None, str]]:
    return [(e.type, e.payload.get("offset"), e.payload.get("delta", "")) for e in events]


async def test_deltas_reach_only_subscribers_that_asked(tmp_path: Path, autojump_clock: object) -> None:
    """Without the flag a stream is exactly as before; with it, deltas interleave in publish order."""
    with open_store(str(tmp_path / "b.sqlite"), synchronous="off") as store:
        bus = Bus(store, store.read.last_seq())
        store.on_commit(bus.publish)
        plain, live = bus.subscribe(after=0), bus.subscribe(after=0, deltas=True)
        for sub in (plain, live):
            assert await drain(sub) == []  # attached
        await commit(store, "session.step.started")
        bus.publish_delta(delta(0, "He"))
        await commit(store, "other")
        bus.publish_delta(delta(2, "llo"))
        assert [e.type for e in await drain(plain)] == ["session.step.started", "other"]
        assert summary(await drain(live)) == [
            ("session.step.started", None, ""),
            ("session.text.delta", 0, "He"),
            ("other", None, ""),
            ("session.text.delta", 2, "llo"),
        ]
        assert live.last == plain.last == 2  # a delta never moves the resume point


async def test_a_slow_reader_gets_adjacent_deltas_merged(tmp_path: Path, autojump_clock: object) -> None:
    """A subscriber that reads late gets fewer, larger deltas: the same text, no gap, nothing held back."""
    with open_store(str(tmp_path / "b.sqlite"), synchronous="off") as store:
        bus = Bus(store, store.read.last_seq())
        store.on_commit(bus.publish)
        fast, slow = bus.subscribe(after=0, deltas=True), bus.subscribe(after=0, deltas=True)
        await drain(fast), await drain(slow)
        seen_fast: list[Event] = []
        offset = 0
        for piece in ["a", "bc", "def", "g"]:
            bus.publish_delta(delta(offset, piece))
            offset += len(piece)
            seen_fast += await drain(fast)
        await commit(store, "session.step.succeeded")
        assert summary(seen_fast) == [
            ("session.text.delta", 0, "a"),
            ("session.text.delta", 1, "bc"),
            ("session.text.delta", 3, "def"),
            ("session.text.delta", 6, "g"),
        ]
        assert summary(await drain(slow)) == [
            ("session.text.delta", 0, "abcdefg"),
            ("session.step.succeeded", None, ""),
        ]


async def test_a_delta_never_merges_across_a_durable_event(tmp_path: Path, autojump_clock: object) -> None:
    """Merging must not move text ahead of a stored event of the same session that came before it."""
    with open_store(str(tmp_path / "b.sqlite"), synchronous="off") as store:
        bus = Bus(store, store.read.last_seq())
        store.on_commit(bus.publish)
        slow = bus.subscribe(after=0, deltas=True)
        await drain(slow)
        bus.publish_delta(delta(0, "ab"))
        await commit(store, "marker")
        bus.publish_delta(delta(2, "cd"))
        bus.publish_delta(delta(4, "ef"))
        assert summary(await drain(slow)) == [
            ("session.text.delta", 0, "ab"),
            ("marker", None, ""),
            ("session.text.delta", 2, "cdef"),
        ]


async def test_an_overflowing_subscriber_loses_deltas_never_events(
    tmp_path: Path, autojump_clock: object
) -> None:
    """A full buffer sends the reader to the store: every stored event arrives, deltas resume with a
    catch-up at offset 0, so what was lost is visible."""
    with open_store(str(tmp_path / "b.sqlite"), synchronous="off") as store:
        bus = Bus(store, store.read.last_seq(), live_buffer=3)
        store.on_commit(bus.publish)
        text = Streaming(session_id="s", text="")
        bus.start_streaming(text)
        slow = bus.subscribe(after=0, deltas=True)
        await drain(slow)
        bus.publish_delta(delta(0, "ab"))
        text.text = "ab"
        for n in range(5):
            await commit(store, f"e{n}")
        bus.publish_delta(delta(2, "cd"))
        text.text = "abcd"
        got = await drain(slow)
        assert [e.type for e in got if e.seq is not None] == [f"e{n}" for n in range(5)]
        assert summary([e for e in got if e.seq is None]) == [("session.text.delta", 0, "abcd")]
        assert bus.lagged == 1


async def test_a_subscriber_that_attaches_mid_stream_first_gets_the_text_so_far(
    tmp_path: Path, autojump_clock: object
) -> None:
    """The catch-up comes right after the replay, before any live delta, at offset 0."""
    with open_store(str(tmp_path / "b.sqlite"), synchronous="off") as store:
        bus = Bus(store, store.read.last_seq())
        store.on_commit(bus.publish)
        await commit(store, "session.step.started")
        text = Streaming(session_id="s", text="Once up")
        bus.start_streaming(bus_text := text)
        other = Streaming(session_id="t", text="elsewhere")
        bus.start_streaming(other)
        late = bus.subscribe(after=0, session_id="s", deltas=True)
        replay_and_catch_up = await drain(late)
        bus.publish_delta(delta(7, "on"))
        assert summary(replay_and_catch_up + await drain(late)) == [
            ("session.step.started", None, ""),
            ("session.text.delta", 0, "Once up"),
            ("session.text.delta", 7, "on"),
        ]
        bus.stop_streaming(bus_text)
        after_end = bus.subscribe(after=0, session_id="s", deltas=True)
        assert [e.type for e in await drain(after_end)] == ["session.step.started"]


async def test_a_delta_of_a_step_whose_start_is_not_published_waits_for_it(
    tmp_path: Path, autojump_clock: object
) -> None:
    """The step streams at once, without waiting for a sync; the bus delivers its text right after the
    step's start, never before it, and no catch-up overtakes it either."""
    with open_store(str(tmp_path / "b.sqlite"), synchronous="off") as store:
        bus = Bus(store, store.read.last_seq())
        live = bus.subscribe(after=0, deltas=True)
        await drain(live)
        held: list[Event] = []
        store.on_commit(held.extend)  # committed, not yet handed to the bus (not durable yet)
        await commit(store, "session.step.started")
        text = Streaming(session_id="s", text="He", started_seq=1)
        bus.start_streaming(text)
        bus.publish_delta_after(delta(0, "He"), started_seq=1)
        bus.publish_delta_after(delta(2, "llo"), started_seq=1)
        late = bus.subscribe(after=0, deltas=True)
        assert await drain(live) == [] and await drain(late) == []
        bus.publish(held)
        expected = [("session.step.started", None, ""), ("session.text.delta", 0, "Hello")]
        assert summary(await drain(live)) == expected
        assert summary(await drain(late)) == expected
        bus.publish_delta_after(delta(5, "!"), started_seq=1)
        assert summary(await drain(live)) == [("session.text.delta", 5, "!")]
