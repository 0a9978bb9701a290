"""Steering, the queue, a soft stop and an edited approval from the page, in a real browser."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.browser.harness import ServerThread, api, plain_server, scripted_config
from tests.browser.test_page_dialogs import DONE, SHELL, open_session, send_prompt


def test_a_person_steers_queues_cancels_stops_after_the_step_and_edits_an_approval(
    page: Page, tmp_path: Path
) -> None:
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, [SHELL, DONE]))) as server:
        sid = open_session(page, server.url, "steering")
        expect(page.get_by_role("button", name="Steer")).to_be_hidden()  # nothing runs yet
        send_prompt(page, "run it")
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("echo hi")

        # The turn waits on its dialog: it runs, so the page offers Steer beside Send.
        steer = page.get_by_role("button", name="Steer")
        expect(steer).to_be_visible()
        page.get_by_role("textbox", name="Prompt").fill("and then say bye")
        steer.click()
        expect(page.get_by_role("status")).to_contain_text("Steer sent")

        # Two prompts queue under the history; the second is cancelled from its line.
        send_prompt(page, "later")
        send_prompt(page, "never")
        queue = page.get_by_role("region", name="Queued prompts")
        expect(queue.locator(".queued")).to_have_count(2)
        queue.locator(".queued", has_text="never").get_by_role("button", name="Cancel").click()
        expect(queue.locator(".queued")).to_have_count(1)
        expect(queue).to_contain_text("later")

        # Stop after this step: the dialog stays open, its call still runs when allowed.
        page.get_by_role("button", name="Stop after this step").click()
        expect(page.get_by_role("status")).to_contain_text("stops after its running step")
        expect(dialog).to_have_count(1)

        # Edit the call's input, then allow it: it runs with the edited command.
        dialog.get_by_role("button", name="Edit").click()
        editor = dialog.get_by_role("textbox", name="Input to run with")
        assert json.loads(editor.input_value()) == {"command": "echo hi"}
        editor.fill('{"command": 5}')
        dialog.get_by_role("button", name="Allow once").click()
        expect(dialog.locator(".error")).to_contain_text("does not fit the input schema")
        editor.fill('{"command": "echo edited"}')
        dialog.get_by_role("button", name="Allow once").click()
        expect(dialog).to_have_count(0)
        expect(page.locator(".call .output").first).to_contain_text("edited")

        # The turn stopped after its step; the steer and "later" ran as turns of their own.
        first = page.locator(".turn").first
        expect(first.locator(".turn-note").last).to_have_attribute("data-outcome", "interrupted")
        expect(first.locator(".turn-note").last).to_contain_text("You stopped this turn after its step")
        expect(page.locator(".turn")).to_have_count(3)
        expect(page.locator(".turn").nth(1).locator(".prompt").first).to_contain_text("later")
        expect(page.locator(".turn").nth(2).locator(".prompt").first).to_contain_text("and then say bye")
        expect(queue).to_be_hidden()
        page.screenshot(path=tmp_path / "steering.png", full_page=True)
        with api(server.url) as http:
            events = http.get(f"/api/session/{sid}/event", params={"follow": "false"}).text
        assert "session.turn.cancelled" in events and '"soft":true' in events.replace(" ", "")
