"""The store's promises, for every backend: seq, atomic commits with their events, fencing, the
compare-and-sets that decide races; then what only SQLite has (apsw's errors, its file checks).

The generic tests run on a SQLite file and on a PostgreSQL database (``tests/backends.py``), through
nothing but the store interface (``Store.write``, ``Store.read``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import apsw
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import errors, events
from coordinator.events import Draft
from coordinator.reasons import Declined, Interrupt, ParentLink
from coordinator.records import Form, PermissionRequest, ToolError
from coordinator.store import Store, Transaction, open_read_view, open_store
from coordinator.store.rows import InstanceRow, ToolCallRow
from coordinator.store.sqlite import APSW_ERRORS_MAPPED, map_apsw_errors
from tests.backends import backend, db_for, postgres_database

__all__ = ["backend", "postgres_database"]


@contextlib.asynccontextmanager
async def serving(url: str) -> AsyncIterator[Store]:
    """The store at ``url``, open and serving (durability on SQLite, the tail on PostgreSQL)."""
    with open_store(url, synchronous="normal", pool_size=4) as store:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.serve)
            yield store
            nursery.cancel_scope.cancel(reason="the test is over")


@pytest.fixture
async def store(backend: str, tmp_path: Path) -> AsyncIterator[Store]:
    async with serving(db_for(tmp_path)) as opened:
        yield opened


def draft(n: int) -> Draft:
    return Draft(type="test.event", session_id="s", payload={"n": n})


def a_session_with_a_turn(tx: Transaction) -> None:
    tx.insert_session("s1", "t", "now")
    tx.insert_turn("t1", "s1", "go", "now")


class Boom(Exception):
    pass


async def test_events_commit_with_their_state_and_reach_the_bus_only_after(store: Store) -> None:
    """A transaction that raised leaves neither its state nor its events, and publishes nothing."""
    published: list[int] = []
    store.on_durable(lambda events: published.extend(e.seq for e in events))

    def failing(tx: Transaction) -> None:
        tx.insert_session("s1", "t", "now")
        tx.emit(draft(1))
        raise Boom

    with pytest.raises(Boom):
        await store.write(failing)
    assert await store.read(lambda r: (r.get_session("s1"), r.events_after(0))) == (None, [])

    def committed(tx: Transaction) -> None:
        tx.insert_session("s1", "t", "now")
        tx.emit(draft(2))

    await store.write(committed)
    await store.durable()
    assert await store.read(lambda r: r.get_session("s1")) is not None
    # A rolled-back seq was never published, so the next commit may take it.
    assert published == [e.seq for e in await store.read(lambda r: r.events_after(0))] == [1]


async def test_seq_survives_a_reopen_and_is_never_reused(backend: str, tmp_path: Path) -> None:
    """A restarted store continues after its highest seq."""
    url = db_for(tmp_path)
    async with serving(url) as store:
        await store.write(lambda tx: [tx.emit(draft(1)), tx.emit(draft(2))])
    async with serving(url) as store:
        event = await store.write(lambda tx: tx.emit(draft(3)))
        assert event.event.seq == 3
        assert [e.seq for e in await store.read(lambda r: r.events_after(0))] == [1, 2, 3]


@settings(max_examples=30, deadline=None)
@given(batches=st.lists(st.lists(st.booleans(), max_size=5), max_size=12))
def test_seq_is_strictly_increasing_and_gap_free_per_commit(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[bool]]
) -> None:
    """Whatever commits and rollbacks happen, committed seqs strictly increase and a commit's are
    contiguous (SQLite; the same on PostgreSQL under concurrent writers: test_postgres.py)."""

    async def scenario() -> None:
        async with serving(str(tmp_path_factory.mktemp("seq") / "s.sqlite")) as store:
            committed: list[list[int]] = []
            store.on_commit(lambda events: committed.append([e.seq for e in events]))
            for batch in batches:

                def body(tx: Transaction, batch: list[bool] = batch) -> None:
                    for rollback in batch:
                        tx.emit(draft(0))
                        if rollback:
                            raise ValueError

                with contextlib.suppress(ValueError):
                    await store.write(body)
            flat = [seq for commit in committed for seq in commit]
            assert flat == sorted(set(flat))
            for commit in committed:
                assert commit == list(range(commit[0], commit[0] + len(commit)))
            assert [e.seq for e in await store.read(lambda r: r.events_after(0, limit=10_000))] == flat

    trio.run(scenario)


async def test_a_stale_claim_owner_is_fenced_out(store: Store) -> None:
    """After a takeover raises the epoch, the old owner's fenced writes fail and write nothing."""

    def claims(tx: Transaction) -> tuple[int, int, int]:
        tx.insert_session("s1", "t", "now")
        first = tx.acquire_claim("s1", "owner-a", "now", takeover_from=None)
        refused = tx.acquire_claim("s1", "owner-b", "now", takeover_from=None)
        second = tx.acquire_claim("s1", "owner-b", "now", takeover_from="owner-a")
        return first, refused, second

    first, refused, second = await store.write(claims)
    assert refused == 0 and second == first + 1
    with pytest.raises(errors.Fenced):
        await store.write(lambda tx: tx.set_last_outcome("s1", "failed"), fence=("s1", "owner-a", first))
    session = await store.read(lambda r: r.get_session("s1"))
    assert session is not None and session.last_outcome is None
    await store.write(lambda tx: tx.set_last_outcome("s1", "failed"), fence=("s1", "owner-b", second))


