"""The page's dialogs in a real browser: shown only while their request is pending, never in the way."""

from __future__ import annotations

import re
import time
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.browser.harness import Network, ServerThread, api, networked_server, plain_server, scripted_config

SHELL = {"tool_calls": [{"id": "call_shell", "name": "shell", "input": {"command": "echo hi"}}]}
QUESTION = {
    "tool_calls": [
        {
            "id": "call_question",
            "name": "question",
            "input": {"questions": [{"id": "q1", "prompt": "Go on?", "options": ["yes", "no"]}]},
        }
    ]
}
DONE = {"text": "done"}


def open_session(page: Page, url: str, title: str) -> str:
    """Create a session through the API, then open it from the page's list by its link."""
    with api(url) as http:
        session = http.post("/api/session", json={"title": title}).json()
    page.goto(url)
    page.get_by_role("link", name=re.compile(f"^{re.escape(title)}")).click()
    expect(page.locator("#connection")).to_have_text("live")
    return str(session["id"])


def send_prompt(page: Page, text: str) -> None:
    page.get_by_role("textbox", name="Prompt").fill(text)
    page.get_by_role("button", name="Send").click()


def test_an_interrupt_from_elsewhere_closes_the_dialog_with_its_reason_and_the_prompt_box_works(
    page: Page, tmp_path: Path
) -> None:
    """Seed 003: a dialog left after its request was revoked blocked the composer and answered 404 forever."""
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, [SHELL, DONE]))) as server:
        sid = open_session(page, server.url, "seed 003")
        send_prompt(page, "run it")
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("shell")
        expect(dialog).to_contain_text("echo hi")
        page.screenshot(path=tmp_path / "1-dialog.png", full_page=True)

        with api(server.url) as http:
            assert http.post(f"/api/session/{sid}/interrupt").json() == {"interrupted": True}
        asked = time.monotonic()
        expect(dialog).to_have_count(0, timeout=1000)
        closed_after = time.monotonic() - asked
        expect(page.get_by_role("status")).to_contain_text("revoked: interrupt")
        expect(page.locator(".turn-note").last).to_have_attribute("data-outcome", "interrupted")
        page.screenshot(path=tmp_path / "2-revoked.png", full_page=True)

        send_prompt(page, "and now?")
        expect(page.locator(".turn")).to_have_count(2)
        expect(page.locator(".turn").last.locator(".prompt")).to_contain_text("and now?")
        expect(page.locator(".turn").last.locator(".turn-note").last).to_have_attribute(
            "data-outcome", "succeeded"
        )
        expect(page.locator(".turn").last.locator(".step .text")).to_have_text("done")
        expect(page.get_by_role("textbox", name="Prompt")).to_have_value("")
        page.screenshot(path=tmp_path / "3-next-turn.png", full_page=True)
        with api(server.url) as http:
            assert http.get(f"/api/session/{sid}").json()["last_outcome"] == "succeeded"
            assert http.get(f"/api/session/{sid}/permission").json() == []
    print(f"dialog closed {closed_after * 1000:.0f} ms after the interrupt answered")


def test_a_reply_that_lost_the_race_to_a_revocation_closes_the_dialog_and_shows_the_settlement(
    page: Page, tmp_path: Path
) -> None:
    """A person who clicks before the revocation reaches the page gets a 409: the dialog must still close."""
    network = Network()
    config = scripted_config(tmp_path, [SHELL, DONE])
    with ServerThread(lambda: networked_server(config, network)) as server:
        sid = open_session(page, server.url, "race")
        send_prompt(page, "run it")
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("echo hi")
        server.run_sync(network.hold)  # the page hears nothing more for now
        with api(server.url) as http:
            assert http.post(f"/api/session/{sid}/interrupt").json() == {"interrupted": True}
        expect(dialog).to_have_count(1)
        dialog.get_by_role("button", name="Allow once").click()
        expect(dialog).to_have_count(0, timeout=1000)
        notices = page.get_by_role("status")
        expect(notices).to_contain_text('Permission for shell "echo hi": already settled, revoked: interrupt')
        page.screenshot(path=tmp_path / "settlement.png", full_page=True)

        server.run_sync(network.release)  # the revocation arrives late: it is not shown a second time
        expect(page.locator(".turn-note").last).to_have_attribute("data-outcome", "interrupted")
        expect(notices.locator("p")).to_have_count(1)
        expect(dialog).to_have_count(0)


