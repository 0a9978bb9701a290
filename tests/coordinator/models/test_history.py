"""The kept conversation of settled turns: what it keeps, when it reads again, what it drops."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.models.history import SESSION_BYTES, Conversations, conversation_for_model, estimated_bytes
from coordinator.records import ToolError
from coordinator.store import SqliteStore, Transaction, open_store
from coordinator.store.rows import ToolCallRow


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    with open_store(str(tmp_path / "store.sqlite"), synchronous="normal") as opened:
        yield opened


def tail(store: SqliteStore, session_id: str) -> Any:
    """What a step reads of the session's history after the messages kept (``step._conversation``)."""

    async def read(after_ord: int) -> Any:
        return await store.read(lambda reader: reader.history_after(session_id, after_ord))

    return read


def add_turn(tx: Transaction, session_id: str, turn_id: str, status: str) -> None:
    """A turn with its prompt and a text answer."""
    tx.insert_turn(turn_id, session_id, f"prompt of {turn_id}", "now")
    tx.set_turn_status(turn_id, status)
    tx.insert_message(f"{turn_id}-user", session_id, turn_id, "user", "now")
    tx.add_text_part(f"{turn_id}-user", f"prompt of {turn_id}")
    tx.insert_message(f"{turn_id}-answer", session_id, turn_id, "assistant", "now")
    tx.add_text_part(f"{turn_id}-answer", f"answer of {turn_id}")


def add_running_call(tx: Transaction, session_id: str, turn_id: str, call_id: str) -> None:
    """An assistant message whose tool call has no result yet (a suspended turn keeps such a call)."""
    message_id = f"{turn_id}-{call_id}"
    tx.insert_message(message_id, session_id, turn_id, "assistant", "now")
    call = ToolCallRow(
        session_id=session_id,
        call_id=call_id,
        turn_id=turn_id,
        step_id=None,
        parent_call_id=None,
        model_call_id="model-id",
        name="shell",
        input={"command": "ls"},
        status="running",
        output=None,
        error=None,
        partial=None,
        progress=None,
    )
    tx.insert_tool_call(call, "now")
    tx.add_tool_part(message_id, call_id)


async def test_only_settled_turns_are_kept_and_the_rest_is_read_again_at_every_step(
    store: SqliteStore,
) -> None:
    """A call of a turn that is not settled may still get its result (a kept wait answered later):
    that turn is read from the store at every step, never kept."""
    async with store.transaction() as tx:
        tx.insert_session("s", "t", "now")
        add_turn(tx, "s", "t1", "settled")
        add_turn(tx, "s", "t2", "suspended")
        add_running_call(tx, "s", "t2", "call-1")
        add_turn(tx, "s", "t3", "settled")
    conversations = Conversations()
    before = await conversations.request_messages(tail(store, "s"), "s", epoch=1)
    assert before == conversation_for_model(store.read, "s")
    assert conversations.kept_messages("s") == 2  # t1 only: t2 is not settled, and t3 comes after it
    assert '"interrupted"' in (before[5].content or "")  # the call has no result yet

    async with store.transaction() as tx:
        tx.settle_tool_call("s", "call-1", error=ToolError(type="declined", message="no"))
        tx.set_turn_status("t2", "settled")
    after = await conversations.request_messages(tail(store, "s"), "s", epoch=1)
    assert after == conversation_for_model(store.read, "s")
    assert '"declined"' in (after[5].content or "")
    assert conversations.kept_messages("s") == len(after)


async def test_a_claim_held_by_another_owner_meanwhile_reads_the_history_again(store: SqliteStore) -> None:
    """An epoch more than one above the last turn's means another owner held the claim in between:
    nothing kept is trusted, whatever that owner wrote."""
    async with store.transaction() as tx:
        tx.insert_session("s", "t", "now")
        add_turn(tx, "s", "t1", "settled")
    conversations = Conversations()
    await conversations.request_messages(tail(store, "s"), "s", epoch=1)
    store.read.sql.run("UPDATE parts SET text = 'rewritten' WHERE message_id = 't1-answer'")
    assert await conversations.request_messages(tail(store, "s"), "s", epoch=3) == conversation_for_model(
        store.read, "s"
    )
    assert (await conversations.request_messages(tail(store, "s"), "s", epoch=3))[1].content == "rewritten"