async def test_a_parked_turn_is_released_once_and_never_parked_again_before_its_takeover(
    store: Store,
) -> None:
    """Parking and its release are compare-and-sets: a watch that read the turn before a resume was
    asked cannot park it again (the resume would be lost), and a second resume finds nothing."""

    def park(tx: Transaction) -> tuple[bool, bool]:
        a_session_with_a_turn(tx)
        tx.set_turn_status("t1", "suspended")
        return tx.park_turn("t1"), tx.park_turn("t1")

    assert await store.write(park) == (True, False)
    assert await store.read(lambda r: (r.parked_turn_ids(), r.is_parked("t1"))) == ({"t1"}, True)

    def release(tx: Transaction) -> tuple[bool, bool, bool, Any]:
        # the late watch parks nothing once a resume was asked
        return tx.release_parked("t1"), tx.release_parked("t1"), tx.park_turn("t1"), tx.parked_turn("s1")

    assert await store.write(release) == (True, False, False, None)
    assert await store.read(lambda r: (r.parked_turn_ids(), r.resume_asked_turn_ids())) == (set(), {"t1"})
    assert await store.write(lambda tx: tx.mark_resumed("t1", "shutdown"))
    assert await store.read(lambda r: (r.resume_asked_turn_ids(), r.is_parked("t1"))) == (set(), False)


async def test_a_step_succeeds_once_and_never_over_a_failure(store: Store) -> None:
    """``succeed_step`` is a compare-and-set on a running step (a carried success may be written twice:
    ``TurnScope.carry``): the second time, and on a step a stop failed meanwhile, it writes nothing."""

    def steps(tx: Transaction) -> tuple[bool, bool, bool]:
        a_session_with_a_turn(tx)
        tx.insert_step("st1", "s1", "t1", "now")
        tx.insert_step("st2", "s1", "t1", "now")
        tx.settle_step("st2", "failed", Interrupt.by_person("api"))
        return tx.succeed_step("st1"), tx.succeed_step("st1"), tx.succeed_step("st2")

    assert await store.write(steps) == (True, False, False)
    assert await store.read(lambda r: r.running_steps("t1")) == []


async def test_a_steps_index_counts_the_steps_of_its_session_only(store: Store) -> None:
    """The model request index (contract: ``ModelRequest.index``) is the count of the session's steps
    before it, across its turns, never another session's."""

    def steps(tx: Transaction) -> list[Callable[[], int]]:
        a_session_with_a_turn(tx)
        tx.insert_turn("t2", "s1", "again", "now")
        tx.insert_session("s2", "other", "now")
        tx.insert_turn("t3", "s2", "go", "now")
        return [
            tx.insert_step("st1", "s1", "t1", "now"),
            tx.insert_step("st2", "s1", "t1", "now"),
            tx.insert_step("st3", "s2", "t3", "now"),
            tx.insert_step("st4", "s1", "t2", "now"),
        ]

    # Each index is learned with the commit (across a network, asking earlier waits for the server).
    assert [index() for index in await store.write(steps)] == [0, 1, 0, 2]


