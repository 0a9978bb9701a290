"""The page with a principal's token: it asks for the token, then shows that principal's sessions only."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import attrs
from playwright.sync_api import Page, expect

from coordinator.config import PrincipalConfig
from tests.browser.harness import ServerThread, api, plain_server, scripted_config


def _principal(name: str, token: str) -> PrincipalConfig:
    return PrincipalConfig(name=name, token_sha256=hashlib.sha256(token.encode()).hexdigest(), role="user")


def test_the_page_shows_a_principal_only_its_own_sessions(page: Page, tmp_path: Path) -> None:
    config = attrs.evolve(
        scripted_config(tmp_path, [{"text": "hello"}]),
        principal=(_principal("ada", "ada-token"), _principal("bob", "bob-token")),
    )
    with ServerThread(lambda: plain_server(config)) as server:
        with api(server.url) as http:
            http.post(
                "/api/session", json={"title": "ada's work"}, headers={"Authorization": "Bearer ada-token"}
            )
            http.post(
                "/api/session", json={"title": "bob's work"}, headers={"Authorization": "Bearer bob-token"}
            )
        page.goto(server.url)
        page.get_by_label("Token").fill("ada-token")
        page.get_by_role("button", name="Connect").click()
        expect(page.get_by_role("link", name=re.compile("^ada's work"))).to_be_visible()
        expect(page.get_by_role("link", name=re.compile("^bob's work"))).to_have_count(0)
        page.get_by_role("link", name=re.compile("^ada's work")).click()
        page.get_by_role("textbox", name="Prompt").fill("hi")
        page.get_by_role("button", name="Send").click()
        expect(page.locator(".turn-note[data-type='session.idle']")).to_have_attribute(
            "data-outcome", "succeeded"
        )
