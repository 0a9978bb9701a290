"""What one run of the campaign drives: its sessions, their model scripts, its config and timeouts.

Everything here is drawn from the run's own ``random.Random``, separate from the injector's, so that a
schedule with an injection removed (shrinking) still drives the same world.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import attrs
import trio

from coordinator.chaos.setup import Scenario, Setup
from coordinator.chaos.streaming import Streamed, Tee
from coordinator.config import Config, McpConfig, ModelConfig, PluginConfig, ServerConfig, TimeoutsConfig
from coordinator.errors import ConfigError
from coordinator.models.base import ChatMessage, ModelReply, ModelRequest
from coordinator.models.history import conversation_for_model
from coordinator.models.scripted import ScriptedModel
from coordinator.records import Rule
from coordinator.store import open_read_view

RULES = (
    Rule(action="*", resource="*", effect="allow"),
    Rule(action="shell", resource="*", effect="ask"),
    Rule(action="guarded", resource="*", effect="ask"),
)
PLUGINS = (
    PluginConfig(entry="coordinator.chaos.tools:slow"),
    PluginConfig(entry="coordinator.chaos.tools:guarded"),
)

# The turn deadline every run has: well beyond what a turn takes (a tool sleeps at most 5s, a person
# thinks at most 3s, the model at most 2s, three steps), so that only the ``deadline`` fault makes it
# fire. The other deadlines, when a run has them, come before it: letting time pass fires them first.
TURN_LIMIT = 120.0

SCRIPT_CODE = """\
first = await tools.slow(seconds=0.01)
print("first", first)
second = await tools.slow(seconds=0.02)
print("second", second)
third = await tools.guarded(seconds=0.01)
return [first, second, third]
"""


@attrs.frozen(kw_only=True)
class World:
    """One run's sessions (a script and a number of prompts each) and its config."""

    config: Config
    scripts: tuple[tuple[dict[str, Any], ...], ...]
    prompts: tuple[int, ...]
    # Runs with real processes keep trio's clock at real speed (autojump would leap over every bound
    # on waiting for a process), with short waits; the others run on autojump.
    processes: bool
    turn_limit: float
    # Stop reasons that may come from the user's side, with no fault injected: their own deadlines
    # (``[timeouts]``), and a scenario's own interrupts and rejects (``run_chaos``).
    external: frozenset[str] = frozenset()
    scenario: Scenario | None = attrs.field(default=None, eq=False, repr=False)
    # With a scenario, the campaign's person answers a wait only once it was left pending this long.
    patience: float = 0.0
    default_script: tuple[dict[str, Any], ...] | None = None  # the script of a scenario's sessions
    # The scripts of the sub-agent sessions that `task` calls create, by the title the call gives.
    sub_scripts: tuple[tuple[str, tuple[dict[str, Any], ...]], ...] = ()

    def describe(self) -> str:
        every = [*self.scripts, *(script for _, script in self.sub_scripts)]
        kinds = sorted({call["name"] for s in every for item in s for call in item.get("tool_calls", [])})
        subs = f", {len(self.sub_scripts)} sub-agent(s)" if self.sub_scripts else ""
        return f"{len(self.scripts)} session(s){subs}, prompts {list(self.prompts)}, tools {kinds}"


def make_world(rng: random.Random, base_dir: Path, db: Path) -> World:
    """Draw a world: 1-3 sessions (one when real processes run, to keep the run replayable), some with
    a sub-agent (``_with_sub_agents``)."""
    # Sub-agents are drawn from their own generator, seeded by this one's state before any draw, so
    # that the other draws, and the runs tests/coordinator/chaos/test_campaign.py::FOUND pins by seed
    # and index, do not depend on them (the salt keeps those runs without sub-agents).
    sub_rng = random.Random(f"task:{rng.getstate()[1][:8]}")
    mcp_rng = random.Random(f"mcp:{rng.getstate()[1][:8]}")
    processes = rng.random() < 0.2
    sessions = 1 if processes else rng.choice((1, 1, 2, 2, 3))
    scripts = tuple(_script(rng, s, processes) for s in range(sessions))
    prompts = tuple(rng.choice((1, 1, 2)) for _ in range(sessions))
    timeouts = TimeoutsConfig(
        turn=TURN_LIMIT,
        step=rng.choice((0, 100)),
        tool=0 if processes else rng.choice((0, 0, 60)),
        execute=0,
        permission=0 if processes else rng.choice((0, 0, 90)),
        question=0 if processes else rng.choice((0, 0, 90)),
    )
    server = ServerConfig(db=str(db), lease=15, max_resumes=5, shutdown_grace=10)
    config = Config(server=server, timeouts=timeouts, permission=RULES, plugin=PLUGINS, base_dir=base_dir)
    world = World(config=config, scripts=scripts, prompts=prompts, processes=processes, turn_limit=TURN_LIMIT)
    return _with_mcp_server(mcp_rng, world) if processes else _with_sub_agents(sub_rng, world)


