"""The page's event stream: a dropped connection resumes with Last-Event-ID and shows nothing twice."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, Request, expect

from tests.browser.harness import Network, ServerThread, api, networked_server, scripted_config
from tests.browser.test_page_dialogs import DONE, SHELL, open_session, send_prompt


def stored_seqs(url: str, sid: str, type: str) -> list[int]:
    """The seqs of the session's stored events of ``type`` (an SSE replay read by hand)."""
    with api(url) as http:
        text = http.get(f"/api/session/{sid}/event", params={"follow": "false"}).text
    seqs = []
    for frame in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if fields.get("event") == type:
            seqs.append(int(fields["id"]))
    return seqs


def test_a_dropped_stream_resumes_after_the_last_event_seen_and_shows_each_event_once(
    page: Page, tmp_path: Path
) -> None:
    """Events committed while the page was cut off arrive after the reconnect, once, in order."""
    network = Network()
    streams: list[str | None] = []

    def record(request: Request) -> None:
        if "/event" in request.url:
            streams.append(request.headers.get("last-event-id"))

    page.on("request", record)
    config = scripted_config(tmp_path, [SHELL, DONE])
    with ServerThread(lambda: networked_server(config, network)) as server:
        sid = open_session(page, server.url, "dropped")
        send_prompt(page, "run it")
        expect(page.get_by_role("dialog")).to_contain_text("echo hi")
        server.run_sync(network.hold)
        with api(server.url) as http:
            assert http.post(f"/api/session/{sid}/interrupt").json() == {"interrupted": True}
        server.run_sync(network.drop)
        expect(page.locator("#connection")).to_have_text("live")  # reconnected, still held
        expect(page.get_by_role("dialog")).to_have_count(1)
        server.run_sync(network.release)
        expect(page.get_by_role("dialog")).to_have_count(0, timeout=1000)
        expect(page.locator(".turn-note[data-type='session.idle']")).to_have_attribute(
            "data-outcome", "interrupted"
        )
        expect(page.get_by_role("status").locator("p")).to_have_text(
            ['Permission for shell "echo hi": revoked: interrupt (by api)']
        )
        expect(page.locator(".call")).to_have_count(1)
        asked = stored_seqs(server.url, sid, "permission.asked")
    assert streams[:2] == [None, str(asked[0])]