async def test_the_running_calls_of_a_turn_are_its_unsettled_ones_in_order(store: Store) -> None:
    """What a settlement's sweep fails: the turn's calls still running, nested ones included, in the
    order they were made; never a settled call, never another turn's."""

    def call(call_id: str, turn_id: str = "t1", parent: str | None = None) -> ToolCallRow:
        return ToolCallRow(
            session_id="s1", call_id=call_id, turn_id=turn_id, step_id="st1", parent_call_id=parent,
            model_call_id=None, name="noop", input={}, status="running", output=None, error=None,
            partial=None, progress=None,
        )  # fmt: skip

    def calls(tx: Transaction) -> list[str]:
        a_session_with_a_turn(tx)
        tx.insert_turn("t2", "s1", "go", "now")
        tx.insert_step("st1", "s1", "t1", "now")
        for row in (call("c1"), call("c2"), call("c2.1", parent="c2"), call("c3"), call("c4", "t2")):
            tx.insert_tool_call(row, "now")
        tx.settle_tool_call("s1", "c1", output="done")
        tx.settle_tool_call("s1", "c3", error=ToolError(type="failed", message="no"))
        return [c.call_id for c in tx.running_calls_of_turn("t1")]

    assert await store.write(calls) == ["c2", "c2.1"]


async def test_a_calls_logged_lines_are_its_own_in_the_order_logged(store: Store) -> None:
    """What a stopped ``execute`` call keeps: its lines only, not a sibling's, nor those of a call
    with the same id in another session; in the order logged, across transactions. The read starts
    where the call began (a session never gives a call id twice), so a line before it is not read."""

    def call(session_id: str, call_id: str) -> ToolCallRow:
        return ToolCallRow(
            session_id=session_id, call_id=call_id, turn_id=f"{session_id}-t", step_id=None, parent_call_id=None,
            model_call_id=None, name="execute", input={}, status="running", output=None, error=None,
            partial=None, progress=None,
        )  # fmt: skip

    def begin(tx: Transaction) -> None:
        for session_id in ("s1", "s2"):
            tx.insert_session(session_id, "t", "now")
            tx.insert_turn(f"{session_id}-t", session_id, "go", "now")
            tx.emit(events.tool_progress_log(session_id, "c1", "a line of a call before this one"))
            tx.insert_tool_call(call(session_id, "c1"), "now")
        tx.insert_tool_call(call("s1", "c2"), "now")

    await store.write(begin)
    for n in range(3):
        await store.write(lambda tx, n=n: tx.emit(events.tool_progress_log("s1", "c1", f"line {n}")))
        await store.write(lambda tx, n=n: tx.emit(events.tool_progress_log("s1", "c2", f"other {n}")))
        await store.write(lambda tx, n=n: tx.emit(events.tool_progress_log("s2", "c1", f"elsewhere {n}")))
    await store.write(lambda tx: tx.emit(events.tool_progress_detail("s1", "c1", {"done": 3})))
    lines = await store.read(lambda r: (r.logged_lines("s1", "c1"), r.logged_lines("s1", "c2")))
    assert lines == (["line 0", "line 1", "line 2"], ["other 0", "other 1", "other 2"])


async def test_rows_are_numbered_in_the_order_written_and_next_turn_takes_the_unfinished_one_first(
    store: Store,
) -> None:
    """A numbered row's ``ord`` is one more than its scope's last; ``next_turn`` returns the session's
    unfinished turn before any queued one, then the queued ones in the order they were queued, and
    never a turn a task call runs (that call runs it)."""

    def queue(tx: Transaction) -> list[str | None]:
        tx.insert_session("s1", "t", "now")
        for turn_id in ("t1", "t2", "t3"):
            tx.insert_turn(turn_id, "s1", "go", "now")
        tx.insert_turn("t0", "s1", "go", "now", task=ParentLink(session_id="p", call_id="c"))
        order = [tx.next_turn("s1")]
        tx.set_turn_status("t3", "running")
        order.append(tx.next_turn("s1"))
        for turn_id in ("t3", "t1", "t2"):
            tx.set_turn_status(turn_id, "settled")
            order.append(tx.next_turn("s1"))
        return [None if turn is None else turn.id for turn in order]

    assert await store.write(queue) == ["t1", "t3", "t1", "t2", None]
    turns = [await store.read(lambda r, t=t: r.get_turn(t)) for t in ("t1", "t2", "t3", "t0")]
    assert [turn.ord for turn in turns if turn is not None] == [0, 1, 2, 3]


