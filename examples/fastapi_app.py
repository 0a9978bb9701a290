"""A FastAPI app with the coordinator embedded in its lifespan.

Run it (from the repository's root, with ``pip install fastapi uvicorn``)::

    COORDINATOR_CONFIG=coordinator.toml uvicorn examples.fastapi_app:app --timeout-graceful-shutdown 5

Routes of its own, each a few lines over ``coordinator.aio``:

- ``POST /chats`` ``{"text": "..."}``: a new session, prompted; answers ``{session_id, turn_id}``.
- ``POST /chats/{session_id}`` ``{"text": "..."}``: another turn of it; answers ``{turn_id}``.
- ``GET /chats/{session_id}/events?after=N``: its events as a server-sent stream, replayed after seq
  ``N`` and then live (``Last-Event-ID`` works too).
- ``GET /chats/{session_id}/permissions``: its pending permission requests.
- ``POST /chats/{session_id}/permissions/{request_id}`` ``{"decision": "once"|"always"|"reject",
  "message"?: "..."}``: the answer.

The coordinator's named errors become the HTTP status they carry (``SessionNotFound`` is a 404). A
SIGTERM to uvicorn runs the lifespan's exit, which is the coordinator's graceful shutdown: a running
turn is suspended and the next start resumes it. An open event stream keeps uvicorn from reaching
its lifespan's exit until ``--timeout-graceful-shutdown`` has passed.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from coordinator import errors
from coordinator.aio import AioCoordinator, open_coordinator


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    config = os.environ.get("COORDINATOR_CONFIG")  # unset: the defaults (the built-in demo model)
    async with open_coordinator(config, db=os.environ.get("COORDINATOR_DB")) as coordinator:
        app.state.coordinator = coordinator
        yield


app = FastAPI(title="chats on the coordinator", lifespan=lifespan)


def coordinator_of(request: Request) -> AioCoordinator:
    coordinator: AioCoordinator = request.app.state.coordinator
    return coordinator


@app.exception_handler(errors.ClientError)
async def client_error(request: Request, exc: errors.ClientError) -> JSONResponse:
    return JSONResponse({"error": exc.name, "message": str(exc)}, status_code=exc.status)


class Prompt(BaseModel):
    text: str


class Reply(BaseModel):
    decision: str
    message: str | None = None


@app.post("/chats", status_code=201)
async def new_chat(prompt: Prompt, request: Request) -> dict[str, str]:
    coordinator = coordinator_of(request)
    session = await coordinator.create_session(title=prompt.text[:40])
    turn_id = await coordinator.prompt(session.id, prompt.text)
    return {"session_id": session.id, "turn_id": turn_id}


@app.post("/chats/{session_id}", status_code=202)
async def next_turn(session_id: str, prompt: Prompt, request: Request) -> dict[str, str]:
    return {"turn_id": await coordinator_of(request).prompt(session_id, prompt.text)}


@app.get("/chats/{session_id}/events")
async def chat_events(
    session_id: str, request: Request, after: int = 0, last_event_id: str | None = Header(default=None)
) -> StreamingResponse:
    coordinator = coordinator_of(request)
    await coordinator.get_session(session_id)  # a 404 now, before the stream's 200
    start = int(last_event_id) if last_event_id and last_event_id.isdigit() else after
    events = coordinator.subscribe(after=start, session_id=session_id)

    async def frames() -> AsyncIterator[str]:
        try:
            async for event in events:
                yield f"id: {event.seq}\nevent: {event.type}\ndata: {json.dumps(event.to_dict())}\n\n"
        finally:
            await events.aclose()

    return StreamingResponse(frames(), media_type="text/event-stream")


@app.get("/chats/{session_id}/permissions")
async def pending(session_id: str, request: Request) -> list[dict[str, str]]:
    requests = await coordinator_of(request).pending_permissions(session_id)
    return [{"id": r.id, "action": r.action, "resource": r.resource} for r in requests]


@app.post("/chats/{session_id}/permissions/{request_id}")
async def answer(session_id: str, request_id: str, reply: Reply, request: Request) -> dict[str, str]:
    replied = await coordinator_of(request).reply_permission(
        session_id, request_id, reply.decision, reply.message
    )
    return {"id": replied.id, "status": replied.status}
