"""Counting every HTTP answer for ``GET /metrics``: by route and status, with its time to start.

The outermost middleware, so it sees the status a client sees (an error handler's, the edge's,
the token check's). The route is the matched route's path template (``/api/session/{sid}/prompt``),
never the request's own path, so that ids do not make a series each; a path no route has is
``unmatched``.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator.metrics import Metrics

UNMATCHED = "unmatched"


class RequestMetrics:
    """ASGI middleware: counts each answer when it starts (an event stream when it opens)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrived = time.perf_counter()

        async def observed(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.metrics.http_answered(route_of(scope), message["status"], time.perf_counter() - arrived)
            await send(message)

        await self.app(scope, receive, observed)


def route_of(scope: Scope) -> str:
    """The path template of the route the router matched (it writes its endpoint into the scope)."""
    endpoint: Any = scope.get("endpoint")
    route = getattr(endpoint, "route_path", None)
    return route if isinstance(route, str) else UNMATCHED
