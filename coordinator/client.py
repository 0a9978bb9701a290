"""A thin async client of the HTTP API that raises the same named errors as the embedding API.

Methods mirror ``Coordinator`` (the embedding API) and return the same records; an error response
becomes the ``coordinator.errors`` class it names, with its details (``PermissionAlreadySettled``
carries ``settlement``). ``events`` follows the stream across dropped connections with
``Last-Event-ID``, so a restart of the server loses no event and repeats none.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from types import TracebackType
from typing import Any, cast
from urllib.parse import quote

import anyio
import attrs
import httpx

from coordinator import errors, wire
from coordinator.logs import get_logger
from coordinator.mcp.state import ServerState
from coordinator.records import Form, Message, Node, PermissionRequest, QueuedTurn, Session, Steered
from coordinator.server.bodies import CreateSessionBody, FormAnswersBody, InterruptBody, PromptBody, ReplyBody

log = get_logger(__name__)

STREAM_READ_TIMEOUT = 45.0
"""Silence after which a followed stream counts as dropped: three missed keep-alive comments."""

MAX_SEQ = 2**63 - 1
"""The largest seq a request may name (``after``)."""

RECONNECT_FIRST = 0.1
RECONNECT_MAX = 2.0


class CoordinatorClient:
    """An HTTP client of one coordinator server; use it as ``async with CoordinatorClient(url) as c``."""

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout
        self._http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> CoordinatorClient:
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=self._headers, timeout=self._timeout)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        http, self._http = self._http, None
        if http is not None:
            with anyio.move_on_after(5, shield=True):
                await http.aclose()

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            raise RuntimeError("use the client as `async with CoordinatorClient(...) as client`")
        return self._http

    async def _call(self, method: str, path: str, *, body: Any = None, params: Any = None) -> Any:
        content = None if body is None else json.dumps(wire.unstructure(body)).encode()
        headers = {"content-type": "application/json"} if content is not None else None
        response = await self._client().request(method, path, content=content, params=params, headers=headers)
        if not response.is_success:
            raise error_from_response(response)
        return None if response.status_code == 204 else response.json()

    async def health(self) -> dict[str, Any]:
        """``GET /health``. **Raises:** ``httpx.TransportError`` when the server cannot be reached."""
        result: dict[str, Any] = await self._call("GET", "/health")
        return result

    async def openapi(self) -> dict[str, Any]:
        """The server's OpenAPI 3.1 document."""
        result: dict[str, Any] = await self._call("GET", "/openapi.json")
        return result

    async def create_session(self, title: str = "") -> Session:
        """Create an idle session. **Raises:** ``InvalidRequest``, ``CoordinatorClosed``."""
        data = await self._call("POST", "/api/session", body=CreateSessionBody(title=title))
        return wire.structure(data, Session)  # type: ignore[no-any-return]

    async def list_sessions(self, limit: int | None = None, before: str | None = None) -> list[Session]:
        """One page of sessions, newest first (the server's default page without ``limit``)."""
        params = {k: str(v) for k, v in (("limit", limit), ("before", before)) if v is not None}
        data = await self._call("GET", "/api/session", params=params or None)
        return wire.structure(data, list[Session])  # type: ignore[no-any-return]

    async def nodes(self) -> list[Node]:
        """The live nodes sharing the server's store (``GET /api/node``)."""
        data = await self._call("GET", "/api/node")
        return wire.structure(data, list[Node])  # type: ignore[no-any-return]

    async def mcp_servers(self) -> list[ServerState]:
        """The MCP servers: status, protocol revision, tools and error of each (``GET /api/mcp``)."""
        data = await self._call("GET", "/api/mcp")
        return wire.structure(data, list[ServerState])  # type: ignore[no-any-return]

    async def get_session(self, session_id: str) -> Session:
        """The session's status, claim and last outcome. **Raises:** ``SessionNotFound``."""
        data = await self._call("GET", _session_path(session_id))
        return wire.structure(data, Session)  # type: ignore[no-any-return]

    async def history(self, session_id: str) -> list[Message]:
        """The session's messages with their parts. **Raises:** ``SessionNotFound``."""
        data = await self._call("GET", _session_path(session_id, "message"))
        return wire.structure(data, list[Message])  # type: ignore[no-any-return]

    async def prompt(
        self, session_id: str, text: str, *, mode: str = "queue", expected_turn_id: str | None = None
    ) -> str:
        """Send a prompt (``mode``: ``queue``, ``steer`` or ``interrupt``); returns its turn's id.

        **Raises:** ``SessionNotFound``, ``InvalidRequest``, ``TurnMismatch``.
        """
        return (await self._prompt(session_id, text, mode, expected_turn_id))["turn_id"]

    async def steer(self, session_id: str, text: str, *, expected_turn_id: str | None = None) -> Steered:
        """Send ``text`` into the running turn, for its next step boundary (or, with no turn to take
        it, as a queued turn). **Raises:** ``SessionNotFound``, ``InvalidRequest``, ``TurnMismatch``."""
        data = await self._prompt(session_id, text, "steer", expected_turn_id)
        return Steered(turn_id=data["turn_id"], steer_id=data["steer_id"])

    async def _prompt(
        self, session_id: str, text: str, mode: str, expected_turn_id: str | None
    ) -> dict[str, str]:
        body = PromptBody(text=text, mode=mode, expected_turn_id=expected_turn_id)  # type: ignore[arg-type]
        data = await self._call("POST", _session_path(session_id, "prompt"), body=body)
        return {key: str(value) for key, value in data.items()}

    async def queued_turns(self, session_id: str) -> list[QueuedTurn]:
        """The session's queued turns, in the order they will run. **Raises:** ``SessionNotFound``."""
        data = await self._call("GET", _session_path(session_id, "turn"), params={"status": "queued"})
        return wire.structure(data, list[QueuedTurn])  # type: ignore[no-any-return]

    async def cancel_turn(self, session_id: str, turn_id: str) -> None:
        """Cancel a queued turn. **Raises:** ``SessionNotFound``, ``TurnNotFound``, ``TurnNotQueued``."""
        await self._call("DELETE", _session_path(session_id, "turn", turn_id))

    async def delete_session(self, session_id: str) -> None:
        """Delete a settled session with everything it owns (``DELETE /api/session/{sid}``).

        **Raises:** ``SessionNotFound``; ``SessionBusy`` while a turn is queued, running or suspended.
        """
        await self._call("DELETE", _session_path(session_id))

    async def interrupt(self, session_id: str, *, when: str = "now", queued: str = "keep") -> bool:
        """Stop the running turn (reason interrupt, by api); False when idle or already stopping.

        ``when="after_step"``: a soft stop, before the turn's next model request; ``queued="cancel"``:
        cancel the session's queued turns too.
        """
        body = InterruptBody(when=when, queued=queued)  # type: ignore[arg-type]
        data = await self._call("POST", _session_path(session_id, "interrupt"), body=body)
        return bool(data["interrupted"])

    async def resume(self, session_id: str) -> str:
        """Resume the session's suspended turn (``[server] resume = "manual"``); returns its id.

        **Raises:** ``SessionNotFound``, ``NothingToResume`` (nothing is suspended).
        """
        data = await self._call("POST", _session_path(session_id, "resume"))
        return str(data["turn_id"])

    async def pending_permissions(self, session_id: str | None = None) -> list[PermissionRequest]:
        """Pending permission requests of one session, or of all. **Raises:** ``SessionNotFound``."""
        path = "/api/permission" if session_id is None else _session_path(session_id, "permission")
        return wire.structure(await self._call("GET", path), list[PermissionRequest])  # type: ignore[no-any-return]

    async def reply_permission(
        self,
        session_id: str,
        request_id: str,
        decision: str,
        message: str | None = None,
        *,
        input: dict[str, Any] | None = None,
    ) -> PermissionRequest:
        """Answer a request: ``once``, ``always`` or ``reject``.

        ``input`` (with ``once`` or ``always``): run the call with this input instead of the model's.

        **Raises:** ``PermissionNotFound``, ``PermissionAlreadySettled`` (with ``settlement``),
        ``InvalidRequest``, ``InvalidInput``.
        """
        body = ReplyBody(decision=decision, message=message, input=input)  # type: ignore[arg-type]
        path = _session_path(session_id, "permission", request_id, "reply")
        data = await self._call("POST", path, body=body)
        return wire.structure(data["request"], PermissionRequest)  # type: ignore[no-any-return]

    async def pending_forms(self, session_id: str) -> list[Form]:
        data = await self._call("GET", _session_path(session_id, "form"))
        return wire.structure(data, list[Form])  # type: ignore[no-any-return]

    async def submit_form(self, session_id: str, form_id: str, answers: Mapping[str, Any]) -> Form:
        """Answer a form. **Raises:** ``FormNotFound``, ``FormAlreadySettled``, ``InvalidRequest``."""
        body = FormAnswersBody(answers=dict(answers))
        data = await self._call("POST", _session_path(session_id, "form", form_id), body=body)
        return wire.structure(data, Form)  # type: ignore[no-any-return]

    async def dismiss_form(self, session_id: str, form_id: str, message: str | None = None) -> Form:
        """Dismiss a form: a declined stop, or feedback with a ``message``."""
        params = {"message": message} if message else None
        data = await self._call("DELETE", _session_path(session_id, "form", form_id), params=params)
        return wire.structure(data, Form)  # type: ignore[no-any-return]

    async def last_seq(self, session_id: str | None = None) -> int:
        """The seq of the last event the server has published: where its live stream is now (follow
        from it to see only what comes next). Read off an event stream that sends nothing."""
        path = "/api/event" if session_id is None else _session_path(session_id, "event")
        params = {"after": str(MAX_SEQ), "follow": "false"}
        async with self._client().stream("GET", path, params=params) as response:
            if not response.is_success:
                await response.aread()
                raise error_from_response(response)
            return int(response.headers["coordinator-last-seq"])

    async def events(
        self, after: int = 0, session_id: str | None = None, follow: bool = True, *, deltas: bool = False
    ) -> AsyncIterator[dict[str, Any]]:
        """Every event after seq ``after`` as its JSON object (of one session, or all).

        With ``deltas``, also the live ``session.text.delta`` events (``seq`` null; they never move
        the resume point).

        Without ``follow``, ends after the events stored when it began. With it, streams live for
        ever: a dropped connection or a server restart is retried, resuming with ``Last-Event-ID``.

        **Cancellation:** safe; the connection is closed. Prefer cancelling to breaking out of the loop:
        closing the iterator early leaves httpx's inner byte iterators to the garbage collector.

        **Raises:** a ``ClientError`` the server answers (``SessionNotFound``, ``Unauthorized``), and,
        without ``follow``, ``httpx.TransportError``.
        """
        path = "/api/event" if session_id is None else _session_path(session_id, "event")
        last = after
        delay = RECONNECT_FIRST
        while True:
            try:
                # The generator is closed by aclosing; consumers cancel rather than break (docstring).
                async with contextlib.aclosing(self._stream_once(path, last, follow, deltas)) as stream:
                    async for event in stream:
                        yield event  # noqa: ASYNC119 (closed by aclosing; consumers cancel, never break)
                        seq = event.get("seq")
                        if isinstance(seq, int):  # a delta or a stream.truncated frame has none
                            last = seq
                        delay = RECONNECT_FIRST
                if not follow:
                    return
            except httpx.TransportError as exc:
                if not follow:
                    raise
                log.info("event_stream_dropped", error=repr(exc), after=last)
            await anyio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX)

    async def _stream_once(
        self, path: str, after: int, follow: bool, deltas: bool
    ) -> AsyncGenerator[dict[str, Any], None]:
        headers = {"Last-Event-ID": str(after)} if after else {}
        params = {"after": str(after), "follow": "true" if follow else "false"}
        if deltas:
            params["deltas"] = "true"
        timeout = httpx.Timeout(self._timeout, read=STREAM_READ_TIMEOUT if follow else self._timeout)
        async with self._client().stream(
            "GET", path, params=params, headers=headers, timeout=timeout
        ) as response:
            if not response.is_success:
                await response.aread()
                raise error_from_response(response)
            lines = cast(AsyncGenerator[str, None], response.aiter_lines())
            async with contextlib.aclosing(lines), contextlib.aclosing(parse_sse(lines)) as events:
                async for event in events:
                    yield event  # noqa: ASYNC119 (closed by aclosing; consumers cancel, never break)


