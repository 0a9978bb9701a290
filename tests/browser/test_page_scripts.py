"""The page's own logic, run in the browser on crafted input: frames, dedupe by seq, deltas by offset."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page

from tests.browser.harness import ServerThread, plain_server, scripted_config


@pytest.fixture
def loaded(page: Page, tmp_path: Path) -> Iterator[Page]:
    """The page, loaded from a server, so that its modules can be imported by a test's script."""
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, [{"text": "x"}]))) as server:
        page.goto(server.url)
        yield page


FOLLOWER = """async () => {
  const { EventFollower, parseFrame } = await import("/static/sse.js");
  const seen = [];
  const follower = new EventFollower("/nowhere", {
    onEvent: (e) => seen.push(`event ${e.seq}`),
    onDelta: (d) => seen.push(`delta ${d.offset}`),
    onFrame: (type) => seen.push(type),
  });
  const frames = [
    'id: 1\\nevent: session.created\\ndata: {"seq":1,"type":"session.created"}',
    ": keep-alive",
    'id: 2\\nevent: session.idle\\ndata: {"seq":2,"type":"session.idle"}',
    'id: 2\\nevent: session.idle\\ndata: {"seq":2,"type":"session.idle"}',
    'id: 1\\nevent: session.created\\ndata: {"seq":1,"type":"session.created"}',
    'event: session.text.delta\\ndata: {"seq":null,"offset":0,"delta":"a"}',
    'event: stream.truncated\\ndata: {"oldest_seq":7}',
    'id: 3\\r\\nevent: session.idle\\r\\ndata: {"seq":3,\\ndata: "type":"session.idle"}',
  ];
  for (const text of frames) follower.dispatch(parseFrame(text.replace(/\\r\\n/g, "\\n")));
  return { seen, lastId: follower.lastId };
}"""


def test_the_follower_delivers_each_seq_once_and_deltas_without_moving_the_last_id(loaded: Page) -> None:
    """A replay that repeats an event (an overlap after a reconnect) must not show it twice."""
    result = loaded.evaluate(FOLLOWER)
    assert result == {
        "seen": ["event 1", "event 2", "delta 0", "stream.truncated", "event 3"],
        "lastId": "3",
    }


DELTAS = """async () => {
  const { History } = await import("/static/history.js");
  const history = new History(document.createElement("ol"), "s");
  const text = () => history.steps.get("st").text.textContent;
  const ids = { session_id: "s", turn_id: "t", step_id: "st" };
  const seen = [];
  history.apply({ seq: 1, type: "session.turn.started", prompt: "p", ...ids });
  history.apply({ seq: 2, type: "session.step.started", ...ids });
  for (const [offset, delta] of [[0, "Hé😀"], [3, "llo"], [0, "Hé"], [2, "😀l"], [12, "gap"], [7, "never"]]) {
    history.delta({ offset, delta, ...ids });
    seen.push(text());
  }
  history.delta({ offset: 0, delta: "Hé😀llo wor", ...ids });
  seen.push(text());
  history.apply({ seq: 3, type: "session.step.succeeded", message: { text: "Hé😀llo world" }, ...ids });
  history.delta({ offset: 11, delta: "late", ...ids });
  seen.push(text(), history.steps.get("st").text.dataset.status);
  return seen;
}"""


def test_deltas_are_placed_by_their_offset_in_code_points_and_the_stored_text_wins(loaded: Page) -> None:
    """A repeat changes nothing, a gap waits for the catch-up, and the step's own text replaces the stream."""
    assert loaded.evaluate(DELTAS) == [
        "Hé😀",
        "Hé😀llo",
        "Hé😀llo",
        "Hé😀llo",
        "Hé😀llo",
        "Hé😀llo",
        "Hé😀llo wor",
        "Hé😀llo world",
        "complete",
    ]
