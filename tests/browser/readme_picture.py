"""Draw the README's pictures of the page: `.venv/bin/python -m tests.browser.readme_picture`.

A scripted session whose model streams an answer, runs one command and asks to run another, seen
in Debian's Chromium exactly as the browser tests see the page: ``design/img/page.png`` (1100 px
wide), ``page-1280.png`` (a wide screen) and ``page-390.png`` (a phone).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import attrs
from playwright.sync_api import expect

from tests.browser.harness import ServerThread, api, new_page, open_browser, plain_server, scripted_config

IMG = Path(__file__).resolve().parents[2] / "design" / "img"
PICTURE = IMG / "page.png"
SIZES = {"page-1280.png": (1280, 800), "page-390.png": (390, 844)}

SCRIPT = [
    {
        "chunks": ["I can run that ", "for you: first ", "I will list the files."],
        "chunk_delay": 0.05,
        "tool_calls": [{"id": "call_ls", "name": "shell", "input": {"command": "ls -p"}}],
    },
    {
        "text": "Four entries, **build/** among them:\n\n- `src/` and two files to keep\n- `build/`, "
        "made by the last build\n\nShall I clean up the build folder?",
        "tool_calls": [{"id": "call_rm", "name": "shell", "input": {"command": "rm -rf build/"}}],
    },
]


def draw(folder: Path) -> None:
    work = folder / "repo"
    for name in ("src", "build"):
        (work / name).mkdir(parents=True)
    for name in ("README.md", "pyproject.toml"):
        (work / name).write_text("x")
    config = attrs.evolve(scripted_config(folder, SCRIPT), base_dir=work)
    with ServerThread(lambda: plain_server(config)) as server, open_browser() as browser:
        with api(server.url) as http:
            http.post("/api/session", json={"title": "earlier work"})
            session = http.post("/api/session", json={"title": "tidy the repository"}).json()
        page = new_page(browser)
        page.goto(f"{server.url}/#/session/{session['id']}")
        page.get_by_role("textbox", name="Prompt").fill("What is in this folder? Tidy it up.")
        page.get_by_role("button", name="Send").click()
        page.get_by_role("dialog").get_by_role("button", name="Allow once").click()
        expect(page.get_by_role("dialog")).to_contain_text("rm -rf build/")
        page.wait_for_timeout(300)  # let the list catch up with the turn
        page.screenshot(path=PICTURE)
        for name, (width, height) in SIZES.items():
            page.set_viewport_size({"width": width, "height": height})
            page.wait_for_timeout(200)
            page.screenshot(path=IMG / name)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="page-picture-") as folder:
        draw(Path(folder))
    print(PICTURE, *(IMG / name for name in SIZES))