def test_a_reply_from_another_tab_closes_this_tabs_dialog_and_says_so(page: Page, tmp_path: Path) -> None:
    """Two tabs show one request: the one that did not answer must not keep a dialog that 409s."""
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, [SHELL, DONE]))) as server:
        open_session(page, server.url, "two tabs")
        other = page.context.new_page()
        other.goto(page.url)
        send_prompt(page, "run it")
        expect(other.get_by_role("dialog")).to_contain_text("echo hi")
        expect(page.get_by_role("dialog")).to_contain_text("echo hi")
        other.get_by_role("dialog").get_by_role("button", name="Allow once").click()
        expect(other.get_by_role("status")).to_contain_text('Permission for shell "echo hi": allowed (once)')
        expect(page.get_by_role("dialog")).to_have_count(0, timeout=1000)
        expect(page.get_by_role("status")).to_contain_text('Permission for shell "echo hi": replied: once')
        expect(page.locator(".call").first).to_have_attribute("data-state", "succeeded")
        expect(page.locator(".turn-note").last).to_have_attribute("data-outcome", "succeeded")
        other.close()


def test_a_reject_declines_the_turn_and_a_reject_with_a_message_is_feedback(
    page: Page, tmp_path: Path
) -> None:
    """Reject alone stops the turn (declined); with a message the model hears it and the turn goes on."""
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, [SHELL, DONE]))) as server:
        sid = open_session(page, server.url, "decline")
        send_prompt(page, "run it")
        page.get_by_role("dialog").get_by_role("button", name="Reject").click()
        expect(page.get_by_role("dialog")).to_have_count(0, timeout=1000)
        expect(page.get_by_role("status")).to_contain_text('Permission for shell "echo hi": rejected')
        expect(page.locator(".turn-note").last).to_have_attribute("data-outcome", "declined")
        expect(page.locator(".call").first).to_have_attribute("data-state", "failed")
        page.screenshot(path=tmp_path / "declined.png", full_page=True)

        feedback = open_session(page, server.url, "feedback")
        send_prompt(page, "run it")
        dialog = page.get_by_role("dialog")
        dialog.get_by_label("Message (optional)").fill("not that one")
        dialog.get_by_role("button", name="Reject").click()
        expect(page.locator(".turn-note").last).to_have_attribute("data-outcome", "succeeded")
        expect(page.locator(".call .error").first).to_contain_text("not that one")
        with api(server.url) as http:
            assert http.get(f"/api/session/{sid}").json()["last_outcome"] == "declined"
            assert http.get(f"/api/session/{feedback}").json()["last_outcome"] == "succeeded"


def test_a_question_form_is_submitted_dismissed_or_closed_when_dismissed_elsewhere(
    page: Page, tmp_path: Path
) -> None:
    """A form is a dialog with its prompts: Submit answers it, Dismiss declines, and another client's answer closes it."""
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, [QUESTION, DONE]))) as server:
        open_session(page, server.url, "form submit")
        send_prompt(page, "ask me")
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("Go on?")
        page.screenshot(path=tmp_path / "form.png", full_page=True)
        dialog.get_by_role("radio", name="yes").check()
        dialog.get_by_role("button", name="Submit").click()
        expect(dialog).to_have_count(0, timeout=1000)
        expect(page.locator(".call").first).to_have_attribute("data-state", "succeeded")
        expect(page.locator(".call .output").first).to_contain_text('"q1": "yes"')
        expect(page.locator(".turn-note").last).to_have_attribute("data-outcome", "succeeded")

        open_session(page, server.url, "form dismiss")
        send_prompt(page, "ask me")
        page.get_by_role("dialog").get_by_role("button", name="Dismiss").click()
        expect(page.get_by_role("dialog")).to_have_count(0, timeout=1000)
        expect(page.locator(".turn-note").last).to_have_attribute("data-outcome", "declined")

        elsewhere = open_session(page, server.url, "form elsewhere")
        send_prompt(page, "ask me")
        expect(page.get_by_role("dialog")).to_contain_text("Go on?")
        with api(server.url) as http:
            form = http.get(f"/api/session/{elsewhere}/form").json()[0]
            assert http.delete(f"/api/session/{elsewhere}/form/{form['id']}").status_code == 200
        expect(page.get_by_role("dialog")).to_have_count(0, timeout=1000)
        expect(page.get_by_role("status")).to_contain_text('Question "Go on?": cancelled: dismissed')