def _instance(instance_id: str) -> InstanceRow:
    return InstanceRow(id=instance_id, host="h", pid=1, boot_id="b", heartbeat=0.0, stopped=False)


async def test_the_watch_reads_the_unfinished_turns_others_own_with_their_claims_and_owners(
    store: Store,
) -> None:
    """One statement for what was a claim and an instance read a turn (the watch's look, every
    second): the same rows, less the turns whose claim this instance holds while it lives."""

    def setup(tx: Transaction) -> None:
        for instance in ("me", "other"):
            tx.register_instance(_instance(instance), "now")
        for session_id, status, owner in (
            ("mine", "running", "me"),
            ("theirs", "running", "other"),
            ("kept", "suspended", "me"),
            ("unclaimed", "running", None),
            ("done", "settled", "other"),
        ):
            tx.insert_session(session_id, "t", "now")
            tx.insert_turn(f"{session_id}-t", session_id, "go", "now")
            tx.set_turn_status(f"{session_id}-t", status)
            if owner is not None:
                tx.acquire_claim(session_id, owner, "now", takeover_from=None)
        tx.set_claim_state("kept", "suspended")
        tx.insert_turn("task-t", "theirs", "go", "now", task=ParentLink(session_id="p", call_id="c"))
        tx.set_turn_status("task-t", "running")

    def looked(reader: Any) -> tuple[list[str], bool]:
        found = reader.unfinished_turns_with_owners("me")
        same = all(
            claim == reader.get_claim(turn.session_id)
            and owner == (None if claim is None else reader.get_instance(claim.owner))
            for turn, claim, owner in found
        )
        return [turn.session_id for turn, _, _ in found], same

    await store.write(setup)
    assert await store.read(looked) == (["theirs", "kept", "unclaimed"], True)
    await store.write(lambda tx: tx.mark_instance_stopped("me"))
    assert await store.read(looked) == (["mine", "theirs", "kept", "unclaimed"], True)


async def test_the_watch_reads_only_the_decisions_committed_for_what_runs_here(store: Store) -> None:
    """Of the live turns and waits, the turns whose stop is committed and the waits answered (by
    another process): what the watch applies, in a few statements however many run here."""

    def setup(tx: Transaction) -> None:
        a_session_with_a_turn(tx)
        tx.insert_turn("t2", "s1", "go", "now")
        for turn_id in ("t1", "t2"):
            tx.set_turn_status(turn_id, "running")
        assert tx.record_stop_intent("t2", Interrupt.by_person("api"))
        for request_id in ("r1", "r2", "r3"):
            tx.insert_permission(_request(request_id), "t1", None)
        tx.reply_permission("r1", "once", None)
        tx.reply_permission("r3", "reject", "not this one")
        for form_id in ("f1", "f2", "f3"):
            form = Form(
                id=form_id, session_id="s1", call_id="c1", questions=[], status="pending", created_at="now"
            )
            tx.insert_form(form, "t1", None)
        tx.settle_form("f1", "submitted", answers={"q": "yes"})
        tx.settle_form("f3", "cancelled")

    await store.write(setup)
    waits = ["r1", "r2", "r3", "f1", "f2", "f3", "gone"]
    replied, forms = await store.read(lambda r: r.decided_waits(waits))
    assert replied == {"r1": ("once", None, None), "r3": ("reject", "not this one", None)}
    assert [(form.id, form.status) for form in forms] == [("f1", "submitted"), ("f3", "cancelled")]
    stopping = await store.read(lambda r: r.stopping_turns(["t1", "t2", "gone"]))
    assert [(turn.id, turn.stop_reason) for turn in stopping] == [("t2", Interrupt.by_person("api"))]


