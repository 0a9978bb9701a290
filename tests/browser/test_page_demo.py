"""Every stop story of `coordinator demo`, driven by a person from the page of a real `coordinator serve`."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.browser.harness import ServeProcess, api, new_page, serve_config


def new_session(page: Page, title: str) -> None:
    page.get_by_label("Title").fill(title)
    page.get_by_role("button", name="New session").click()
    expect(page.locator("#session-title")).to_have_text(title)
    expect(page.locator("#connection")).to_have_text("live")


def run(page: Page, command: str) -> None:
    page.get_by_role("textbox", name="Prompt").fill(f"run: {command}")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("dialog")).to_contain_text(command)


def test_a_person_drives_every_demo_story_from_the_page(page: Page, tmp_path: Path) -> None:
    """A normal turn, a decline, an interrupted wait, and a shutdown whose restored request is answered."""
    config, db = serve_config(tmp_path, None), tmp_path / "db.sqlite"
    with ServeProcess(config, db, tmp_path) as server:
        page.goto(server.url)
        new_session(page, "normal")
        run(page, "echo hello from the page")
        page.get_by_role("button", name="Allow once").click()
        expect(page.locator(".turn-note[data-type='session.idle']")).to_have_attribute(
            "data-outcome", "succeeded"
        )
        expect(page.locator(".call .output")).to_contain_text("hello from the page")
        expect(page.locator(".step .text").last).to_contain_text("The command finished")

        new_session(page, "declined")
        run(page, "echo no")
        page.get_by_role("button", name="Reject").click()
        expect(page.locator(".turn-note[data-type='session.idle']")).to_have_attribute(
            "data-outcome", "declined"
        )

        new_session(page, "interrupted")
        run(page, "echo wait")
        page.get_by_role("button", name="Interrupt").click()
        expect(page.get_by_role("dialog")).to_have_count(0, timeout=1000)
        expect(page.get_by_role("status")).to_contain_text("revoked: interrupt")
        expect(page.locator(".turn-note[data-type='session.idle']")).to_have_attribute(
            "data-outcome", "interrupted"
        )

        new_session(page, "resumed")
        run(page, "echo after the restart")
        request_id = page.get_by_role("dialog").get_attribute("data-id")
        port = server.port
        assert server.terminate() == 0
        expect(page.locator("#connection")).to_have_text("reconnecting…")
        expect(page.locator(".turn-note").last).to_have_text(
            "Stopped: the server shut down; it will continue after the restart"
        )
        expect(page.get_by_role("dialog")).to_have_attribute("data-id", str(request_id))  # still pending
        page.get_by_role("button", name="Allow once").click()  # nobody to answer: the dialog stays usable
        expect(page.get_by_role("dialog").get_by_role("alert")).to_contain_text("Not sent")
        expect(page.get_by_role("button", name="Allow once")).to_be_enabled()
        page.screenshot(path=tmp_path / "server-down.png", full_page=True)

    with ServeProcess(config, db, tmp_path, port=port) as again:
        expect(page.locator("#connection")).to_have_text("live")
        expect(page.locator(".turn-note").last).to_have_text("Resumed after the restart")
        dialog = page.get_by_role("dialog")
        expect(dialog).to_have_count(1)
        expect(dialog).to_have_attribute("data-id", str(request_id))
        expect(dialog).to_have_class("dialog permission restored")
        expect(dialog.get_by_role("alert")).to_contain_text("Not sent")  # until the person tries again
        fresh = new_page(page.context.browser)  # a page opened after the restart shows it too
        fresh.goto(page.url)
        expect(fresh.get_by_role("dialog")).to_have_attribute("data-id", str(request_id))
        fresh.context.close()
        page.screenshot(path=tmp_path / "restored.png", full_page=True)

        dialog.get_by_role("button", name="Allow once").click()
        expect(dialog).to_have_count(0, timeout=1000)
        expect(page.locator(".turn-note[data-type='session.idle']")).to_have_attribute(
            "data-outcome", "succeeded"
        )
        expect(page.locator(".call .output").last).to_contain_text("after the restart")
        texts = page.locator(".turn .prompt").all_text_contents()
        assert texts == ["You run: echo after the restart"]  # the turn once, not replayed twice
        with api(again.url) as http:
            sessions = {s["title"]: s["last_outcome"] for s in http.get("/api/session").json()}
        for title, last in sessions.items():  # the list shows each session's status and last outcome
            link = page.get_by_role("link", name=re.compile(f"^{title} idle"))
            expect(link).to_contain_text(f"· {last}")
        assert sessions == {
            "normal": "succeeded",
            "declined": "declined",
            "interrupted": "interrupted",
            "resumed": "succeeded",
        }