# A share of the worlds with real processes has an MCP server (a process of its own, over stdio), one
# of whose session's calls becomes a call of its tool.
MCP_SHARE = 0.5
MCP_SERVER = McpConfig(name="chaos", command=(sys.executable, str(Path(__file__).with_name("mcp_server.py"))))


def _with_mcp_server(rng: random.Random, world: World) -> World:
    """The world with the campaign's MCP server, and one tool call of its script made a call of it
    (drawn from a generator of its own: the other draws stay as they were)."""
    if rng.random() >= MCP_SHARE:
        return world
    items = [dict(item) for item in world.scripts[0]]
    step = rng.randrange(len(items) - 1)  # the last item is the text answer
    calls = list(items[step]["tool_calls"])
    seconds = rng.choice((0.01, 0.05, 0.5))
    calls[0] = {"id": calls[0]["id"], "name": "chaos__wait", "input": {"seconds": seconds}}
    items[step]["tool_calls"] = calls
    config = attrs.evolve(world.config, mcp=(MCP_SERVER,))
    return attrs.evolve(world, config=config, scripts=(tuple(items), *world.scripts[1:]))


# A share of the worlds without real processes gives one session a sub-agent,
# which itself has one in a share of those (two levels deep).
SUB_AGENT_SHARE = 0.3
GRANDCHILD_SHARE = 0.3


def _with_sub_agents(rng: random.Random, world: World) -> World:
    """The world with one tool call of one session's script replaced by a `task` call."""
    if rng.random() >= SUB_AGENT_SHARE:
        return world
    session = rng.randrange(len(world.scripts))
    child_title = f"sub-s{session}"
    child = _script(rng, 10 + session, False)
    subs = [(child_title, child)]
    if rng.random() < GRANDCHILD_SHARE:
        grandchild_title = f"{child_title}-2"
        subs.append((grandchild_title, _script(rng, 20 + session, False)))
        subs[0] = (child_title, _delegating(rng, child, grandchild_title))
    scripts = list(world.scripts)
    scripts[session] = _delegating(rng, scripts[session], child_title)
    return attrs.evolve(world, scripts=tuple(scripts), sub_scripts=tuple(subs))


def _delegating(
    rng: random.Random, script: tuple[dict[str, Any], ...], title: str
) -> tuple[dict[str, Any], ...]:
    """``script`` with the first call of one of its tool steps made a `task` call to ``title``."""
    items = [dict(item) for item in script]
    step = rng.randrange(len(items) - 1)  # the last item is the text answer
    calls = list(items[step]["tool_calls"])
    task = {"id": calls[0]["id"], "name": "task", "input": {"prompt": "help", "title": title}}
    items[step]["tool_calls"] = [task, *calls[1:]]
    return tuple(items)


# A scenario's person waits this long (trio seconds) before answering what the scenario left pending.
PATIENCE = 0.5


def make_user_world(rng: random.Random, base_dir: Path, db: Path, setup: Setup) -> World:
    """Draw a world on the user's config: their script in one session (1-2 prompts), or their scenario.

    Without a script or a scenario, the built-in programs run under the user's rules and timeouts,
    with the user's plugins loaded beside the campaign's own.
    """
    user = setup.config
    if setup.script is None and setup.scenario is None:
        builtin = make_world(rng, base_dir, db)
        config = _overlay(builtin.config, user)
        return attrs.evolve(
            builtin, config=config, external=_own_deadlines(user), turn_limit=config.timeouts.turn
        )
    # One session (as the built-in runs with real processes): at real speed, two sessions would
    # interleave by timing, and a replay would no longer meet the same checkpoints in the same order.
    sessions = 0 if setup.scenario is not None else 1
    script = setup.script or ({"text": "done"},)
    timeouts = attrs.evolve(user.timeouts, turn=user.timeouts.turn or TURN_LIMIT)
    # The campaign checks that a restart resumes each suspended or crashed turn (invariant 3), so its
    # restarts resume whatever the user's `[server] resume` says: "manual" would leave them parked.
    server = attrs.evolve(user.server, db=str(db), resume="auto")
    config = attrs.evolve(user, server=server, timeouts=timeouts, model=ModelConfig(provider="scripted"))
    external = _own_deadlines(user) | (
        frozenset({"interrupt", "declined"}) if setup.scenario else frozenset()
    )
    return World(
        config=config,
        scripts=tuple(tuple(script) for _ in range(sessions)),
        prompts=tuple(rng.choice((1, 1, 2)) for _ in range(sessions)),
        # The user's tools may wait on the world (processes, sockets, threads): trio's clock keeps
        # real speed, or autojump would leap over every bound on waiting for them.
        processes=True,
        turn_limit=timeouts.turn,
        external=external,
        scenario=setup.scenario,
        patience=PATIENCE if setup.scenario is not None else 0.0,
        default_script=tuple(script),
    )