async def parse_sse(lines: AsyncIterator[str]) -> AsyncGenerator[dict[str, Any], None]:
    """The ``data`` of each complete server-sent event, parsed as JSON; comments are skipped.

    ``stream.truncated`` (data ``{"oldest_seq": N}``) comes as ``{"type": "stream.truncated", "oldest_seq": N}``.
    """
    data: list[str] = []
    name = ""
    async for line in lines:
        if not line:
            if data:
                yield _frame(name, json.loads("\n".join(data)))
                data, name = [], ""
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value.removeprefix(" "))
        elif field == "event":
            name = value.removeprefix(" ")


def _frame(name: str, data: Any) -> Any:
    """A frame's data; one whose data names no type (``stream.truncated``) gets its ``event`` name."""
    if isinstance(data, dict) and "type" not in data and name:
        return {"type": name, **data}
    return data


def error_from_response(response: httpx.Response) -> Exception:
    """The named error of an error response, with its details; ``httpx.HTTPStatusError`` for others."""
    try:
        detail = response.json()["error"]
        name, message = str(detail["name"]), str(detail["message"])
    except (ValueError, KeyError, TypeError):
        return httpx.HTTPStatusError(
            f"HTTP {response.status_code} without an error body", request=response.request, response=response
        )
    cls = _ERROR_CLASSES.get(name)
    if cls is None:
        return errors.ClientError(message=f"{name}: {message}")
    known = attrs.fields_dict(cls)
    fields = {key: value for key, value in detail.items() if key in known}
    try:
        return wire.structure(fields, cls)  # type: ignore[no-any-return]
    except Exception:  # details of another shape (a newer server): keep the name and the message
        return cls(message=message)


def _error_classes() -> dict[str, type[errors.ClientError]]:
    found: dict[str, type[errors.ClientError]] = {}
    pending: list[type[errors.ClientError]] = [errors.ClientError]
    while pending:
        cls = pending.pop()
        found[cls.name] = cls
        pending.extend(cls.__subclasses__())
    return found


_ERROR_CLASSES = _error_classes()


def _session_path(session_id: str, *rest: str) -> str:
    return "/".join(["/api/session", *(quote(part, safe="") for part in (session_id, *rest))])