async def test_forget_drops_a_session(store: SqliteStore) -> None:
    async with store.transaction() as tx:
        tx.insert_session("s", "t", "now")
        add_turn(tx, "s", "t1", "settled")
    conversations = Conversations()
    await conversations.request_messages(tail(store, "s"), "s", epoch=1)
    assert conversations.size > 0
    conversations.forget("s")
    assert (conversations.kept_messages("s"), conversations.size) == (0, 0)


async def test_messages_read_after_what_was_kept_then_are_refused_once_it_changed(store: SqliteStore) -> None:
    """A step reads the tail in its own transaction (``kept_until``), then hands it over: a tail read
    after an ``ord`` no longer kept would leave messages out, so it is refused (None) and read again."""
    async with store.transaction() as tx:
        tx.insert_session("s", "t", "now")
        add_turn(tx, "s", "t1", "settled")
    conversations = Conversations()
    after = conversations.kept_until("s", epoch=1)
    stored, model_ids = await tail(store, "s")(after)
    assert conversations.messages_after("s", 1, after, stored, model_ids) == conversation_for_model(
        store.read, "s"
    )
    assert conversations.kept_until("s", epoch=1) > after  # the settled turn is kept now
    assert conversations.messages_after("s", 1, after, stored, model_ids) is None
    assert conversations.kept_until("s", epoch=4) == -1  # another owner held the claim meanwhile
    assert await conversations.request_messages(tail(store, "s"), "s", epoch=1) == conversation_for_model(
        store.read, "s"
    )


async def test_sessions_with_nothing_settled_yet_count_against_the_budget(store: SqliteStore) -> None:
    """A session's first step keeps an empty conversation: a server that sees one session after
    another must not keep every one of them."""
    async with store.transaction() as tx:
        for n in range(50):
            tx.insert_session(f"s{n}", "t", "now")
    conversations = Conversations(budget=10 * SESSION_BYTES)
    for n in range(50):
        await conversations.request_messages(tail(store, f"s{n}"), f"s{n}", epoch=1)
    assert conversations.size == 10 * SESSION_BYTES
    for n in range(50):
        conversations.keep_title(f"s{n}", "title")  # kept only beside a kept conversation
    assert [n for n in range(50) if conversations.title(f"s{n}") is not None] == list(range(40, 50))
    assert conversations.size == 10 * (SESSION_BYTES + len("title"))


async def test_the_title_is_kept_beside_the_conversation_and_dropped_with_it(store: SqliteStore) -> None:
    async with store.transaction() as tx:
        tx.insert_session("s", "t", "now")
        add_turn(tx, "s", "t1", "settled")
    conversations = Conversations()
    conversations.keep_title("s", "helper")  # nothing kept of the session yet: not kept either
    assert conversations.title("s") is None
    await conversations.request_messages(tail(store, "s"), "s", epoch=1)
    conversations.keep_title("s", "helper")
    assert conversations.title("s") == "helper"
    await conversations.request_messages(tail(store, "s"), "s", epoch=2)  # the next turn's step
    assert conversations.title("s") == "helper"
    await conversations.request_messages(tail(store, "s"), "s", epoch=5)  # another owner meanwhile
    assert conversations.title("s") is None
    conversations.keep_title("s", "helper")
    conversations.forget("s")
    assert conversations.title("s") is None


async def test_the_sessions_used_least_recently_are_dropped_beyond_the_budget(store: SqliteStore) -> None:
    """The budget bounds the memory of every session's kept conversation together."""
    async with store.transaction() as tx:
        for session_id in ("a", "b"):
            tx.insert_session(session_id, "t", "now")
            add_turn(tx, session_id, f"{session_id}1", "settled")
    one = SESSION_BYTES + estimated_bytes(conversation_for_model(store.read, "a"))
    conversations = Conversations(budget=one + one // 2)
    await conversations.request_messages(tail(store, "a"), "a", epoch=1)
    await conversations.request_messages(tail(store, "b"), "b", epoch=1)
    assert (conversations.kept_messages("a"), conversations.kept_messages("b")) == (0, 2)
    assert conversations.size == one
    await conversations.request_messages(tail(store, "a"), "a", epoch=1)
    assert (conversations.kept_messages("a"), conversations.kept_messages("b")) == (2, 0)