def _overlay(builtin: Config, user: Config) -> Config:
    """The built-in world's config under the user's rules, timeouts and plugins (theirs win)."""
    names = {entry.entry.rpartition(":")[2].rpartition(".")[2] for entry in user.plugin}
    taken = sorted(names & {"slow", "guarded"})
    if taken:
        raise ConfigError(
            f"a plugin named {taken[0]} takes the name of a tool of the built-in programs; pass --script",
            "[[plugin]]",
        )
    timeouts = attrs.evolve(user.timeouts, turn=user.timeouts.turn or TURN_LIMIT)
    return attrs.evolve(
        builtin,
        timeouts=timeouts,
        permission=(*RULES, *user.permission),
        plugin=(*PLUGINS, *user.plugin),
        base_dir=user.base_dir,
    )


def _own_deadlines(user: Config) -> frozenset[str]:
    """``timeout`` when the user's config has a deadline that stops a turn and may fire on its own."""
    timeouts = user.timeouts
    own = any(timeouts.limit(scope) for scope in ("permission", "question", "turn"))
    return frozenset({"timeout"}) if own else frozenset()


def _script(rng: random.Random, session: int, processes: bool) -> tuple[dict[str, Any], ...]:
    """Tool steps (one to three, some with parallel calls), then text: every turn ends."""
    items: list[dict[str, Any]] = []
    for index in range(rng.choice((1, 1, 2, 2, 3))):
        width = 1 if processes else rng.choice((1, 1, 1, 2, 3))
        prefix = f"s{session}i{index}c"
        calls = [_call(rng, f"{prefix}{k}", processes) for k in range(width)]
        item: dict[str, Any] = {"tool_calls": calls}
        if not processes:
            item["delay"] = rng.choice((0, 0, 0, 1, 2))
        items.append(item)
    # The last answer streams in chunks, so stops land between them (``model.chunk``); it takes no draw,
    # so the worlds and faults drawn after it do not depend on it.
    delay = 0 if processes else rng.choice((0, 0, 1))
    items.append({"chunks": ["All ", "done", "."], "chunk_delay": 0 if processes else 0.5, "delay": delay})
    return tuple(items)


def _call(rng: random.Random, call_id: str, processes: bool) -> dict[str, Any]:
    kinds = ["slow", "guarded", "question", "slow", "guarded"]
    if processes:
        kinds = ["shell", "execute", "execute", "execute", "guarded"]
    name = rng.choice(kinds)
    if name in ("slow", "guarded"):
        seconds = rng.choice((0, 0.01, 0.02)) if processes else rng.choice((0, 1, 2, 5))
        return {"id": call_id, "name": name, "input": {"seconds": seconds}}
    if name == "question":
        questions = [{"id": "q1", "prompt": "Which one?", "options": ["a", "b"]}]
        if rng.random() < 0.5:
            questions.append({"id": "q2", "prompt": "Why?"})
        return {"id": call_id, "name": "question", "input": {"questions": questions}}
    if name == "shell":
        return {
            "id": call_id,
            "name": "shell",
            "input": {"command": rng.choice(("echo chaos", "sleep 0.05"))},
        }
    return {"id": call_id, "name": "execute", "input": {"code": SCRIPT_CODE}}


class ChaosModel:
    """Answers each session from its own script, and keeps every request it was sent (to check them),
    with the conversation rebuilt from scratch from the run's database (``db``) as it was sent."""

    def __init__(
        self,
        default: tuple[dict[str, Any], ...] | None = None,
        by_title: tuple[tuple[str, tuple[dict[str, Any], ...]], ...] = (),
        *,
        db: Path | None = None,
    ) -> None:
        self.scripts: dict[str, ScriptedModel] = {}
        # Sub-agent sessions, made by `task` calls, are answered by their title's script.
        self.by_title = {title: ScriptedModel.from_json(list(s), title) for title, s in by_title}
        self.requests: list[ModelRequest] = []
        self.db = db
        self.rebuilt: list[tuple[ChatMessage, ...]] = []
        self.streams: list[Streamed] = []
        # The script of sessions the campaign did not create (a scenario's).
        self.default = None if default is None else ScriptedModel.from_json(list(default), "the script")

    def assign(self, session_id: str, script: tuple[dict[str, Any], ...]) -> None:
        self.scripts[session_id] = ScriptedModel.from_json(list(script), f"session {session_id}")

    async def complete(self, request: ModelRequest) -> ModelReply:
        """The script's answer. **Cancellation:** abandoned. **Raises:** nothing."""
        self.requests.append(request)
        if self.db is not None:
            self.rebuilt.append(rebuilt_conversation(self.db, request.session_id))
        model = self.scripts.get(request.session_id) or self.by_title.get(request.title) or self.default
        assert model is not None, f"no script for session {request.session_id}"
        stream = Streamed(session_id=request.session_id, index=request.index, messages=request.messages)
        self.streams.append(stream)
        tee = Tee(inner=request.text, record=stream)
        return await model.complete(attrs.evolve(request, text=tee))

    async def aclose(self) -> None:
        """Nothing to release."""
        await trio.lowlevel.checkpoint()


def rebuilt_conversation(db: Path, session_id: str) -> tuple[ChatMessage, ...]:
    """The session's conversation read whole from the store (on a connection of its own, with no
    await, so the run's schedule is the same): what a step sends without its kept settled turns."""
    with open_read_view(str(db)) as reader:
        return conversation_for_model(reader, session_id)
