"""The page's files over HTTP: served at / without a token, locked to its own origin, nothing else."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from coordinator.server.page import CONTENT_SECURITY_POLICY, load_static
from tests.coordinator.server.harness import server_config, serving


async def test_the_page_and_every_file_it_imports_are_served_with_their_type_and_policy(
    tmp_path: Path,
) -> None:
    """No build step and no CDN: every script the page loads comes from the package, from this server."""
    async with (
        serving(server_config(tmp_path)) as listening,
        httpx.AsyncClient(base_url=listening.url) as http,
    ):
        index = await http.get("/")
        assert index.status_code == 200
        assert index.headers["content-type"] == "text/html; charset=utf-8"
        assert index.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert index.headers["x-content-type-options"] == "nosniff"
        scripts = re.findall(r"<script[^>]*>", index.text)
        # No inline script: the page's modules, and the markdown renderer it ships (a classic script).
        assert scripts == [
            '<script src="/static/markdown-it.min.js">',
            '<script type="module" src="/static/app.js">',
        ]
        assert "http://" not in index.text and "https://" not in index.text
        wanted = [
            *re.findall(r'src="/static/([\w.-]+)"', index.text),
            *re.findall(r'href="/static/([\w.]+)"', index.text),
        ]
        seen: set[str] = set()
        while wanted:
            name = wanted.pop()
            if name in seen:
                continue
            seen.add(name)
            response = await http.get(f"/static/{name}")
            assert response.status_code == 200, name
            kind = "text/javascript" if name.endswith(".js") else "text/css"
            assert response.headers["content-type"] == f"{kind}; charset=utf-8"
            wanted += re.findall(r'from "\./([\w.]+)"', response.text)
        assert seen == set(load_static()) - {"index.html"}


async def test_the_page_needs_no_token_while_the_api_behind_it_does(tmp_path: Path) -> None:
    """The page holds no data, so it loads for anyone; it then asks for the token the API wants."""
    config = server_config(tmp_path, token="s3cret")
    async with serving(config) as listening, httpx.AsyncClient(base_url=listening.url) as http:
        assert (await http.get("/")).status_code == 200
        assert (await http.get("/static/app.js")).status_code == 200
        refused = await http.get("/api/session")
        assert refused.status_code == 401 and refused.json()["error"]["name"] == "Unauthorized"
        allowed = await http.get("/api/session", headers={"Authorization": "Bearer s3cret"})
        assert allowed.status_code == 200


async def test_only_the_pages_own_files_are_served_and_the_page_is_not_an_api_operation(
    tmp_path: Path,
) -> None:
    """/static serves a fixed set of files read at start: no path reaches anything else on the disk."""
    async with (
        serving(server_config(tmp_path)) as listening,
        httpx.AsyncClient(base_url=listening.url) as http,
    ):
        for path in ("/static/nothing.js", "/static/..%2Fpage.py", "/static/__init__.py"):
            missing = await http.get(path)
            assert missing.status_code == 404, path
            assert missing.json()["error"]["name"] == "RouteNotFound"
        assert (await http.post("/")).status_code == 405
        paths = (await http.get("/openapi.json")).json()["paths"]
        assert "/" not in paths and not any(p.startswith("/static") for p in paths)