def _request(request_id: str) -> PermissionRequest:
    return PermissionRequest(
        id=request_id, session_id="s1", call_id="c1", action="shell", resource="ls", status="pending",
        created_at="now",
    )  # fmt: skip


async def test_of_concurrent_replies_to_one_request_exactly_one_wins(store: Store) -> None:
    """Replies race (two nodes, two HTTP requests): the compare-and-set lets exactly one settle it,
    and the request keeps the winner's decision."""

    def ask(tx: Transaction) -> None:
        a_session_with_a_turn(tx)
        tx.insert_permission(_request("r1"), "t1", None)

    await store.write(ask)
    won: list[str] = []

    async def reply(decision: str) -> None:
        if await store.write(lambda tx: tx.reply_permission("r1", decision, None)):
            won.append(decision)

    async with trio.open_nursery() as nursery:
        for decision in ("once", "reject", "always", "once", "reject", "once"):
            nursery.start_soon(reply, decision)
    assert len(won) == 1
    request = await store.read(lambda r: r.get_permission("r1"))
    assert request is not None and request.status == "replied" and request.decision == won[0]


async def test_of_concurrent_stop_intents_for_one_turn_the_first_committed_wins(store: Store) -> None:
    """Two decisions stopping one turn (say an interrupt on one node, a decline on another): one
    intent is recorded, and the turn keeps it."""
    await store.write(a_session_with_a_turn)
    await store.write(lambda tx: tx.set_turn_status("t1", "running"))
    reasons = [Interrupt.by_person("api"), Declined.by_permission("c1")] * 3
    recorded = []

    async def decide(reason: Any) -> None:
        if await store.write(lambda tx: tx.record_stop_intent("t1", reason)):
            recorded.append(reason)

    async with trio.open_nursery() as nursery:
        for reason in reasons:
            nursery.start_soon(decide, reason)
    assert len(recorded) == 1
    turn = await store.read(lambda r: r.get_turn("t1"))
    assert turn is not None and turn.stop_reason == recorded[0]


def test_every_apsw_error_is_translated_at_the_boundary() -> None:
    """No apsw exception escapes the store: each maps to a StoreError subclass."""
    for source, target in APSW_ERRORS_MAPPED.items():
        with pytest.raises(target) as caught, map_apsw_errors():
            raise source("simulated")
        assert isinstance(caught.value.__cause__, source)
    with pytest.raises(errors.StoreError), map_apsw_errors():
        raise apsw.ConstraintError("any other apsw error")


def _damaged_events(path: Path) -> None:
    """A database whose events table's root page is garbage, as a failing disk leaves it."""
    with open_store(str(path)) as store:
        for _ in range(50):
            store.read.sql.run("INSERT INTO events(type, at, payload) VALUES ('x', 'now', '{}')")
    connection = apsw.Connection(str(path))
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = connection.execute("SELECT rootpage FROM sqlite_master WHERE name = 'events'").fetchall()[0][0]
    page_size = connection.execute("PRAGMA page_size").fetchall()[0][0]
    connection.close()
    with path.open("r+b") as file:
        file.seek((root - 1) * page_size)
        file.write(b"\xa5" * page_size)


def test_a_damaged_page_is_refused_at_open_and_a_read_of_it_is_a_store_error(tmp_path: Path) -> None:
    """A corrupt page the start would not even read is found at open; a read that meets one later
    is a StoreError like every other store failure, never a bare apsw exception."""
    path = tmp_path / "damaged.sqlite"
    _damaged_events(path)
    with pytest.raises(errors.StoreError) as refused, open_store(str(path)):
        pass
    assert str(refused.value).startswith("CorruptError: ")
    with open_read_view(str(path)) as reader, pytest.raises(errors.StoreError) as read:
        reader.last_seq()
    assert isinstance(read.value.__cause__, apsw.CorruptError)


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    """A database written by a newer coordinator is not touched."""
    path = str(tmp_path / "new.sqlite")
    connection = apsw.Connection(path)
    connection.execute("PRAGMA user_version=99")
    connection.close()
    with pytest.raises(errors.SchemaTooNew), open_store(path):
        pass
