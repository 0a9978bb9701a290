"""The web page for people: static files shipped in the package, served at ``/``.

The page needs no token to load: it holds no data. Its script asks the person for the token when the
API answers 401 and sends it as a bearer. Every file is read once, when the app is built, so a request
never touches the disk, and each answer carries a Content-Security-Policy that lets the page load
nothing but its own files and talk to nothing but its own server.
"""

from __future__ import annotations

from importlib import resources

import attrs
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from coordinator.server.errors import error_response

STATIC_PACKAGE = "coordinator.server"
STATIC_FOLDER = "static"

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}

# Only the page's own files and its own server; no inline script, no frames, no form posts elsewhere.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    # The files change with the package; a reload after an upgrade must not run an old script.
    "cache-control": "no-cache",
}


@attrs.frozen
class StaticFile:
    """One file of the page, read at start, with its media type."""

    body: bytes
    media_type: str

    def response(self) -> Response:
        return Response(self.body, media_type=self.media_type, headers=_HEADERS)


def load_static() -> dict[str, StaticFile]:
    """Every file of the page's folder by name (``index.html``, ``app.js``, ...)."""
    folder = resources.files(STATIC_PACKAGE).joinpath(STATIC_FOLDER)
    files = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            files[entry.name] = StaticFile(body=entry.read_bytes(), media_type=_TYPES[suffix])
    return files


async def index(request: Request) -> Response:
    """``GET /``: the page itself."""
    page: StaticFile = request.app.state.static["index.html"]
    return page.response()


async def static_file(request: Request) -> Response:
    """``GET /static/{name}``: a script or style sheet of the page; 404 ``RouteNotFound`` otherwise."""
    name = request.path_params["name"]
    found: StaticFile | None = request.app.state.static.get(name)
    if found is None:
        return error_response("RouteNotFound", 404, f"GET /static/{name}: no such file")
    return found.response()


ROUTES = (
    Route("/", index, methods=["GET"], name="page"),
    Route("/static/{name}", static_file, methods=["GET"], name="page_static"),
)
"""The page's routes; they are not API operations, so the OpenAPI document leaves them out."""
index.route_path = "/"  # type: ignore[attr-defined]  # labels in the request metrics
static_file.route_path = "/static/{name}"  # type: ignore[attr-defined]
