"""Nodes sharing a store, with real processes: three ``coordinator serve`` nodes share one PostgreSQL
database, and one of them is killed, frozen or stopped, or answered for through the others."""

from __future__ import annotations

import contextlib
import itertools
import json
import shlex
import signal
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from coordinator import errors
from coordinator.client import CoordinatorClient
from coordinator.store import open_read_view
from coordinator.store.rows import ClaimRow
from tests.backends import db_for
from tests.coordinator.server.harness import SHELL_CALL, EventLog
from tests.model_server import Call, MockModel, Reply, ToolCalls, serve_model
from tests.scenarios.test_restarts_process import (
    DONE,
    RESUMED_SUCCESS,
    RULES,
    SUSPENDED_IN_PERMISSION,
    answering,
    mentions_restart,
    sleeper,
)
from tests.servers import (
    POLL,
    Watched,
    process_group_record,
    recorded_process_group,
    server_process,
    wait_group_gone,
    write_config,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres_only("several processes share a store only on PostgreSQL"),
]

NODE_IDS = ("node-a", "node-b", "node-c")
LEASE = 2.0
"""Seconds a node's heartbeat stays valid: short, so a takeover after the lease is quick to see."""
BEAT = LEASE / 3
"""A heartbeat's period, and the watch's: a dead node's turns are taken within one after the lease."""
SLACK = 1.5
"""Seconds of scheduling on a loaded two-core machine allowed beyond a bound the contract sets."""
TEST_SECONDS = 30.0
WAIT_SECONDS = 15.0


@attrs.frozen
class Node(Watched):
    """A node of the cluster: its server process, a client, its event stream from seq 0, and its id.
    Nodes are told apart by identity (``is``): two logs may hold equal events."""

    id: str


