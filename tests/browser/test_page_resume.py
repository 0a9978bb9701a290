"""The page's Resume button for a turn a start with ``[server] resume = "manual"`` left suspended."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.browser.harness import ServerThread, api, plain_server, scripted_config
from tests.browser.test_page_dialogs import DONE, SHELL, open_session, send_prompt


def test_a_suspended_session_shows_resume_and_its_dialog_can_be_answered_before(
    page: Page, tmp_path: Path
) -> None:
    """The kept dialog stays answerable while the turn is parked (nothing runs yet); Resume then
    finishes the turn with that answer, and the button goes away."""
    config = scripted_config(tmp_path, [SHELL, DONE], resume="manual")
    with ServerThread(lambda: plain_server(config)) as first:
        sid = open_session(page, first.url, "parked")
        send_prompt(page, "run it")
        expect(page.get_by_role("dialog")).to_contain_text("echo hi")
        expect(page.get_by_role("button", name="Resume")).to_be_hidden()
    with ServerThread(lambda: plain_server(config)) as second:
        page.goto(f"{second.url}/#/session/{sid}")
        expect(page.locator("#connection")).to_have_text("live")
        expect(page.locator("#session-state")).to_have_text(re.compile("^suspended"))
        page.get_by_role("dialog").get_by_role("button", name="Allow once").click()
        expect(page.get_by_role("dialog")).to_have_count(0, timeout=1000)
        expect(page.locator("#session-state")).to_have_text(re.compile("^suspended"))
        page.get_by_role("button", name="Resume").click()
        expect(page.get_by_role("status")).to_contain_text("Resumed: the suspended turn goes on.")
        expect(page.locator(".turn-note").last).to_have_attribute("data-outcome", "succeeded")
        expect(page.get_by_role("button", name="Resume")).to_be_hidden()
        with api(second.url) as http:
            assert http.post(f"/api/session/{sid}/resume").json()["error"]["name"] == "NothingToResume"
