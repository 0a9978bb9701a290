"""The people at the nodes' keyboards in a round over several nodes: they create sessions and prompt
through random nodes, answer permission requests and forms, interrupt, and prompt again, each through a
node that does not hold the session's claim (any node answers any route of any session)."""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import trio

from coordinator import errors
from coordinator.chaos.node_audit import open_snapshot
from coordinator.chaos.nodes import CLIENT_SECONDS, Cluster
from coordinator.chaos.record import RunRecord
from coordinator.client import CoordinatorClient
from coordinator.records import Form, PermissionRequest

T = TypeVar("T")

POLL_SECONDS = 0.1  # between two looks of the person for pending requests and forms


async def ask(
    cluster: Cluster,
    rng: random.Random,
    call: Callable[[CoordinatorClient], Awaitable[T]],
    avoid: str | None = None,
) -> T | Exception:
    """``call`` through a running node, one that does not hold ``avoid``'s claim when there is one;
    the error instead when the node failed to answer or refused."""
    lives = cluster.answering()
    others = [life for life in lives if life.instance_id != avoid] or lives
    if not others:
        return RuntimeError("no node answers")
    life = rng.choice(others)
    try:
        async with CoordinatorClient(life.url, timeout=CLIENT_SECONDS) as client:
            return await call(client)
    except (httpx.HTTPError, errors.ClientError) as exc:
        return exc


def owner(url: str, session_id: str) -> str | None:
    with open_snapshot(url) as read:
        claim = read.get_claim(session_id)
    return None if claim is None else claim.owner


async def prompt(cluster: Cluster, record: RunRecord, rng: random.Random) -> None:
    for _ in range(rng.choice((2, 3, 4))):
        session = await ask(cluster, rng, lambda c: c.create_session("nodes chaos"))
        if isinstance(session, Exception):
            continue
        record.sessions.append(session.id)
        for n in range(rng.choice((1, 2))):
            turn = await ask(cluster, rng, functools.partial(_prompt_one, session_id=session.id, n=n))
            if isinstance(turn, str):
                record.turns[turn] = session.id


async def _prompt_one(client: CoordinatorClient, *, session_id: str, n: int) -> str:
    return await client.prompt(session_id, f"prompt {n}")


async def wander(cluster: Cluster, record: RunRecord, rng: random.Random, url: str, seconds: float) -> None:
    """Let the nodes work ``seconds``, sometimes interrupting a session or prompting one again, each
    through a node that does not hold its claim."""
    await trio.sleep(seconds * rng.random())
    if record.sessions and rng.random() < 0.3:
        session_id = rng.choice(record.sessions)
        answer = await ask(cluster, rng, lambda c: c.interrupt(session_id), avoid=owner(url, session_id))
        if answer is True or isinstance(answer, httpx.HTTPError):  # a lost answer may have been true
            record.interrupted_sessions.add(session_id)
    if record.sessions and rng.random() < 0.25:
        session_id = rng.choice(record.sessions)
        prompt = functools.partial(_prompt_one, session_id=session_id, n=9)
        turn = await ask(cluster, rng, prompt, avoid=owner(url, session_id))
        if isinstance(turn, str):
            record.turns[turn] = session_id
    await trio.sleep(seconds * rng.random())


async def respond(cluster: Cluster, record: RunRecord, url: str, rng: random.Random) -> None:
    """A person: answers each pending request (once; a tenth rejected) and form (submitted; a tenth
    dismissed), through a node that does not run the turn, polling, until cancelled."""
    while True:
        pending = await ask(cluster, rng, lambda c: c.pending_permissions())
        for request in pending if isinstance(pending, list) else []:
            decision = "reject" if rng.random() < 0.1 else "once"
            if decision == "reject":
                record.declined_calls.add((request.session_id, request.call_id))
            reply = functools.partial(_reply, request=request, decision=decision)
            await ask(cluster, rng, reply, avoid=owner(url, request.session_id))
        for session_id in list(record.sessions):
            forms = await ask(cluster, rng, functools.partial(_forms, session_id=session_id))
            for form in forms if isinstance(forms, list) else []:
                dismiss = rng.random() < 0.1
                if dismiss:
                    record.declined_calls.add((session_id, form.call_id))
                answer = functools.partial(_answer, form=form, session_id=session_id, dismiss=dismiss)
                await ask(cluster, rng, answer, avoid=owner(url, session_id))
        await trio.sleep(POLL_SECONDS)


async def _forms(client: CoordinatorClient, *, session_id: str) -> list[Form]:
    return await client.pending_forms(session_id)


async def _reply(client: CoordinatorClient, *, request: PermissionRequest, decision: str) -> Any:
    return await client.reply_permission(request.session_id, request.id, decision)


async def _answer(client: CoordinatorClient, *, form: Form, session_id: str, dismiss: bool) -> Any:
    if dismiss:
        return await client.dismiss_form(session_id, form.id)
    return await client.submit_form(session_id, form.id, {q.id: "yes" for q in form.questions})
