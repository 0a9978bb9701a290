"""Sub-agent sessions on the page: nested under their task call, their dialogs on
the parent's page."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.browser.harness import ServerThread, plain_server, scripted_config
from tests.browser.test_page_dialogs import DONE, SHELL, open_session, send_prompt

TASK = {"tool_calls": [{"id": "call_task", "name": "task", "input": {"prompt": "look", "title": "helper"}}]}


def test_a_sub_agents_request_is_answered_from_its_parents_page(page: Page, tmp_path: Path) -> None:
    """A child's wait blocks its parent's turn: the person watching the parent must see and answer it."""
    script = {"*": [TASK, DONE], "helper": [SHELL, {"text": "child done"}]}
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, script))) as server:
        open_session(page, server.url, "parent")
        send_prompt(page, "delegate")
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("echo hi")
        expect(dialog).to_contain_text("Asked by the sub-agent session helper")
        task = page.locator(".call[data-call-id='call_task']")
        expect(task.locator("a.child")).to_contain_text("helper")
        expect(page.locator("nav li li").get_by_role("link", name=re.compile("^helper"))).to_have_count(1)
        page.screenshot(path=tmp_path / "child-asks.png", full_page=True)
        dialog.get_by_role("button", name="Allow once").click()
        expect(dialog).to_have_count(0, timeout=1000)
        expect(task).to_have_attribute("data-state", "succeeded")
        expect(page.locator(".turn-note[data-type='session.idle']")).to_have_attribute(
            "data-outcome", "succeeded"
        )
        task.locator("a.child").click()
        expect(page.locator("#session-title")).to_have_text("helper")
        expect(page.locator(".call[data-state='succeeded']")).to_have_count(1)
        expect(page.locator(".step .text").last).to_have_text("child done")
