"""The HTTP edge: which hosts, origins and media types the server answers at all.

A web page the user happens to visit can reach a server on the user's laptop: by DNS rebinding (its
own host name resolving to 127.0.0.1, so the request carries a foreign ``Host``), or by a cross-site
``fetch``/form post (a foreign ``Origin``; a ``text/plain`` body needs no preflight). For a server
whose tools run shell commands either is remote code execution, so every request passes three checks
before anything else sees it: ``Host`` (421), ``Origin`` (403, with CORS for the listed origins) and,
for a request with a body, ``Content-Type`` (415).

``Edge`` is pure ASGI: it looks at the request's headers and, for a listed origin, adds headers to
the response start; it never reads or buffers a body, so event streams pass through untouched.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import attrs
from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator.errors import ClientError, ForbiddenOrigin, MisdirectedRequest, UnsupportedMediaType
from coordinator.server.errors import client_error_response

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})

CORS_METHODS = "GET, POST, DELETE"
CORS_HEADERS = "Authorization, Content-Type, Last-Event-ID"
CORS_EXPOSED = "Link"
CORS_MAX_AGE = "600"
"""Seconds a browser may cache a preflight answer."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this machine only."""
    bare = host.strip("[]").lower()
    if bare in LOOPBACK_NAMES or bare.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> str:
    """The name of a ``Host`` header without its port: ``[::1]:4096`` -> ``::1``."""
    header = host_header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def normal_origin(origin: str) -> str:
    """An origin as browsers send it: lower case, no trailing slash (a config may write one)."""
    return origin.strip().rstrip("/").lower()


@attrs.frozen(kw_only=True)
class EdgePolicy:
    """What the edge accepts: host names beyond loopback, and the origins that get CORS."""

    allowed_hosts: frozenset[str]
    cors_origins: frozenset[str]

    @classmethod
    def of(cls, allowed_hosts: Iterable[str], cors_origins: Iterable[str], bind_host: str) -> EdgePolicy:
        """The policy of a config. A specific bind address (not a wildcard) is answered too: a
        client naming the address the operator chose is not a rebinding page."""
        hosts = {host_name(h) for h in allowed_hosts}
        if bind_host not in ("0.0.0.0", "::", ""):
            hosts.add(bind_host.strip("[]").lower())
        return cls(allowed_hosts=frozenset(hosts), cors_origins=frozenset(map(normal_origin, cors_origins)))

    def host_allowed(self, host_header: str | None) -> bool:
        if not host_header:
            return False
        name = host_name(host_header)
        return is_loopback(name) or name in self.allowed_hosts

    def refusal(self, scope: Scope, headers: Headers) -> ClientError | None:
        """Why the request is refused before routing, or None. Host first: a rebinding page sends
        its own origin, so the Host check is what stops it."""
        host = headers.get("host")
        if not self.host_allowed(host):
            shown = (host or "")[:100]
            return MisdirectedRequest(
                message=f"this server does not answer to Host {shown!r} (see [server] allowed_hosts)",
                host=shown,
            )
        origin = headers.get("origin")
        if origin is not None and not self.origin_allowed(scope, origin, host or ""):
            return ForbiddenOrigin(
                message=f"requests from web pages of {origin[:100]!r} are refused (see [server] cors_origins)",
                origin=origin[:100],
            )
        if _has_body(headers) and not _is_json(headers.get("content-type")):
            given = headers.get("content-type")
            return UnsupportedMediaType(
                message=f"a request body must be Content-Type: application/json, got {given!r}"[:200]
            )
        return None

    def origin_allowed(self, scope: Scope, origin: str, host: str) -> bool:
        normal = normal_origin(origin)
        own = f"{scope.get('scheme', 'http')}://{host}".lower()
        return normal in (own, _without_default_port(own)) or normal in self.cors_origins

    def listed(self, headers: Headers) -> str | None:
        """The request's origin when it is one of ``cors_origins`` (so the response gets CORS headers)."""
        origin = headers.get("origin")
        return origin if origin is not None and normal_origin(origin) in self.cors_origins else None


def _without_default_port(origin: str) -> str:
    for scheme, port in (("http://", ":80"), ("https://", ":443")):
        if origin.startswith(scheme) and origin.endswith(port):
            return origin.removesuffix(port)
    return origin


def _has_body(headers: Headers) -> bool:
    length = headers.get("content-length", "").strip()
    if length:
        return length != "0"
    return "transfer-encoding" in headers


def _is_json(content_type: str | None) -> bool:
    if content_type is None:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


class Edge:
    """ASGI middleware applying an ``EdgePolicy`` to every HTTP request, and answering CORS preflights."""

    def __init__(self, app: ASGIApp, *, policy: EdgePolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self.policy.refusal(scope, headers)
        if refusal is not None:
            await client_error_response(refusal)(scope, receive, send)
            return
        origin = self.policy.listed(headers)
        if origin is None:
            await self.app(scope, receive, send)
        elif scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await _preflight(origin)(scope, receive, send)
        else:
            await self.app(scope, receive, _with_cors(send, origin))


def _cors_headers(origin: str) -> dict[str, str]:
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}


def _preflight(origin: str) -> Response:
    """The answer to a listed origin's preflight: which methods and headers its page may send."""
    headers = {
        **_cors_headers(origin),
        "Access-Control-Allow-Methods": CORS_METHODS,
        "Access-Control-Allow-Headers": CORS_HEADERS,
        "Access-Control-Max-Age": CORS_MAX_AGE,
    }
    return Response(status_code=204, headers=headers)


def _with_cors(send: Send, origin: str) -> Send:
    async def send_with_cors(message: Message) -> None:
        if message["type"] == "http.response.start":
            message.setdefault("headers", [])
            headers = MutableHeaders(scope=message)
            for key, value in _cors_headers(origin).items():
                headers[key] = value
            headers["Access-Control-Expose-Headers"] = CORS_EXPOSED
        await send(message)

    return send_with_cors