@attrs.frozen
class Cluster:
    """Three nodes on one database, and the mock model they all ask."""

    db: str
    mock: MockModel
    nodes: dict[str, Node]

    def others(self, *excluded: Node) -> list[Node]:
        """The nodes but ``excluded``, in id order."""
        return [node for node in self.nodes.values() if all(node is not e for e in excluded)]

    def by_instance(self, instance_id: str | None) -> Node:
        return next(node for node in self.nodes.values() if node.server.instance_id() == instance_id)

    def claim(self, session_id: str) -> ClaimRow:
        with open_read_view(self.db) as reader:
            claim = reader.get_claim(session_id)
        assert claim is not None
        return claim

    def owner(self, session_id: str) -> Node:
        """The node holding the session's claim, as the store has it."""
        claim = self.claim(session_id)
        assert claim.state == "held", claim
        return self.by_instance(claim.owner)

    def stored(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The store's events (of one session, or all) in seq order, as the wire has them."""
        found, after = [], 0
        with open_read_view(self.db) as reader:
            while page := reader.events_after(after, session_id):
                found += page
                after = page[-1].stored_seq
        return [json.loads(json.dumps(event.to_dict())) for event in found]

    def call_states(self, session_id: str) -> dict[str, tuple[str, str | None]]:
        """Each tool call of the session as the store has it: its status and its error's type."""
        with open_read_view(self.db) as reader:
            calls = reader.tool_calls_of_session(session_id)
        return {call.call_id: (call.status, call.error and call.error.type) for call in calls}

    def stored_types(self, session_id: str) -> list[str]:
        return [event["type"] for event in self.stored(session_id)]

    async def start_turn(self, node: Node, wait_for: str, prompt: str = "go") -> str:
        """A new session, created and prompted through ``node``; its id once ``wait_for`` was published."""
        session = await node.client.create_session(title="nodes")
        await node.client.prompt(session.id, prompt)
        await node.log.wait_for(wait_for, session.id)
        return session.id

    async def assert_same_streams(self) -> None:
        """Every node delivered exactly the store's events, in seq order, with no gap and no repeat: a
        running node all of them, a stopped or killed one those before its end."""
        stored = self.stored()
        assert [event["seq"] for event in stored] == list(range(1, len(stored) + 1))
        for node in self.nodes.values():
            if node.server.returncode is None:
                await node.log.wait_until_count(len(stored))
                assert node.log.events == stored, node.id
            else:
                assert node.log.events == stored[: len(node.log.events)], node.id


@contextlib.asynccontextmanager
async def cluster(
    tmp_path: Path,
    replies: Callable[[int, dict[str, Any]], Reply],
    *,
    lease: float = LEASE,
    plugins: Sequence[str] = (),
) -> AsyncIterator[Cluster]:
    """Three nodes (``[server] node_id`` from ``NODE_IDS``) on the test's PostgreSQL database, each
    followed from seq 0; a node the test left running is killed at the end."""
    async with serve_model(replies) as mock, contextlib.AsyncExitStack() as stack:
        db = db_for(tmp_path)
        nodes = {}
        for node_id in NODE_IDS:
            config = write_config(
                tmp_path / f"{node_id}.toml",
                model_url=mock.base_url,
                server={"lease": lease, "node_id": node_id},
                permission=RULES,
                plugins=plugins,
            )
            server = await stack.enter_async_context(server_process(config, db, cwd=tmp_path, name=node_id))
            client = await stack.enter_async_context(CoordinatorClient(server.url))
            nodes[node_id] = Node(server=server, client=client, log=EventLog(), id=node_id)
        async with trio.open_nursery() as followers:
            for node in nodes.values():
                followers.start_soon(node.log.follow, node.client)
            yield Cluster(db=db, mock=mock, nodes=nodes)
            followers.cancel_scope.cancel()


async def wait_logged(node: Node, event: str) -> list[dict[str, Any]]:
    """The node's log lines ``event``, once there is one (another process writes that file)."""
    with trio.fail_after(WAIT_SECONDS):
        while not node.server.logged(event):  # noqa: ASYNC110 (another process's log file)
            await trio.sleep(POLL)
    return node.server.logged(event)


def settled_by(c: Cluster, session_id: str) -> list[str]:
    """The nodes that ended a turn of the session: succeeded, or stopped for any reason but a
    shutdown, which suspends (a node that lost the race for a takeover it decided on logs
    ``turn_recovered`` too, but never settles the turn)."""
    return [
        node.id
        for node in c.nodes.values()
        for line in node.server.log()
        if line.get("session_id") == session_id
        and (
            line["event"] == "turn_succeeded"
            or (line["event"] == "turn_stopped" and line["reason"] != "shutdown")
        )
    ]


async def settler(c: Cluster, session_id: str) -> str:
    """The one node that ended the session's turn. Its log line follows the commit, so a stream may
    deliver ``session.idle`` first: it is waited for."""
    with trio.fail_after(WAIT_SECONDS):
        while not settled_by(c, session_id):  # noqa: ASYNC110 (other processes' log files)
            await trio.sleep(POLL)
    [node_id] = settled_by(c, session_id)
    return node_id


async def test_a_killed_nodes_command_is_killed_and_its_turn_resumed_once_by_another_node(
    tmp_path: Path,
) -> None:
    """kill -9 of the node running a shell command leaves a held claim, a running command and nobody to
    finish either: one live node must take the turn over within a heartbeat after the lease (at once
    here, where the dead pid is seen gone), resume it exactly once, kill the orphaned command, and let
    the model, asked again once, finish the turn."""
    replies = answering(ToolCalls(calls=(sleeper("call_sleep"),)))
    with trio.fail_after(TEST_SECONDS):
        async with cluster(tmp_path, replies) as c:
            session_id = await c.start_turn(c.nodes["node-a"], "session.tool.started")
            pgid = await recorded_process_group(c.db, session_id, "call_sleep", WAIT_SECONDS)
            owner, epoch = c.owner(session_id), c.claim(session_id).epoch
            survivor = c.others(owner)[0]
            killed_at = trio.current_time()
            await owner.server.kill()
            await survivor.log.wait_for("session.execution.resumed", session_id)
            assert trio.current_time() - killed_at <= LEASE + BEAT + SLACK
            await survivor.log.wait_for("session.idle", session_id)
            assert await wait_group_gone(pgid)
            assert process_group_record(c.db, session_id, "call_sleep") is None

            assert c.stored_types(session_id) == [
                "session.created",
                "session.turn.started",
                "session.step.started",
                "session.tool.started",
                "session.execution.resumed",
                "session.tool.failed",
                "session.step.failed",
                *RESUMED_SUCCESS,
            ]
            [resumed] = [e for e in c.stored(session_id) if e["type"] == "session.execution.resumed"]
            assert resumed["after"] == "crash"
            [failed] = [e for e in c.stored(session_id) if e["type"] == "session.tool.failed"]
            assert (failed["call_id"], failed["error"]["type"]) == ("call_sleep", "interrupted")
            assert await settler(c, session_id) != owner.id
            claim = c.claim(session_id)
            assert (claim.state, claim.epoch) == ("released", epoch + 1)
            assert len(c.mock.requests) == 2 and mentions_restart(c.mock.requests[1])
            info = await survivor.client.get_session(session_id)
            assert (info.status, info.last_outcome, info.claim) == ("idle", "succeeded", None)
            await c.assert_same_streams()


PLUGIN = '''\
"""A tool for the frozen-node scenario: it notes each start (with its process), then sleeps."""

import os

import trio


async def mark_and_sleep(seconds: float) -> str:
    """Append this process's pid to the starts file, then sleep ``seconds``."""
    with open({starts!r}, "a") as starts:
        starts.write(f"{{os.getpid()}}\\n")
    await trio.sleep(seconds)
    return "slept"
'''
FROZEN_SLEEP = 3 * LEASE
"""The first call's sleep: it ends after the frozen node is continued (or at once if later)."""
AGAIN_SLEEP = 1.0
"""The new owner's call: long enough to read the claim while that node holds it."""


def plugin_turn(index: int, body: dict[str, Any]) -> Reply:
    """The plugin once; after the restart note, the plugin once more; "done" after a tool result.
    A session prompted "hello" gets "done" at once."""
    if body["messages"][0]["content"] == "hello" or body["messages"][-1]["role"] != "user":
        return DONE
    if mentions_restart(body):
        return ToolCalls(
            calls=(Call(id="call_again", name="mark_and_sleep", input={"seconds": AGAIN_SLEEP}),)
        )
    return ToolCalls(calls=(Call(id="call_first", name="mark_and_sleep", input={"seconds": FROZEN_SLEEP}),))


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def wait_lines(path: Path, count: int) -> list[str]:
    """The file's lines, once it has ``count`` (tools of other processes append them)."""
    with trio.fail_after(WAIT_SECONDS):
        while len(lines_of(path)) < count:  # noqa: ASYNC110 (another process's file)
            await trio.sleep(POLL)
    return lines_of(path)


async def test_a_frozen_node_loses_its_turn_after_the_lease_and_commits_or_starts_nothing_when_continued(
    tmp_path: Path,
) -> None:
    """SIGSTOP of the node in the middle of a plugin call: its pid lives, so only its stale heartbeat
    frees the turn, after the lease and not before; another node resumes it (the call fails as
    interrupted, the model asks for the plugin again, which that node starts once). SIGCONT: the woken
    node's call returns into a claim it lost; it commits nothing, starts nothing, logs the loss and
    goes on serving. A tool's side effects outside the store are the one thing a fence cannot undo,
    so the exact count of starts is the point."""
    starts = tmp_path / "starts.log"
    (tmp_path / "node_tools.py").write_text(PLUGIN.format(starts=str(starts)))
    with trio.fail_after(TEST_SECONDS):
        async with cluster(tmp_path, plugin_turn, plugins=["node_tools:mark_and_sleep"]) as c:
            session_id = await c.start_turn(c.nodes["node-a"], "session.tool.started")
            await wait_lines(starts, 1)
            frozen, epoch = c.owner(session_id), c.claim(session_id).epoch
            survivor = c.others(frozen)[0]
            frozen_at = trio.current_time()
            frozen.server.process.send_signal(signal.SIGSTOP)
            try:
                await survivor.log.wait_for("session.execution.resumed", session_id)
                took = trio.current_time() - frozen_at
                assert LEASE / 2 <= took <= LEASE + BEAT + SLACK
                await wait_lines(starts, 2)
                taker = c.owner(session_id)  # runs call_again for AGAIN_SLEEP seconds
                assert taker is not frozen and c.claim(session_id).epoch == epoch + 1
            finally:
                frozen.server.process.send_signal(signal.SIGCONT)
            await survivor.log.wait_for("session.idle", session_id)
            lost = await wait_logged(frozen, "claim_lost")
            assert [line["session_id"] for line in lost] == [session_id]
            await trio.sleep(LEASE)  # room for anything else the woken node might still try

            expected = [
                "session.created",
                "session.turn.started",
                "session.step.started",
                "session.tool.started",
                "session.execution.resumed",
                "session.tool.failed",
                "session.step.failed",
                "session.step.started",
                "session.tool.started",
                "session.tool.succeeded",
                "session.step.succeeded",
                *RESUMED_SUCCESS,
            ]
            assert c.stored_types(session_id) == expected
            assert [e["call_id"] for e in c.stored(session_id) if e["type"] == "session.tool.started"] == [
                "call_first",
                "call_again",
            ]
            assert lines_of(starts) == [str(frozen.server.pid), str(taker.server.pid)]
            assert await settler(c, session_id) == taker.id
            claim = c.claim(session_id)
            assert (claim.state, claim.epoch) == ("released", epoch + 1)
            # The woken node's call returned "slept", but that result was never written.
            assert c.call_states(session_id) == {
                "call_first": ("failed", "interrupted"),
                "call_again": ("succeeded", None),
            }
            assert len(c.mock.requests) == 3 and mentions_restart(c.mock.requests[1])

            # The woken node serves on: it is listed live again, and runs a turn of its own.
            assert frozen.server.returncode is None
            assert await frozen.client.health() == {"status": "ok"}
            assert sorted(n.id for n in await frozen.client.nodes()) == list(NODE_IDS)
            hello = await c.start_turn(frozen, "session.idle", prompt="hello")
            assert (await frozen.client.get_session(hello)).last_outcome == "succeeded"
            assert c.stored_types(session_id) == expected
            await c.assert_same_streams()


def three_echoes(runs: Path) -> Callable[[int, dict[str, Any]], Reply]:
    """One shell call that asks a step (``echo one|two|three >> runs``), then "done"."""

    def reply(index: int, body: dict[str, Any]) -> Reply:
        results = sum(1 for m in body["messages"] if m["role"] == "tool")
        if results >= 3:
            return DONE
        word = ("one", "two", "three")[results]
        command = f"echo {word} >> {shlex.quote(str(runs))}"
        return ToolCalls(calls=(Call(id=f"call_{word}", name="shell", input={"command": command}),))

    return reply


async def reply_racing(node: Node, session_id: str, request_id: str, decision: str) -> Any:
    """The reply's request, or the ``PermissionAlreadySettled`` it was answered with."""
    try:
        return await node.client.reply_permission(session_id, request_id, decision)
    except errors.PermissionAlreadySettled as exc:
        return exc


async def test_replies_and_interrupts_sent_to_other_nodes_are_applied_by_the_node_running_the_turn(
    tmp_path: Path,
) -> None:
    """Any node answers any route: a reply through B reaches the turn A runs (the tool runs once, at
    A), a later reply through C is a 409 with the settlement, of concurrent replies through B and C
    exactly one wins, and an interrupt through C is settled by A; the person never has to find the
    node that runs their turn."""
    runs = tmp_path / "runs.log"
    with trio.fail_after(TEST_SECONDS):
        async with cluster(tmp_path, three_echoes(runs)) as c:
            session_id = await c.start_turn(c.nodes["node-a"], "permission.asked")
            owner, epoch = c.owner(session_id), c.claim(session_id).epoch
            b, other = c.others(owner)
            first = (await owner.log.wait_for("permission.asked", session_id))["request"]

            replied = await b.client.reply_permission(session_id, first["id"], "once")
            assert (replied.id, replied.status, replied.decision) == (first["id"], "replied", "once")
            with pytest.raises(errors.PermissionAlreadySettled) as late:
                await other.client.reply_permission(session_id, first["id"], "reject")
            assert late.value.settlement == {"status": "replied", "decision": "once"}

            second = (await owner.log.wait_for("permission.asked", session_id, count=2))["request"]
            assert second["call_id"] == "call_two"
            assert lines_of(runs) == ["one"]
            answers: dict[str, Any] = {}

            async def race(node: Node, decision: str) -> None:
                answers[decision] = await reply_racing(node, session_id, second["id"], decision)

            async with trio.open_nursery() as racing:
                racing.start_soon(race, b, "once")
                racing.start_soon(race, other, "always")
            lost = [d for d, a in answers.items() if isinstance(a, errors.PermissionAlreadySettled)]
            won = [d for d, a in answers.items() if not isinstance(a, errors.PermissionAlreadySettled)]
            assert len(lost) == 1 and len(won) == 1, answers
            assert answers[lost[0]].settlement == {"status": "replied", "decision": won[0]}
            assert answers[won[0]].decision == won[0]

            third = (await owner.log.wait_for("permission.asked", session_id, count=3))["request"]
            assert lines_of(runs) == ["one", "two"]
            assert c.owner(session_id) is owner and c.claim(session_id).epoch == epoch
            assert await other.client.interrupt(session_id) is True
            assert await other.client.interrupt(session_id) is False
            idle = await owner.log.wait_for("session.idle", session_id)
            assert idle["outcome"] == "interrupted"
            assert await b.client.interrupt(session_id) is False

            assert c.stored_types(session_id) == [
                "session.created",
                "session.turn.started",
                *["session.step.started", "session.tool.started", "permission.asked", "permission.replied"],
                *["session.tool.succeeded", "session.step.succeeded"],
                *["session.step.started", "session.tool.started", "permission.asked", "permission.replied"],
                *["session.tool.succeeded", "session.step.succeeded"],
                *["session.step.started", "session.tool.started", "permission.asked", "permission.revoked"],
                "session.tool.failed",
                "session.step.failed",
                "session.execution.interrupted",
                "session.idle",
            ]
            interrupt = {"type": "interrupt", "by": "api"}
            stored = c.stored(session_id)
            assert [
                (e["request_id"], e["decision"]) for e in stored if e["type"] == "permission.replied"
            ] == [
                (first["id"], "once"),
                (second["id"], won[0]),
            ]
            [revoked] = [e for e in stored if e["type"] == "permission.revoked"]
            assert (revoked["request_id"], revoked["reason"]) == (third["id"], interrupt)
            [stopped] = [e for e in stored if e["type"] == "session.execution.interrupted"]
            assert stopped["reason"] == interrupt
            assert lines_of(runs) == ["one", "two"]
            assert await settler(c, session_id) == owner.id
            assert len(c.mock.requests) == 3
            await c.assert_same_streams()


async def test_steers_the_queue_and_a_soft_stop_sent_to_other_nodes_reach_the_node_running_the_turn(
    tmp_path: Path,
) -> None:
    """A steer through B for the turn A runs is delivered by A at its next step boundary, once; a
    prompt queued through C is listed and cancelled through B; a soft stop through C lets A's step
    finish and stops the turn before its next model request. Nothing travels between the nodes but
    the store."""
    runs = tmp_path / "runs.log"
    with trio.fail_after(TEST_SECONDS):
        async with cluster(tmp_path, three_echoes(runs)) as c:
            session_id = await c.start_turn(c.nodes["node-a"], "permission.asked")
            owner = c.owner(session_id)
            b, other = c.others(owner)
            first = (await owner.log.wait_for("permission.asked", session_id))["request"]
            [started] = [e for e in c.stored(session_id) if e["type"] == "session.turn.started"]
            turn_id = started["turn_id"]

            steered = await b.client.steer(session_id, "steer via b", expected_turn_id=turn_id)
            assert steered.turn_id == turn_id
            with pytest.raises(errors.TurnMismatch):
                await other.client.steer(session_id, "x", expected_turn_id="turn_elsewhere")
            queued = await other.client.prompt(session_id, "queued via c")
            assert [q.turn_id for q in await b.client.queued_turns(session_id)] == [queued]
            await b.client.cancel_turn(session_id, queued)
            await b.client.reply_permission(session_id, first["id"], "once")

            second = (await owner.log.wait_for("permission.asked", session_id, count=2))["request"]
            steers = [e for e in c.stored(session_id) if e["type"] == "session.turn.steered"]
            assert [(e["turn_id"], e["steer_id"]) for e in steers] == [(turn_id, steered.steer_id)]
            assert c.mock.requests[-1]["messages"][-1] == {"role": "user", "content": "steer via b"}

            assert await other.client.interrupt(session_id, when="after_step") is True
            await b.client.reply_permission(session_id, second["id"], "once")
            idle = await owner.log.wait_for("session.idle", session_id)
            assert idle["outcome"] == "interrupted"
            [stopped] = [e for e in c.stored(session_id) if e["type"] == "session.execution.interrupted"]
            assert stopped["reason"] == {"type": "interrupt", "by": "api", "soft": True}
            assert lines_of(runs) == ["one", "two"]  # the second call ran; no third request
            assert len(c.mock.requests) == 2
            assert await settler(c, session_id) == owner.id
            assert "session.turn.started" not in [
                e["type"] for e in c.stored(session_id) if e.get("turn_id") == queued
            ]
            await c.assert_same_streams()


SESSIONS = 6


async def test_every_node_streams_the_stores_events_in_the_same_order_while_all_of_them_run_turns(
    tmp_path: Path,
) -> None:
    """Sessions prompted at once through different nodes, run by several, answered through others:
    every node's stream is the same sequence, the store's, with no gap and no repeat, so a client
    may follow whichever node it reaches and miss nothing."""
    with trio.fail_after(TEST_SECONDS):
        async with cluster(tmp_path, answering(SHELL_CALL)) as c:
            nodes = list(c.nodes.values())
            session_ids = [
                (await nodes[i % 3].client.create_session(title=f"s{i}")).id for i in range(SESSIONS)
            ]
            async with trio.open_nursery() as prompting:
                for i, session_id in enumerate(session_ids):
                    prompting.start_soon(nodes[(i + 1) % 3].client.prompt, session_id, "go")
            for node in nodes:
                await node.log.wait_for("permission.asked", count=SESSIONS)
            owners = {session_id: c.owner(session_id) for session_id in session_ids}
            assert len({owner.id for owner in owners.values()}) > 1, "every turn ran on one node"
            async with trio.open_nursery() as replying:
                for i, session_id in enumerate(session_ids):
                    request = nodes[0].log.of("permission.asked", session_id)[0]["request"]
                    through = c.others(owners[session_id])[i % 2]
                    replying.start_soon(through.client.reply_permission, session_id, request["id"], "once")
            for node in nodes:
                await node.log.wait_for("session.idle", count=SESSIONS)

            for session_id in session_ids:
                assert c.stored_types(session_id) == [
                    "session.created",
                    "session.turn.started",
                    "session.step.started",
                    "session.tool.started",
                    "permission.asked",
                    "permission.replied",
                    "session.tool.succeeded",
                    "session.step.succeeded",
                    *RESUMED_SUCCESS,
                ]
            stored = c.stored()
            turns = [e["session_id"] for e in stored if e["type"] != "session.created"]
            blocks = 1 + sum(a != b for a, b in itertools.pairwise(turns))
            assert blocks > SESSIONS, "the turns ran one after the other"
            await c.assert_same_streams()


async def test_each_node_lists_the_live_nodes_and_a_killed_one_leaves_the_list_after_the_lease(
    tmp_path: Path,
) -> None:
    """``GET /api/node`` is how an operator sees the cluster: on every node the same three ids (from
    ``[server] node_id``) with the sessions each runs; a killed node drops out once its lease ran
    out, and the session it ran is counted where it was taken over."""
    with trio.fail_after(TEST_SECONDS):
        async with cluster(tmp_path, answering(SHELL_CALL)) as c:
            session_id = await c.start_turn(c.nodes["node-a"], "permission.asked")
            owner = c.owner(session_id)
            for node in c.nodes.values():
                listed = await node.client.nodes()
                assert sorted(n.id for n in listed) == list(NODE_IDS)
                assert {n.id: n.sessions for n in listed} == {i: int(i == owner.id) for i in NODE_IDS}
                assert {n.host for n in listed} == {socket.gethostname()}
                # A session's claim names the same node, by the same id.
                claim = (await node.client.get_session(session_id)).claim
                assert claim is not None and claim.owner == owner.id

            survivors = c.others(owner)
            with trio.fail_after(LEASE + BEAT + SLACK):
                await owner.server.kill()
                for node in survivors:
                    while len(await node.client.nodes()) != 2:  # noqa: ASYNC110 (heartbeats)
                        await trio.sleep(POLL)
            restored = await survivors[0].log.wait_for("permission.asked", session_id, count=2)
            taker = c.owner(session_id)
            assert any(taker is s for s in survivors)
            for node in survivors:
                listed = await node.client.nodes()
                assert {n.id: n.sessions for n in listed} == {s.id: int(s is taker) for s in survivors}

            await c.others(owner, taker)[0].client.reply_permission(
                session_id, restored["request"]["id"], "once"
            )
            await taker.log.wait_for("session.idle", session_id)
            for node in survivors:
                assert {n.id: n.sessions for n in await node.client.nodes()} == {s.id: 0 for s in survivors}
            await c.assert_same_streams()


STOP_LEASE = 10.0
"""The lease of the graceful-stop scenario: long, so that a resume "at once" is plainly not the lease's."""


async def test_a_gracefully_stopped_nodes_waiting_turn_is_resumed_by_another_node_at_once(
    tmp_path: Path,
) -> None:
    """SIGTERM of the node whose turn waits for a person suspends the turn and hands it over: another
    node resumes it at once (not after the lease), re-publishes the same request id, and a reply
    through any node finishes it; a rolling restart must not make anyone wait a lease or answer twice."""
    with trio.fail_after(TEST_SECONDS):
        async with cluster(tmp_path, answering(SHELL_CALL), lease=STOP_LEASE) as c:
            session_id = await c.start_turn(c.nodes["node-a"], "permission.asked")
            stopped = c.owner(session_id)
            asked = (await stopped.log.wait_for("permission.asked", session_id))["request"]
            watcher = c.others(stopped)[0]
            signalled_at = trio.current_time()
            assert await stopped.server.terminate() == 0
            restored = await watcher.log.wait_for("permission.asked", session_id, count=2)
            assert trio.current_time() - signalled_at < STOP_LEASE / 4
            assert restored["restored"] is True and restored["request"]["id"] == asked["id"]
            logged = [line["event"] for line in stopped.server.log()]
            assert [e for e in logged if e in ("signal_received", "server_stopping", "server_stopped")] == [
                "signal_received",
                "server_stopping",
                "server_stopped",
            ]

            taker = c.owner(session_id)
            assert taker is not stopped
            [through] = c.others(stopped, taker)
            await through.client.reply_permission(session_id, asked["id"], "once")
            await taker.log.wait_for("session.idle", session_id)

            assert c.stored_types(session_id) == [
                *SUSPENDED_IN_PERMISSION,
                "session.execution.resumed",
                "permission.asked",
                "permission.replied",
                "session.tool.succeeded",
                *RESUMED_SUCCESS,
            ]
            [resumed] = [e for e in c.stored(session_id) if e["type"] == "session.execution.resumed"]
            assert resumed["after"] == "shutdown"
            assert await settler(c, session_id) == taker.id
            assert len(c.mock.requests) == 2 and mentions_restart(c.mock.requests[1])
            info = await through.client.get_session(session_id)
            assert (info.status, info.last_outcome) == ("idle", "succeeded")
            await c.assert_same_streams()
