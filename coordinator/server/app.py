"""The HTTP API as a Starlette app over one ``Coordinator``."""

from __future__ import annotations

import functools
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from coordinator import errors, metrics, wire
from coordinator._coordinator import Coordinator
from coordinator.config import Config
from coordinator.mcp import ServerState
from coordinator.records import MAX_TEXT, Form, Message, Node, PermissionRequest, QueuedTurn, Session
from coordinator.server import page, sse
from coordinator.server.auth import BearerAuth, Principal, principal_of
from coordinator.server.bodies import (
    CreateSessionBody,
    FormAnswersBody,
    Health,
    InterruptBody,
    InterruptResult,
    PromptAccepted,
    PromptBody,
    ReplyBody,
    ReplyResult,
    ResumeAccepted,
    read_body,
)
from coordinator.server.edge import Edge, EdgePolicy
from coordinator.server.errors import ErrorBoundary, handle_client_error, handle_http_error
from coordinator.server.observed import RequestMetrics
from coordinator.server.openapi import Operation, Parameter, openapi_document
from coordinator.store import Reader


def build_app(
    coordinator: Coordinator, config: Config, *, keepalive: float = sse.KEEPALIVE_SECONDS
) -> Starlette:
    """The API over ``coordinator``; ``config`` gives the token and the edge policy; ``keepalive``
    paces SSE comments.

    The edge checks (Host, Origin, Content-Type) run first, then the token, then the routes: one
    route a path, so that a wrong method's 405 lists every method of the path.
    """
    server = config.server
    policy = EdgePolicy.of(server.allowed_hosts, server.cors_origins, server.host)
    app = Starlette(
        routes=[*routes_of(OPERATIONS), *page.ROUTES],
        middleware=[
            Middleware(RequestMetrics, metrics=coordinator.metrics),
            Middleware(ErrorBoundary),
            Middleware(Edge, policy=policy),
            Middleware(BearerAuth, token=server.token, principals=config.principal),
        ],
        exception_handlers={errors.ClientError: handle_client_error, HTTPException: handle_http_error},
    )
    # A path the API does not know (`/api/session/%2F` among them) is its JSON 404, never a redirect.
    app.router.redirect_slashes = False
    app.state.coordinator = coordinator
    app.state.keepalive = keepalive
    app.state.openapi = openapi_document(OPERATIONS, secured=bool(server.token))
    app.state.static = page.load_static()
    return app


def routes_of(operations: tuple[Operation, ...]) -> list[Route]:
    """One Starlette route a path, dispatching by method to its operations.

    HEAD is answered like GET, except on event streams, which never end.
    """
    by_path: dict[str, dict[str, Operation]] = {}
    for op in operations:
        by_path.setdefault(op.path, {})[op.method] = op
    routes = []
    for path, methods in by_path.items():
        route = Route(path, _dispatcher(methods), methods=list(methods), name=path)
        if route.methods is not None and any(op.stream for op in methods.values()):
            route.methods.discard("HEAD")
        routes.append(route)
    return routes


def _dispatcher(methods: dict[str, Operation]) -> Any:
    async def dispatch(request: Request) -> Any:
        method = "GET" if request.method == "HEAD" else request.method
        return await methods[method].endpoint(request)

    # The route's label in the request metrics (``observed.route_of``).
    dispatch.route_path = next(iter(methods.values())).path  # type: ignore[attr-defined]
    return dispatch


DEFAULT_PAGE = 100
"""Sessions in one page of ``GET /api/session`` when ``?limit=`` is not given."""

MAX_PAGE = 1000


def _coordinator(request: Request) -> Coordinator:
    coordinator: Coordinator = request.app.state.coordinator
    return coordinator


async def _sid(request: Request) -> str:
    """The path's session id, once the asking principal may see that session: another's answers 404,
    exactly as one that never existed."""
    sid: str = request.path_params["sid"]
    user = _user(request)
    if user is not None:
        exists, owner = await _coordinator(request).store.read(lambda reader: reader.session_owner(sid))
        if not exists or owner != user.name:
            raise errors.SessionNotFound(message=f"no session {sid!r}", session_id=sid)
    return sid


def _user(request: Request) -> Principal | None:
    """The asking principal when its role limits it to its own sessions (a ``user``), else None."""
    principal = principal_of(request)
    return principal if principal is not None and not principal.is_admin else None


def _by(request: Request) -> str | None:
    """Who decides, for the events that record it (``by``): the asking principal's name, if any."""
    principal = principal_of(request)
    return None if principal is None else principal.name


def _admin_only(request: Request) -> None:
    if _user(request) is not None:
        raise errors.Forbidden(message=f"{request.url.path} is for an admin only")


