"""An MCP server on the page: its status under the session list, and its question as a dialog whose
inputs are typed by the server's schema (a number box, a checkbox, one choice of several)."""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
from playwright.sync_api import Page, expect

from coordinator.config import McpConfig
from tests.browser.harness import ServerThread, plain_server, scripted_config
from tests.browser.test_page_dialogs import open_session, send_prompt
from tests.mcp.servers import FIXTURE

ASK = {"tool_calls": [{"id": "call_ask", "name": "fx__ask", "input": {}}]}


def test_a_servers_question_is_a_typed_dialog_and_its_status_is_shown(page: Page, tmp_path: Path) -> None:
    record = tmp_path / "fixture.jsonl"
    env = {"FIXTURE_RECORD": str(record), "FIXTURE_REVISION": "2025"}
    server = McpConfig(name="fx", command=(sys.executable, str(FIXTURE), "stdio"), env=env)
    config = attrs.evolve(scripted_config(tmp_path, [ASK, {"text": "done"}]), mcp=(server,))
    with ServerThread(lambda: plain_server(config)) as running:
        open_session(page, running.url, "mcp form")
        servers = page.get_by_role("region", name="Tool servers (MCP)")
        expect(servers).to_contain_text("fx ready", timeout=20_000)
        expect(servers).to_contain_text("2025-11-25")
        send_prompt(page, "ask me")
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("Question from fx")
        expect(dialog).to_contain_text("Tell me about you")
        dialog.get_by_role("textbox", name="Your name").fill("Ada")
        age = dialog.get_by_role("spinbutton", name="Age")
        expect(age).to_have_attribute("step", "1")
        age.fill("36")
        dialog.get_by_role("checkbox", name="Subscribe?").check()
        dialog.get_by_role("radio", name="green").check()
        dialog.get_by_role("button", name="Submit").click()
        expect(dialog).to_have_count(0, timeout=5000)
        expect(page.locator(".call .output").first).to_contain_text("Ada is 36, subscribe=True, likes green")
        expect(page.locator(".turn-note").last).to_have_attribute("data-outcome", "succeeded")
