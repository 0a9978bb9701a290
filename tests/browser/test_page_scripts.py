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


SESSIONS = """async () => {
  const { sessionItems } = await import("/static/sessions.js");
  const session = (id, created_at, parent) => ({
    id, title: `t-${id}`, status: "idle", last_outcome: null, created_at,
    parent: parent ? { session_id: parent, call_id: "c" } : null,
  });
  const list = document.createElement("ul");
  list.append(...sessionItems([
    session("a", "2026-01-01T00:00:01Z"),
    session("b", "2026-01-01T00:00:02Z"),
    session("a1", "2026-01-01T00:00:03Z", "a"),
    session("a2", "2026-01-01T00:00:04Z", "a"),
    session("a11", "2026-01-01T00:00:05Z", "a1"),
    session("orphan", "2026-01-01T00:00:00Z", "gone"),
  ], "a1"));
  // The title and status (the time and id that follow tell same-titled sessions apart: checked apart).
  const shown = (a) => `${a.querySelector(".title").textContent} ${a.querySelector(".status").textContent}`;
  const outline = (ul, depth) => [...ul.children].flatMap((li) => [
    `${"  ".repeat(depth)}${shown(li.querySelector("a"))}${li.querySelector("a").getAttribute("aria-current") ? " *" : ""}`,
    ...(li.querySelector("ul") ? outline(li.querySelector("ul"), depth + 1) : []),
  ]);
  return outline(list, 0);
}"""


def test_the_list_is_newest_first_with_sub_agent_sessions_under_their_parent(loaded: Page) -> None:
    """A person must see which session a sub-agent works for, and where the newest work is."""
    assert loaded.evaluate(SESSIONS) == [
        "t-b idle",
        "t-a idle",
        "  t-a2 idle",
        "  t-a1 idle *",
        "    t-a11 idle",
        "t-orphan idle",
    ]


CHILD = """async () => {
  const { History } = await import("/static/history.js");
  const { Dialogs } = await import("/static/dialogs.js");
  const root = document.createElement("ol");
  const history = new History(root, "s");
  const notices = [];
  const dialogs = new Dialogs(document.createElement("div"), (text) => notices.push(text), (sid) => history.childTitle(sid));
  const sent = [];
  window.fetch = async (url, init) => {
    sent.push([url, init.method, init.headers["Content-Type"], init.body]);
    const settlement = { status: "revoked", reason: { type: "interrupt", by: "api", parent: { session_id: "s", call_id: "c1" } } };
    return new Response(JSON.stringify({ error: { name: "PermissionAlreadySettled", message: "settled", settlement } }), { status: 409 });
  };
  const events = [
    { seq: 1, type: "session.turn.started", session_id: "s", turn_id: "t", prompt: "delegate" },
    { seq: 2, type: "session.step.started", session_id: "s", turn_id: "t", step_id: "st" },
    { seq: 3, type: "session.tool.started", session_id: "s", turn_id: "t", call_id: "c1", name: "task", input: { prompt: "look" } },
    { seq: 4, type: "session.created", session_id: "kid", session: { id: "kid", title: "helper", parent: { session_id: "s", call_id: "c1" } } },
    { seq: 5, type: "session.turn.started", session_id: "kid", turn_id: "kt", prompt: "look" },
    { seq: 6, type: "permission.asked", session_id: "kid", request: { id: "r1", session_id: "kid", call_id: "k1", action: "shell", resource: "ls", status: "pending" } },
  ];
  for (const event of events) { history.apply(event); dialogs.apply(event); }
  const link = root.querySelector("[data-call-id='c1'] a.child");
  const dialog = dialogs.root.querySelector("[role=dialog]");
  const shown = { link: link.textContent, href: link.getAttribute("href"), turns: root.querySelectorAll(".turn").length, dialog: dialog.textContent };
  [...dialog.querySelectorAll("button")].find((b) => b.textContent === "Allow once").click();
  await new Promise((resolve) => setTimeout(resolve, 50));
  return { ...shown, sent, notices, open: dialogs.root.childElementCount };
}"""


def test_a_sub_agent_is_a_link_under_its_task_call_and_its_requests_are_dialogs_of_the_parent(
    loaded: Page,
) -> None:
    """The child's waits block the parent's turn: its dialogs must show on the parent's page and reply to the child."""
    result = loaded.evaluate(CHILD)
    assert result["link"].startswith("helper") and result["href"] == "#/session/kid"
    assert result["turns"] == 1  # the child's own turn is on its own page
    assert "shell" in result["dialog"] and "ls" in result["dialog"]
    assert "Asked by the sub-agent session helper" in result["dialog"]
    assert result["sent"] == [
        ["/api/session/kid/permission/r1/reply", "POST", "application/json", '{"decision":"once"}']
    ]
    assert result["notices"] == [
        'Permission for shell "ls": already settled, revoked: interrupt (by api; from the parent session s)'
    ]
    assert result["open"] == 0
