"""The model's text streaming into the page: in order, once, and kept when stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from tests.browser.harness import Network, ServerThread, networked_server, plain_server, scripted_config
from tests.browser.test_page_dialogs import open_session, send_prompt

WATCH_TEXT = """() => {
  window.seenTexts = [];
  const look = () => {
    for (const text of document.querySelectorAll(".step .text")) {
      const seen = `${text.dataset.status}:${text.textContent}`;
      if (text.textContent && window.seenTexts.at(-1) !== seen) window.seenTexts.push(seen);
    }
  };
  new MutationObserver(look).observe(document.getElementById("history"),
    { subtree: true, childList: true, characterData: true, attributes: true });
}"""


def streamed(page: Page) -> list[str]:
    seen: list[str] = page.evaluate("window.seenTexts")
    return seen


def chunks(words: list[str], delay: float) -> dict[str, Any]:
    return {"chunks": words, "chunk_delay": delay}


def assert_grew_once(seen: list[str], final: str) -> None:
    """Every snapshot is a longer prefix of ``final`` than the one before: nothing shown twice."""
    texts = [entry.split(":", 1)[1] for entry in seen]
    assert all(final.startswith(text) for text in texts), seen
    lengths = [len(text) for text in texts if text != final]
    assert lengths == sorted(set(lengths)), seen


def test_the_models_text_streams_in_and_the_stored_text_replaces_it(page: Page, tmp_path: Path) -> None:
    """A person sees the answer as it is written, then exactly the stored answer."""
    script = [chunks(["Hel", "lo, ", "wor", "ld"], 0.3)]
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, script))) as server:
        open_session(page, server.url, "streaming")
        page.evaluate(WATCH_TEXT)
        send_prompt(page, "say hello")
        text = page.locator(".step .text")
        expect(text).to_have_attribute("data-status", "streaming")
        page.screenshot(path=tmp_path / "streaming.png", full_page=True)
        expect(text).to_have_attribute("data-status", "complete")
        expect(text).to_have_text("Hello, world")
    seen = streamed(page)
    assert seen[-1] == "complete:Hello, world"
    assert len([entry for entry in seen if entry.startswith("streaming:")]) >= 2, seen
    assert_grew_once(seen, "Hello, world")


def test_an_interrupt_while_the_model_streams_keeps_the_text_so_far(page: Page, tmp_path: Path) -> None:
    """The streamed text is the model's partial answer: a stop must not make it vanish from the page."""
    script = [chunks(["Once ", "upon ", "a ", "time ", "there ", "was"], 1.0)]
    with ServerThread(lambda: plain_server(scripted_config(tmp_path, script))) as server:
        open_session(page, server.url, "stopped")
        send_prompt(page, "tell a story")
        text = page.locator(".step .text")
        expect(text).to_contain_text("Once upon")
        page.get_by_role("button", name="Interrupt").click()
        expect(text).to_have_attribute("data-status", "interrupt")
        # One line says how the turn ended, in words; the step's cut text is shown as it stood.
        expect(page.locator(".turn-note[data-type='session.idle']")).to_contain_text("You stopped this turn")
        expect(page.locator(".turn-note[data-type='session.idle']")).to_have_attribute(
            "data-outcome", "interrupted"
        )
        partial = text.text_content() or ""
        assert partial.startswith("Once upon") and not partial.endswith("was"), partial


def test_a_stream_dropped_mid_answer_catches_up_without_repeating_text(page: Page, tmp_path: Path) -> None:
    """After a reconnect the server sends all text so far at offset 0: the page must not show it twice."""
    network = Network()
    streams: list[str] = []
    page.on("request", lambda request: "/event" in request.url and streams.append(request.url))
    script = [chunks(["one ", "two ", "three ", "four ", "five"], 0.4)]
    config = scripted_config(tmp_path, script)
    with ServerThread(lambda: networked_server(config, network)) as server:
        open_session(page, server.url, "catch-up")
        page.evaluate(WATCH_TEXT)
        send_prompt(page, "count")
        text = page.locator(".step .text")
        expect(text).to_contain_text("one two")
        server.run_sync(network.drop)
        expect(text).to_have_attribute("data-status", "complete")
        expect(text).to_have_text("one two three four five")
    assert_grew_once(streamed(page), "one two three four five")
    assert len(streams) == 2, streams  # the first stream and the one after the drop
