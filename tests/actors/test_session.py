"""The session actor's claim: a turn read before its claim is taken may have moved on meanwhile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
import trio

from coordinator.actors import session
from coordinator.actors.session import Takeover
from tests.backends import PostgresDatabase, postgres_database, until_a_transaction_waits_for_a_lock
from tests.conftest import make_config, running
from tests.scenarios.test_stop_matrix import DONE

__all__ = ["postgres_database"]


@pytest.mark.parametrize(
    ("stale_status", "takeover"),
    [("queued", None), ("running", Takeover(previous_owner=None, after="crash"))],
)
async def test_a_turn_settled_since_it_was_read_is_not_claimed_again(
    tmp_path: Path, autojump_clock: Any, stale_status: str, takeover: Takeover | None
) -> None:
    """Another instance ran the turn to its end between this one's read and its claim: the claim's
    transaction reads the turn again and leaves it, so it never runs or settles twice (model finding 2).

    The race needs two instances and a pause between a read and a commit, so the test hands
    ``_begin`` the stale row directly.
    """
    async with running(make_config(tmp_path), [DONE]) as (coord, events):
        created = await coord.create_session()
        turn_id = await coord.prompt(created.id, "go")
        await events.wait_for("session.idle")
        settled = coord.store.read.get_turn(turn_id)
        assert settled is not None and settled.status == "settled"
        stale = attrs.evolve(settled, status=stale_status)
        assert await session._begin(coord._runtime, stale, takeover) is None
        after = coord.store.read.get_turn(turn_id)
        assert after is not None and after.status == "settled" and after.outcome == "succeeded"
        claim = coord.store.read.get_claim(created.id)
        assert claim is not None and claim.state == "released" and claim.epoch == 1
        assert len(events.of("session.turn.started")) == 1


async def test_a_takeover_waiting_on_the_owners_settlement_reads_the_turn_it_settled(
    tmp_path: Path, postgres_database: PostgresDatabase
) -> None:
    """On PostgreSQL each statement reads what was committed when it began. The owner, frozen past its
    lease inside its settlement's transaction, holds the session's lock; a takeover that read the
    turn as running waits for that lock, and the owner thaws and commits the settlement. The claim's
    transaction reads the turn only once it holds the lock, so it finds it settled and leaves it: the
    turn is not run or settled a second time (the chaos rounds over nodes found it run again)."""
    postgres_database.empty()
    config = make_config(tmp_path).with_overrides(db=postgres_database.url)
    async with running(config, [DONE]) as (coord, events):
        created = await coord.create_session()
        turn_id = await coord.prompt(created.id, "go")
        await events.wait_for("session.idle")
        with psycopg.connect(postgres_database.url) as owner:
            # The turn as the frozen owner left it: running, its claim held by the owner.
            owner.execute("UPDATE turns SET status = 'running', outcome = NULL WHERE id = %s", (turn_id,))
            owner.execute(
                "UPDATE claims SET state = 'held', owner = 'ins_a' WHERE session_id = %s", (created.id,)
            )
            owner.commit()
            read_running = await coord.store.read(lambda reader: reader.get_turn(turn_id))
            assert read_running is not None and read_running.status == "running"
            # The owner's settlement, the session's lock taken first as every fenced write does.
            owner.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (created.id,))
            owner.execute(
                "UPDATE turns SET status = 'settled', outcome = 'succeeded' WHERE id = %s", (turn_id,)
            )
            owner.execute(
                "UPDATE claims SET state = 'released', owner = NULL WHERE session_id = %s", (created.id,)
            )
            begun: list[object] = []

            async def take_over() -> None:
                takeover = Takeover(previous_owner="ins_a", after="crash")
                begun.append(await session._begin(coord._runtime, read_running, takeover))

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(take_over)
                    await until_a_transaction_waits_for_a_lock(postgres_database.url)
                    owner.commit()  # the owner thaws
        assert begun == [None]
        after = await coord.store.read(lambda reader: reader.get_turn(turn_id))
        assert after is not None and after.status == "settled" and after.outcome == "succeeded"
        claim = await coord.store.read(lambda reader: reader.get_claim(created.id))
        assert claim is not None and claim.state == "released" and claim.epoch == 1
        assert len(events.of("session.turn.started")) == 1
