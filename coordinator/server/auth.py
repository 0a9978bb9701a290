"""Bearer-token authentication of every ``/api`` route and of ``/metrics`` when ``[server] token`` is set."""

from __future__ import annotations

import hashlib
import hmac

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from coordinator.errors import Unauthorized
from coordinator.server.errors import client_error_response

PROTECTED_PREFIX = "/api"
PROTECTED_PATHS = frozenset({"/metrics"})
"""Outside ``/api`` but behind the token too: what the metrics say (sessions, waits) is the API's."""


class BearerAuth:
    """ASGI middleware: ``/api`` and ``/metrics`` requests need ``Authorization: Bearer <token>`` unless
    the token is empty.

    ``/health`` and ``/openapi.json`` stay open so that probes and tooling work without the secret; a
    Prometheus scrape sends the token (its ``authorization`` setting).
    """

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        self.app = app
        self._token = token.encode()
        self._digest = hashlib.sha256(self._token).digest()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._token and _protected(scope["path"]):
            problem = self._problem(Headers(scope=scope).get("authorization"))
            if problem is not None:
                await client_error_response(Unauthorized(message=problem))(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _problem(self, header: str | None) -> str | None:
        if header is None:
            return "this server needs an Authorization: Bearer <token> header"
        scheme, _, given = header.partition(" ")
        # compare_digest takes as long for a near miss as for a wild guess, and comparing digests of
        # equal length keeps the token's length out of the timing too.
        digest = hashlib.sha256(given.strip().encode("utf-8", "surrogateescape")).digest()
        if scheme.lower() != "bearer" or not hmac.compare_digest(digest, self._digest):
            return "the bearer token is wrong"
        return None


def _protected(path: str) -> bool:
    return path == PROTECTED_PREFIX or path.startswith(PROTECTED_PREFIX + "/") or path in PROTECTED_PATHS
