"""The session actor's claim: a turn read before its claim is taken may have moved on meanwhile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from actors import session
from actors.session import Takeover
from tests.conftest import make_config, running
from tests.scenarios.test_stop_matrix import DONE


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
