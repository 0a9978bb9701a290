"""A session's history on the page: tool calls with their state, and the nested calls of execute."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.browser.harness import ServerThread, api, plain_server, scripted_config
from tests.browser.test_page_dialogs import DONE, open_session, send_prompt

CODE = 'print("listing")\nfirst = await tools.shell(command="echo nested")\nreturn first["stdout"].strip()'
EXECUTE = {"tool_calls": [{"id": "call_exec", "name": "execute", "input": {"code": CODE}}]}


def test_the_nested_calls_of_execute_sit_under_it_with_their_own_state_and_dialog(
    page: Page, tmp_path: Path
) -> None:
    """A nested call asks permission like any call: the page must show which call asks, and where."""
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, [EXECUTE, DONE]))) as server:
        open_session(page, server.url, "execute")
        send_prompt(page, "script it")
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("echo nested")
        execute = page.locator(".call[data-call-id='call_exec']")
        nested = execute.locator(".nested > .call")
        expect(nested).to_have_count(1)
        expect(nested).to_have_attribute("data-state", "waiting")
        expect(execute.locator("> .call-head .call-state")).to_have_text("running")
        page.screenshot(path=tmp_path / "nested-asks.png", full_page=True)
        dialog.get_by_role("button", name="Allow once").click()
        expect(execute).to_have_attribute("data-state", "succeeded")
        expect(nested).to_have_attribute("data-state", "succeeded")
        expect(execute.locator("> .call-details .logs")).to_have_text("listing")
        expect(execute.locator("> .call-details .output")).to_have_text("nested")
        expect(page.locator(".step .text").last).to_have_text("done")
        page.screenshot(path=tmp_path / "nested-done.png", full_page=True)


def test_an_interrupted_execute_shows_its_partial_result_once(page: Page, tmp_path: Path) -> None:
    """Seed 002's other half: what a stopped script logged and did stays on the page, not doubled."""
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, [EXECUTE, DONE]))) as server:
        open_session(page, server.url, "execute stopped")
        send_prompt(page, "script it")
        expect(page.get_by_role("dialog")).to_contain_text("echo nested")
        execute = page.locator(".call[data-call-id='call_exec']")
        expect(execute.locator("> .call-details .logs")).to_have_text("listing")
        page.get_by_role("button", name="Interrupt").click()
        expect(page.get_by_role("dialog")).to_have_count(0, timeout=1000)
        expect(execute).to_have_attribute("data-state", "failed")
        expect(execute.locator("> .call-head .call-state")).to_have_text("failed: interrupted")
        expect(execute.locator("> .call-details .logs")).to_have_text("listing")
        expect(execute.locator(".nested > .call")).to_have_count(1)
        expect(execute.locator(".nested > .call")).to_have_attribute("data-state", "failed")
        expect(page.locator(".turn-note[data-type='session.idle']")).to_have_attribute(
            "data-outcome", "interrupted"
        )


def test_older_sessions_are_one_click_away(page: Page, tmp_path: Path) -> None:
    """The list shows the newest sessions (the API pages them); a person can still reach older ones."""
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, [DONE]))) as server:
        with api(server.url) as http:
            for n in range(101):
                http.post("/api/session", json={"title": f"s{n:03}"})
        page.goto(server.url)
        links = page.locator("nav .sessions a")
        expect(links.first).to_contain_text("s100")  # newest first
        more = page.get_by_role("button", name="Older sessions")
        more.click()
        expect(links).to_have_count(101)
        expect(links.last).to_contain_text("s000")
        expect(more).to_be_hidden()
