"""The server's one error renderer: ``{"error": {"name", "message", **details}}`` for every failure.

Client errors carry their own name, status and details. Routing failures (no such route, a wrong
method) get names of their own. A write the store refused is a 503 ``StoreUnavailable`` that says
what failed, logged once per kind of failure until a write succeeds again. Anything else is a 500
``InternalError`` with a generic message; its traceback goes to the log and never to the client.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator import wire
from coordinator.errors import (
    ClientError,
    InternalError,
    MethodNotAllowed,
    RouteNotFound,
    StoreError,
    StoreNotDurable,
    StoreUnavailable,
    Unauthorized,
)
from coordinator.logs import get_logger

log = get_logger(__name__)

E = TypeVar("E", bound=BaseException)

# Starlette's router raises HTTPException for these; the contract's errors are ClientErrors.
_ROUTING_ERRORS: dict[int, type[ClientError]] = {404: RouteNotFound, 405: MethodNotAllowed}


class ErrorJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped: a message quoting the client's input renders whatever it holds."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


def error_response(
    name: str, status: int, message: str, details: dict[str, Any] | None = None, *, headers: Any = None
) -> JSONResponse:
    """The JSON error response every failure is rendered as."""
    body = {"error": {"name": name, "message": message, **(details or {})}}
    return ErrorJSONResponse(body, status_code=status, headers=headers)


def client_error_response(exc: ClientError) -> JSONResponse:
    """A ``ClientError`` with its name, status and details (``settlement`` of a 409, ...)."""
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    return error_response(exc.name, exc.status, exc.message, _details(exc), headers=headers)


def _details(exc: ClientError) -> dict[str, Any]:
    """The error's fields beyond ``message``, as the wire form carries them."""
    fields = wire.unstructure(exc)
    fields.pop("message", None)
    return dict(fields)


async def handle_client_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette exception handler for ``ClientError``."""
    assert isinstance(exc, ClientError)
    if exc.status >= 500:
        log.warning("request_refused", name=exc.name, path=request.url.path, message=exc.message)
    return client_error_response(exc)


async def handle_http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette exception handler for its routing errors (404 no route, 405 wrong method)."""
    assert isinstance(exc, HTTPException)
    message = f"{request.method} {request.url.path}: {exc.detail}"
    headers = dict(exc.headers or {})
    if "Allow" in headers:  # Starlette joins a set: sorted, the header reads the same every time
        headers["Allow"] = ", ".join(sorted(method.strip() for method in headers["Allow"].split(",")))
    cls = _ROUTING_ERRORS.get(exc.status_code)
    if cls is None:
        return error_response("HTTPError", exc.status_code, message, headers=headers)
    error = cls(message=message)
    return error_response(error.name, error.status, message, headers=headers)


class ErrorBoundary:
    """ASGI middleware: any exception that escaped the handlers becomes a logged 500 ``InternalError``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.outage = StoreOutage()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if message["status"] < 500 and scope["method"] != "GET":
                    self.outage.write_answered()
            await send(message)

        try:
            await self.app(scope, receive, send_tracking)
        except Exception as exc:
            client = _sole_client_error(exc)
            refused = _sole_error(exc, StoreError) if client is None else None
            if refused is not None:
                client = self.outage.refused(scope, refused)
            elif client is None:
                log.error("request_failed", method=scope["method"], path=scope["path"], exc_info=exc)
                client = InternalError(message="internal error; the server log has the details")
            if not started:
                await client_error_response(client)(scope, receive, send)


class StoreOutage:
    """The store's refusals as the server answers them: a 503 ``StoreUnavailable`` each, and one log
    line per kind of failure (a full disk, an I/O error) until a write is answered again, not one
    per request."""

    def __init__(self) -> None:
        self.logged: dict[str, int] = {}  # kind -> requests refused since it was logged

    def refused(self, scope: Scope, exc: StoreError) -> StoreUnavailable:
        kind = f"{type(exc).__name__}: {exc}"
        if kind not in self.logged:
            log.error("store_unavailable", kind=kind, method=scope["method"], path=scope["path"])
            self.logged[kind] = 0
        self.logged[kind] += 1
        if isinstance(exc, StoreNotDurable):
            return StoreUnavailable(
                message=f"the database could not make this request's write durable ({exc}). Retry once "
                "it writes again; read first if the request must not be made twice."
            )
        return StoreUnavailable(
            message=f"the database refused the write ({exc}); nothing of this request was saved. "
            "Retry once it writes again."
        )

    def write_answered(self) -> None:
        if self.logged:
            log.info("store_available", refused=sum(self.logged.values()), kinds=sorted(self.logged))
            self.logged.clear()


def _sole_client_error(exc: BaseException) -> ClientError | None:
    """The ``ClientError`` that ``exc`` is, or that a nursery wrapped alone in an exception group."""
    return _sole_error(exc, ClientError)


def _sole_error(exc: BaseException, cls: type[E]) -> E | None:
    """``exc`` if it is a ``cls``, or the ``cls`` a nursery wrapped alone in an exception group."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, cls) else None
