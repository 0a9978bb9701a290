"""Who is asking: bearer tokens of ``/api`` and ``/metrics``, checked against ``[[principal]]`` entries
and ``[server] token``.

With neither, the server is open (it serves loopback only unless told otherwise). With a token, it is
an ``admin`` named ``token``; each ``[[principal]]`` is a ``user`` (its own sessions) or an ``admin``
(every session), known by the SHA-256 of its token. The principal a request carries is in its
scope (``principal_of``); the routes scope what they read and change by it (``server/app.py``).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Literal

import attrs
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from coordinator.config import TOKEN_PRINCIPAL, PrincipalConfig
from coordinator.errors import Unauthorized
from coordinator.server.errors import client_error_response

PROTECTED_PREFIX = "/api"
PROTECTED_PATHS = frozenset({"/metrics"})
"""Outside ``/api`` but behind the token too: what the metrics say (sessions, waits) is the API's."""

SCOPE_KEY = "coordinator.principal"


@attrs.frozen
class Principal:
    """Who a request comes from: a name, and what it may see (``user``: its own sessions)."""

    name: str
    role: Literal["user", "admin"]

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


@attrs.frozen
class _Known:
    digest: bytes
    principal: Principal


class BearerAuth:
    """ASGI middleware: ``/api`` and ``/metrics`` requests need ``Authorization: Bearer <token>`` naming
    a known principal, unless the server has neither a token nor principals.

    ``/health`` and ``/openapi.json`` stay open so that probes and tooling work without the secret; a
    Prometheus scrape sends the token (its ``authorization`` setting).
    """

    def __init__(self, app: ASGIApp, *, token: str, principals: tuple[PrincipalConfig, ...] = ()) -> None:
        self.app = app
        self._known = [
            _Known(bytes.fromhex(entry.token_sha256), Principal(entry.name, entry.role))
            for entry in principals
        ]
        if token:
            digest = hashlib.sha256(token.encode()).digest()
            self._known.append(_Known(digest, Principal(TOKEN_PRINCIPAL, "admin")))
        # Principals make sessions someone's: without any, the token alone guards an open server.
        self._scoped = bool(principals)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._known and _protected(scope["path"]):
            principal = self._principal(Headers(scope=scope).get("authorization"))
            if isinstance(principal, str):
                await client_error_response(Unauthorized(message=principal))(scope, receive, send)
                return
            if self._scoped:
                scope[SCOPE_KEY] = principal
        await self.app(scope, receive, send)

    def _principal(self, header: str | None) -> Principal | str:
        """The principal the header names, or why it names none."""
        if header is None:
            return "this server needs an Authorization: Bearer <token> header"
        scheme, _, given = header.partition(" ")
        # compare_digest takes as long for a near miss as for a wild guess, and comparing digests of
        # equal length keeps the token's length out of the timing too; every entry is compared.
        digest = hashlib.sha256(given.strip().encode("utf-8", "surrogateescape")).digest()
        found = None
        for known in self._known:
            if hmac.compare_digest(digest, known.digest):
                found = known.principal
        if scheme.lower() != "bearer" or found is None:
            return "the bearer token is wrong"
        return found


def principal_of(request: Request) -> Principal | None:
    """The principal the request comes from; None when the server has no principals (everyone may
    see everything, as before)."""
    found = request.scope.get(SCOPE_KEY)
    return found if isinstance(found, Principal) else None


def _protected(path: str) -> bool:
    return path == PROTECTED_PREFIX or path.startswith(PROTECTED_PREFIX + "/") or path in PROTECTED_PATHS
