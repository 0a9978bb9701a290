"""The page a person keeps open all day: it follows the newest output, keeps the session's head in view,
fits a phone, renders the model's markdown safely, and says how a turn ended in one line of words."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Browser, Page, expect

from tests.browser.harness import ServerThread, plain_server, scripted_config
from tests.browser.test_page_dialogs import SHELL, open_session, send_prompt

LONG = "\n\n".join(f"Paragraph {n}: " + "a line of the model's answer that goes on " * 4 for n in range(12))
MARKDOWN = (
    "## A plan\n\nThis is **bold** and `code`.\n\n- one\n- two\n\n"
    "<script>window.pwned = true</script> and <b>raw</b> stay text.\n\n" + LONG
)
STREAMED = {"chunks": [f"Streamed piece {n}. " * 8 + "\n\n" for n in range(10)], "chunk_delay": 0.3}


def _last_line_in_view(page: Page) -> bool:
    """Whether the last turn's last line is inside the viewport, above the sticky prompt box."""
    return bool(
        page.evaluate(
            """() => {
              const turn = [...document.querySelectorAll('.turn')].pop();
              const composer = document.getElementById('composer').getBoundingClientRect();
              const bottom = turn.getBoundingClientRect().bottom;
              return bottom > 0 && bottom <= composer.top + 2;
            }"""
        )
    )


def test_the_page_follows_keeps_its_head_renders_markdown_and_says_how_a_turn_ended(
    page: Page, tmp_path: Path
) -> None:
    script = [{"text": MARKDOWN}, {"text": LONG}, {"text": LONG}, STREAMED, SHELL]
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, script))) as server:
        page.goto(server.url)
        expect(page.locator("#connection")).to_have_text("connected")  # before any session is chosen
        sid = open_session(page, server.url, "for people")
        expect(page.get_by_role("button", name="Interrupt")).to_be_disabled()  # nothing runs

        # Markdown, rendered; the model's HTML is text, never markup.
        send_prompt(page, "plan")
        text = page.locator(".turn").first.locator(".step .text")
        expect(text.locator("h2")).to_have_text("A plan")
        expect(text.locator("strong")).to_have_text("bold")
        expect(text.locator("li")).to_have_count(2)
        expect(text).to_contain_text("<script>window.pwned = true</script>")
        assert text.locator("script, b").count() == 0
        assert page.evaluate("() => window.pwned === undefined")
        expect(page.locator(".turn-note[data-type='session.idle']").first).to_contain_text("Done")

        # A long session: after each prompt the newest turn's end is on screen, above the prompt box.
        for word in ("more", "again"):
            send_prompt(page, word)
            expect(page.locator(".turn-note[data-type='session.idle']")).to_have_count(
                2 if word == "more" else 3
            )
            page.wait_for_function("() => document.scrollingElement.scrollHeight > innerHeight")
            assert _last_line_in_view(page)
        # The head stays in view: the title and Interrupt after the page scrolled down.
        head = page.locator(".session-head")
        assert head.bounding_box()["y"] <= 1  # type: ignore[index]
        expect(page.get_by_role("heading", name="for people")).to_be_in_viewport()

        # While text streams, the end follows it; scrolled up to read, the page stays put and offers a way back.
        send_prompt(page, "stream")
        expect(page.get_by_role("button", name="Interrupt")).to_be_enabled()
        expect(page.locator(".turn").last.locator(".text")).to_contain_text("Streamed piece 3")
        assert _last_line_in_view(page)
        page.mouse.wheel(0, -2000)
        page.wait_for_timeout(300)
        expect(page.get_by_role("button", name="New output below ↓")).to_be_visible()
        page.get_by_role("button", name="New output below ↓").click()
        assert _last_line_in_view(page)
        expect(page.locator(".turn-note[data-type='session.idle']")).to_have_count(4)
        page.screenshot(path=tmp_path / "page-1280.png")

        # A stop is one line in words, with how long the turn took.
        send_prompt(page, "run: echo hi")
        expect(page.get_by_role("dialog")).to_be_visible()
        page.get_by_role("button", name="Interrupt").click()
        last = page.locator(".turn").last
        expect(last.locator(".turn-note")).to_have_count(1)
        expect(last.locator(".turn-note")).to_contain_text("You stopped this turn")
        expect(last.locator(".turn-note")).to_have_attribute("data-outcome", "interrupted")
        assert sid


def test_the_page_fits_a_phone_with_no_sideways_scroll(browser: Browser, tmp_path: Path) -> None:
    script = [{"text": MARKDOWN}]
    context = browser.new_context(viewport={"width": 360, "height": 740})
    page = context.new_page()
    try:
        with ServerThread(lambda: plain_server(scripted_config(tmp_path, script))) as server:
            open_session(page, server.url, "on a phone")
            nav = page.get_by_role("navigation", name="Sessions")
            expect(nav).to_be_hidden()  # the list folds away once a session is open
            send_prompt(page, "plan")
            expect(page.locator(".turn-note[data-type='session.idle']")).to_contain_text("Done")
            width = page.evaluate("() => [document.scrollingElement.scrollWidth, innerWidth]")
            assert width[0] <= width[1], width
            for name in ("Interrupt", "Send"):
                box = page.get_by_role("button", name=name).bounding_box()
                assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 360
            page.get_by_role("button", name="Sessions").click()
            expect(nav).to_be_visible()
            expect(page.get_by_role("link", name="on a phone")).to_be_visible()
            page.get_by_role("link", name="on a phone").click()
            expect(nav).to_be_hidden()
            page.set_viewport_size({"width": 390, "height": 844})
            page.screenshot(path=tmp_path / "page-390.png")
    finally:
        context.close()