def test_the_page_asks_for_the_token_and_sends_it_as_a_bearer(page: Page, tmp_path: Path) -> None:
    """A server with a token: the page itself loads, then asks once for the token the API wants."""
    config = scripted_config(tmp_path, [SHELL, DONE], token="s3cret")
    with ServerThread(lambda: plain_server(config)) as server:
        with api(server.url) as http:
            http.post("/api/session", json={"title": "guarded"}, headers={"Authorization": "Bearer s3cret"})
        page.goto(server.url)
        page.get_by_label("Token").fill("wrong")
        page.get_by_role("button", name="Connect").click()
        expect(page.locator("#token-form")).to_contain_text("that token was refused")
        page.get_by_label("Token").fill("s3cret")
        page.get_by_role("button", name="Connect").click()
        page.get_by_role("link", name=re.compile("^guarded")).click()
        expect(page.locator("#connection")).to_have_text("live")
        send_prompt(page, "run it")
        page.get_by_role("dialog").get_by_role("button", name="Allow once").click()
        expect(page.locator(".turn-note[data-type='session.idle']")).to_have_attribute(
            "data-outcome", "succeeded"
        )
        expect(page.locator("#token-form")).to_be_hidden()
        assert page.evaluate("sessionStorage.getItem('coordinator.token')") == "s3cret"


def test_always_allow_closes_the_other_dialogs_its_rule_now_allows(page: Page, tmp_path: Path) -> None:
    """`always` resolves the session's other pending requests: their dialogs must not wait for a click."""
    twice = {
        "tool_calls": [
            {"id": "call_a", "name": "shell", "input": {"command": "echo hi"}},
            {"id": "call_b", "name": "shell", "input": {"command": "echo hi"}},
        ]
    }
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, [twice, DONE]))) as server:
        open_session(page, server.url, "always")
        send_prompt(page, "run both")
        dialogs = page.get_by_role("dialog")
        expect(dialogs).to_have_count(2)
        dialogs.first.get_by_role("button", name="Always allow").click()
        expect(dialogs).to_have_count(0, timeout=1000)
        notices = page.get_by_role("status").locator("p")
        expect(notices).to_have_count(2, timeout=1000)
        assert sorted(notices.all_text_contents()) == [  # the cascade may be heard before the answer
            'Permission for shell "echo hi": allowed (always)',
            'Permission for shell "echo hi": replied: always',
        ]
        expect(page.locator(".call[data-state='succeeded']")).to_have_count(2)
        expect(page.locator(".turn-note[data-type='session.idle']")).to_have_attribute(
            "data-outcome", "succeeded"
        )


def test_the_prompt_box_is_never_blocked_by_a_dialog(page: Page, tmp_path: Path) -> None:
    """Seed 003's composer was blocked by a dialog: here a person can type and queue a prompt beside one."""
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, [SHELL, DONE]))) as server:
        open_session(page, server.url, "composer")
        send_prompt(page, "run it")
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("echo hi")
        prompt = page.get_by_role("textbox", name="Prompt")
        dialog_box, prompt_box = dialog.bounding_box(), prompt.bounding_box()
        assert dialog_box is not None and prompt_box is not None
        assert dialog_box["y"] + dialog_box["height"] <= prompt_box["y"]  # beside it, never over it
        prompt.click()
        page.keyboard.type("and then this")
        page.keyboard.press("Enter")
        expect(prompt).to_have_value("")  # accepted (202) and queued behind the running turn
        expect(dialog).to_have_count(1)
        dialog.get_by_role("button", name="Allow once").click()
        expect(page.locator(".turn")).to_have_count(2)
        expect(page.locator(".turn").last.locator(".prompt")).to_have_text("You and then this")
        idles = page.locator(".turn-note[data-type='session.idle']")
        expect(idles).to_have_count(2)
        expect(idles.first).to_have_attribute("data-outcome", "succeeded")
        expect(idles.last).to_have_attribute("data-outcome", "succeeded")
