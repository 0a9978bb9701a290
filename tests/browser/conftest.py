"""Browser tests: skipped with one line when Chromium is missing, except in CI, where that fails them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from tests.browser.harness import chromium_missing, new_page, open_browser

MISSING = chromium_missing()
IN_CI = os.environ.get("CI", "").lower() == "true"

# Without Chromium the files are not even collected (one line in the summary says so); in CI a
# missing browser must fail the run instead, so there they are collected and the fixture fails.
collect_ignore_glob = ["test_*.py"] if MISSING and not IN_CI else []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if MISSING and not IN_CI:
        terminalreporter.write_line(f"browser tests skipped: {MISSING}")


@pytest.fixture
def browser() -> Iterator[Browser]:
    if MISSING:
        pytest.fail(f"CI=true and the browser tests cannot run: {MISSING}")
    with open_browser() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser, tmp_path: Path) -> Iterator[Page]:
    """A fresh page; its last look is saved as ``tmp_path/last.png`` whatever the outcome."""
    opened = new_page(browser)
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    opened.screenshot(path=tmp_path / "last.png", full_page=True)
    assert errors == [], f"the page's script raised: {errors}"