def _json(value: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(wire.unstructure(value), status_code=status)


def _int_query(request: Request, name: str) -> int:
    text = request.query_params.get(name, "0")
    value = sse.parse_seq(text)
    if value is None:
        raise errors.InvalidRequest(
            message=f"query.{name}: expected an integer from 0 to {sse.MAX_SEQ}, got {text[:40]!r}"
        )
    return value


def _bool_query(request: Request, name: str, default: bool) -> bool:
    text = request.query_params.get(name)
    if text is None:
        return default
    words = {"true": True, "1": True, "false": False, "0": False}
    if text.lower() not in words:
        raise errors.InvalidRequest(message=f"query.{name}: expected true or false, got {text!r}")
    return words[text.lower()]


async def health(request: Request) -> Response:
    return _json(Health(status="ok"))


async def openapi_json(request: Request) -> Response:
    # The server's URL as this client reached it (its Host already passed the edge).
    server_url = str(request.base_url).rstrip("/")
    return JSONResponse({**request.app.state.openapi, "servers": [{"url": server_url}]})


async def metrics_text(request: Request) -> Response:
    _admin_only(request)
    return Response(_coordinator(request).metrics_text(), media_type=metrics.CONTENT_TYPE)


async def create_session(request: Request) -> Response:
    body = await read_body(request, CreateSessionBody, empty=CreateSessionBody())
    return _json(await _coordinator(request).create_session(title=body.title, owner=_by(request)), 201)


async def list_sessions(request: Request) -> Response:
    limit = _limit_query(request)
    before = request.query_params.get("before") or None
    user = _user(request)
    owner = None if user is None else user.name
    page, more = await _coordinator(request).list_sessions_page(limit=limit, before=before, owner=owner)
    response = _json(page)
    if more:
        following = request.url.include_query_params(limit=limit, before=page[-1].id)
        response.headers["Link"] = f'<{following}>; rel="next"'
    return response


def _limit_query(request: Request) -> int:
    text = request.query_params.get("limit")
    if text is None:
        return DEFAULT_PAGE
    value = sse.parse_seq(text)
    if value is None or not 1 <= value <= MAX_PAGE:
        raise errors.InvalidRequest(
            message=f"query.limit: expected an integer from 1 to {MAX_PAGE}, got {text[:40]!r}"
        )
    return value


async def get_session(request: Request) -> Response:
    return _json(await _coordinator(request).get_session(await _sid(request)))


async def delete_session(request: Request) -> Response:
    await _coordinator(request).delete_session(await _sid(request))
    return Response(status_code=204)


async def prompt(request: Request) -> Response:
    body = await read_body(request, PromptBody)
    coordinator, sid, by = _coordinator(request), await _sid(request), _by(request)
    if body.mode == "steer":
        steered = await coordinator.steer(
            sid, body.text, expected_turn_id=body.expected_turn_id, principal=by
        )
        return _json(PromptAccepted(turn_id=steered.turn_id, steer_id=steered.steer_id), 202)
    turn_id = await coordinator.prompt(
        sid, body.text, mode=body.mode, expected_turn_id=body.expected_turn_id, principal=by
    )
    return _json(PromptAccepted(turn_id=turn_id), 202)


async def interrupt(request: Request) -> Response:
    body = await read_body(request, InterruptBody, empty=InterruptBody())
    stopped = await _coordinator(request).interrupt(
        await _sid(request), by="api", when=body.when, queued=body.queued, principal=_by(request)
    )
    return _json(InterruptResult(interrupted=stopped))


async def list_turns(request: Request) -> Response:
    status = request.query_params.get("status", "queued")
    if status != "queued":
        raise errors.InvalidRequest(
            message=f"query.status: only queued turns are listed, got {status[:40]!r}"
        )
    return _json(await _coordinator(request).queued_turns(await _sid(request)))


async def cancel_turn(request: Request) -> Response:
    await _coordinator(request).cancel_turn(await _sid(request), request.path_params["tid"])
    return Response(status_code=204)


async def resume(request: Request) -> Response:
    turn_id = await _coordinator(request).resume(await _sid(request))
    return _json(ResumeAccepted(turn_id=turn_id), 202)


async def history(request: Request) -> Response:
    return _json(await _coordinator(request).history(await _sid(request)))


async def nodes(request: Request) -> Response:
    _admin_only(request)
    return _json(await _coordinator(request).nodes())


async def mcp_servers(request: Request) -> Response:
    # Every principal may see them: their tools are offered to every session.
    return _json(_coordinator(request).mcp_servers())


async def all_permissions(request: Request) -> Response:
    pending = await _coordinator(request).pending_permissions()
    user = _user(request)
    if user is None:
        return _json(pending)
    store = _coordinator(request).store
    owners = {
        sid: await store.read(functools.partial(_owner, sid)) for sid in {p.session_id for p in pending}
    }
    return _json([each for each in pending if owners[each.session_id] == user.name])


def _owner(session_id: str, reader: Reader) -> str | None:
    return reader.session_owner(session_id)[1]


async def session_permissions(request: Request) -> Response:
    return _json(await _coordinator(request).pending_permissions(await _sid(request)))


async def reply_permission(request: Request) -> Response:
    body = await read_body(request, ReplyBody)
    settled = await _coordinator(request).reply_permission(
        await _sid(request),
        request.path_params["rid"],
        body.decision,
        body.message,
        input=body.input,
        principal=_by(request),
    )
    return _json(ReplyResult(request=settled))


async def session_forms(request: Request) -> Response:
    return _json(await _coordinator(request).pending_forms(await _sid(request)))


async def submit_form(request: Request) -> Response:
    body = await read_body(request, FormAnswersBody)
    form = await _coordinator(request).submit_form(
        await _sid(request), request.path_params["fid"], body.answers, principal=_by(request)
    )
    return _json(form)


async def dismiss_form(request: Request) -> Response:
    message = request.query_params.get("message") or None
    if message is not None and len(message) > MAX_TEXT:
        raise errors.InvalidRequest(message=f"query.message: longer than {MAX_TEXT} characters")
    form = await _coordinator(request).dismiss_form(
        await _sid(request), request.path_params["fid"], message, principal=_by(request)
    )
    return _json(form)


async def all_events(request: Request) -> ASGIApp:
    return _event_stream(request, session_id=None)


async def session_events(request: Request) -> ASGIApp:
    session = await _coordinator(request).get_session(await _sid(request))
    return _event_stream(request, session_id=session.id)


def _event_stream(request: Request, *, session_id: str | None) -> sse.EventStream:
    return sse.EventStream(
        coordinator=_coordinator(request),
        after=sse.resume_point(_int_query(request, "after"), request.headers.get("last-event-id")),
        session_id=session_id,
        follow=_bool_query(request, "follow", True),
        keepalive=request.app.state.keepalive,
        deltas=_bool_query(request, "deltas", False),
        descendants=_bool_query(request, "descendants", False),
        owner=None if (user := _user(request)) is None else user.name,
    )


_SESSION = (errors.SessionNotFound,)
_CLOSED = (errors.CoordinatorClosed,)
_SEQ = {"minimum": 0, "maximum": sse.MAX_SEQ}
_EVENT_PARAMETERS = (
    Parameter(
        name="after",
        where="query",
        hint=int,
        constraints=_SEQ,
        description="stream the events with a larger seq",
    ),
    Parameter(
        name="follow",
        where="query",
        hint=bool,
        description="true (default): replay, then stream live; false: end after the stored events",
    ),
    Parameter(
        name="deltas",
        where="query",
        hint=bool,
        description="also stream `session.text.delta` frames (live only, no id) as the model writes",
    ),
    Parameter(
        name="descendants",
        where="query",
        hint=bool,
        description="also stream the events of the session's sub-agent sessions",
    ),
    Parameter(
        name="Last-Event-ID",
        where="header",
        hint=str,
        description="resume after this seq (the larger of it and `after` wins; a malformed one is ignored)",
    ),
)
_PAGE_PARAMETERS = (
    Parameter(
        name="limit",
        where="query",
        hint=int,
        constraints={"minimum": 1, "maximum": MAX_PAGE},
        description=f"sessions in this page (default {DEFAULT_PAGE})",
    ),
    Parameter(
        name="before",
        where="query",
        hint=str,
        description="the sessions created before this one (the last id of the previous page)",
    ),
)
_NEXT_PAGE = {"Link": '`<URL>; rel="next"`: the next page, when there is one'}
_LIVE_END = {
    "Coordinator-Last-Seq": "the seq of the last event published when the stream began: where the live "
    "part starts (a stream with a larger `after` and `follow=false` reads it without any event)"
}

OPERATIONS: tuple[Operation, ...] = (
    Operation(method="GET", path="/health", name="health", summary="The server is up",
              endpoint=health, response=Health, open=True),
    Operation(method="GET", path="/openapi.json", name="openapi", summary="This document",
              endpoint=openapi_json, response=dict[str, Any], open=True),
    Operation(method="GET", path="/metrics", name="metrics",
              summary="This coordinator's metrics in the Prometheus text format (version 0.0.4)",
              endpoint=metrics_text, response=str, media_type="text/plain", errors=(errors.Forbidden,)),
    Operation(method="POST", path="/api/session", name="create_session", summary="Create a session",
              endpoint=create_session, status=201, body=CreateSessionBody, body_optional=True,
              response=Session, errors=_CLOSED),
    Operation(method="GET", path="/api/session", name="list_sessions",
              summary="The sessions, newest first, a page at a time", endpoint=list_sessions,
              response=list[Session], parameters=_PAGE_PARAMETERS, headers=_NEXT_PAGE,
              errors=_SESSION),
    Operation(method="GET", path="/api/session/{sid}", name="get_session", summary="One session",
              endpoint=get_session, response=Session, errors=_SESSION),
    Operation(method="DELETE", path="/api/session/{sid}", name="delete_session",
              summary="Delete a settled session with its history, requests, forms and events",
              endpoint=delete_session, status=204, errors=(*_SESSION, errors.SessionBusy)),
    Operation(method="POST", path="/api/session/{sid}/prompt", name="prompt",
              summary="Queue a turn, steer the running one, or interrupt it and run next", endpoint=prompt,
              status=202, body=PromptBody, response=PromptAccepted,
              errors=(*_SESSION, errors.TurnMismatch, *_CLOSED)),
    Operation(method="POST", path="/api/session/{sid}/interrupt", name="interrupt",
              summary="Stop the running turn (reason interrupt, by api), now or after its step",
              endpoint=interrupt, body=InterruptBody, body_optional=True, response=InterruptResult,
              errors=_SESSION),
    Operation(method="GET", path="/api/session/{sid}/turn", name="list_turns",
              summary="The session's queued turns, in the order they will run", endpoint=list_turns,
              response=list[QueuedTurn],
              parameters=(Parameter(name="status", where="query", hint=Literal["queued"],
                                    description="the turns of this status (only queued is listed)"),),
              errors=_SESSION),
    Operation(method="DELETE", path="/api/session/{sid}/turn/{tid}", name="cancel_turn",
              summary="Cancel a queued turn: it never runs", endpoint=cancel_turn, status=204,
              errors=(*_SESSION, errors.TurnNotFound, errors.TurnNotQueued)),
    Operation(method="POST", path="/api/session/{sid}/resume", name="resume",
              summary="Resume the suspended turn a start with [server] resume = \"manual\" left",
              endpoint=resume, status=202, response=ResumeAccepted,
              errors=(*_SESSION, errors.NothingToResume, *_CLOSED)),
    Operation(method="GET", path="/api/session/{sid}/message", name="history",
              summary="The history: messages with their parts", endpoint=history,
              response=list[Message], errors=_SESSION),
    Operation(method="GET", path="/api/node", name="nodes",
              summary="The live nodes sharing the store, oldest first, with the sessions each runs",
              endpoint=nodes, response=list[Node], errors=(errors.Forbidden,)),
    Operation(method="GET", path="/api/mcp", name="mcp_servers",
              summary="The MCP servers: each one's status, protocol revision, tools, and why it failed",
              endpoint=mcp_servers, response=list[ServerState]),
    Operation(method="GET", path="/api/permission", name="all_permissions",
              summary="Every pending permission request", endpoint=all_permissions,
              response=list[PermissionRequest]),
    Operation(method="GET", path="/api/session/{sid}/permission", name="session_permissions",
              summary="The session's pending permission requests", endpoint=session_permissions,
              response=list[PermissionRequest], errors=_SESSION),
    Operation(method="POST", path="/api/session/{sid}/permission/{rid}/reply", name="reply_permission",
              summary="Answer a permission request", endpoint=reply_permission, body=ReplyBody,
              response=ReplyResult,
              errors=(*_SESSION, errors.PermissionNotFound, errors.PermissionAlreadySettled, errors.InvalidInput)),
    Operation(method="GET", path="/api/session/{sid}/form", name="session_forms",
              summary="The session's pending question forms", endpoint=session_forms,
              response=list[Form], errors=_SESSION),
    Operation(method="POST", path="/api/session/{sid}/form/{fid}", name="submit_form",
              summary="Answer a question form (every question, by id; 400 otherwise)", endpoint=submit_form,
              body=FormAnswersBody,
              response=Form, errors=(*_SESSION, errors.FormNotFound, errors.FormAlreadySettled)),
    Operation(method="DELETE", path="/api/session/{sid}/form/{fid}", name="dismiss_form",
              summary="Dismiss a form: a declined stop, or feedback when ?message= is given",
              endpoint=dismiss_form, response=Form,
              parameters=(Parameter(name="message", where="query", hint=str,
                                    constraints={"maxLength": MAX_TEXT},
                                    description="feedback for the model; the turn goes on"),),
              errors=(*_SESSION, errors.FormNotFound, errors.FormAlreadySettled)),
    Operation(method="GET", path="/api/event", name="events", summary="Every event, replayed then live",
              endpoint=all_events, stream=True, parameters=_EVENT_PARAMETERS, headers=_LIVE_END),
    Operation(method="GET", path="/api/session/{sid}/event", name="session_events",
              summary="One session's events, replayed then live", endpoint=session_events, stream=True,
              parameters=_EVENT_PARAMETERS, headers=_LIVE_END, errors=_SESSION),
)  # fmt: skip
