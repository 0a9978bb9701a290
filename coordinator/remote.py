"""The CLI commands that talk to a running server: sessions, session new, pending, answer, prompt,
queue, cancel, reply, interrupt, resume and events.

Each finds the server at ``--url``, by default the ``[server]`` host and port of ``--config`` (or of
``coordinator.toml`` in the current folder when there is one, else 127.0.0.1:4096), and sends the
token of ``--token``, else ``COORDINATOR_TOKEN``, else the config's. A refused request is one line
naming the error (exit 1); a server that cannot be reached too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import trio

from coordinator import wire
from coordinator.client import CoordinatorClient
from coordinator.config import Config, apply_env, load_config
from coordinator.errors import ClientError
from coordinator.records import Form, Session

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

LOCAL_CONFIG = "coordinator.toml"
WILDCARDS = ("0.0.0.0", "::", "")


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """``--url``, ``--config`` and ``--token``: where the server is and how to be let in."""
    parser.add_argument(
        "--url",
        metavar="U",
        help="the server (default: [server] host and port of the config, or 127.0.0.1:4096)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=f"read host, port and token from this file (default ./{LOCAL_CONFIG} if any)",
    )
    parser.add_argument(
        "--token", metavar="T", help="the bearer token (default: env COORDINATOR_TOKEN, then the config's)"
    )


def add_commands(commands: Any) -> None:
    """The remote subcommands, each with ``run`` set to its function."""
    sessions = commands.add_parser(
        "sessions",
        help="list a running server's sessions, newest first",
        description="One line a session: id, status, last outcome, title (tab-separated).",
    )
    add_server_options(sessions)
    sessions.add_argument(
        "--limit", metavar="N", type=int, default=100, help="at most N sessions (default 100)"
    )
    sessions.add_argument("--json", action="store_true", help="one JSON object a line instead")
    sessions.set_defaults(run=run_sessions)

    session = commands.add_parser(
        "session",
        help="make a session: `coordinator session new [--title T]` prints its id",
        description="`new` creates an idle session and prints its id alone on a line (for S=$(...)).",
    )
    session_actions = session.add_subparsers(dest="session_action", metavar="ACTION", required=True)
    new = session_actions.add_parser("new", help="create a session; prints its id")
    add_server_options(new)
    new.add_argument("--title", metavar="T", default="", help="its title (default none)")
    new.set_defaults(run=run_session_new)

    pending = commands.add_parser(
        "pending",
        help="list what waits for an answer: permission requests and question forms",
        description=(
            "One line each, tab-separated: permission|form, its id, the session's id, what it asks. "
            "Answer a request with `coordinator reply`, a form with `coordinator answer`."
        ),
    )
    add_server_options(pending)
    pending.add_argument(
        "session_id", metavar="SID", nargs="?", help="only this session's (and its sub-agents')"
    )
    pending.set_defaults(run=run_pending)

    answer = commands.add_parser(
        "answer",
        help="answer a question form: coordinator answer SID FID q1=yes q2='some text'",
        description="Every question of the form, by its id (as `coordinator pending` shows them); prints the form.",
    )
    add_server_options(answer)
    answer.add_argument("session_id", metavar="SID", help="the session (ses_...)")
    answer.add_argument("form_id", metavar="FID", help="the form (frm_...)")
    answer.add_argument("answers", metavar="KEY=VALUE", nargs="+", help="a question's id and its answer")
    answer.set_defaults(run=run_answer)

    prompt = commands.add_parser(
        "prompt",
        help="send a prompt to a session; prints its turn's id",
        description=(
            "Queues a turn; it runs after the session's running and queued turns. --steer sends the text "
            "into the running turn instead (it reaches the model at the turn's next step boundary; "
            "prints the turn's id and the steer's); --interrupt stops the running turn and runs this "
            "prompt next. Watch it with `coordinator events`."
        ),
    )
    add_server_options(prompt)
    prompt.add_argument("session_id", metavar="SID", help="the session (ses_...)")
    prompt.add_argument(
        "text",
        metavar="TEXT",
        help='the prompt, or - to read it from standard input; the demo model runs shell for "run: COMMAND"',
    )
    how = prompt.add_mutually_exclusive_group()
    how.add_argument("--steer", action="store_true", help="send the text into the running turn")
    how.add_argument("--interrupt", action="store_true", help="stop the running turn; this prompt runs next")
    prompt.add_argument(
        "--expect", metavar="TURN", help="only while TURN is the running turn (TurnMismatch otherwise)"
    )
    prompt.set_defaults(run=run_prompt)

    queue = commands.add_parser(
        "queue",
        help="list a session's queued turns, in the order they will run",
        description="One line a queued turn: its id, when it was queued, its text (tab-separated).",
    )
    add_server_options(queue)
    queue.add_argument("session_id", metavar="SID", help="the session (ses_...)")
    queue.add_argument("--json", action="store_true", help="one JSON object a line instead")
    queue.set_defaults(run=run_queue)

    cancel = commands.add_parser(
        "cancel",
        help="cancel a queued turn: it never runs",
        description="TurnNotQueued (exit 1) once the turn has started: interrupt it instead.",
    )
    add_server_options(cancel)
    cancel.add_argument("session_id", metavar="SID", help="the session (ses_...)")
    cancel.add_argument("turn_id", metavar="TURN", help="the queued turn (turn_...)")
    cancel.set_defaults(run=run_cancel)

    reply = commands.add_parser(
        "reply",
        help="answer a pending permission request",
        description=(
            "once: run this call; always: also allow this action and resource for the session; "
            "reject: decline it, which stops the turn, unless --message gives the model feedback instead."
        ),
    )
    add_server_options(reply)
    reply.add_argument("session_id", metavar="SID", help="the session (ses_...)")
    reply.add_argument("request_id", metavar="RID", help="the permission request (per_...)")
    reply.add_argument("decision", choices=("once", "always", "reject"), help="once, always or reject")
    reply.add_argument("--message", metavar="M", help="with reject: feedback for the model; the turn goes on")
    reply.add_argument(
        "--input",
        metavar="JSON",
        help="with once or always: run the call with this input (a JSON object) instead of the model's",
    )
    reply.set_defaults(run=run_reply)

    interrupt = commands.add_parser(
        "interrupt",
        help="stop a session's running turn (reason interrupt)",
        description="Prints whether a turn was stopped (false when idle or already stopping).",
    )
    add_server_options(interrupt)
    interrupt.add_argument("session_id", metavar="SID", help="the session (ses_...)")
    interrupt.add_argument(
        "--after-step",
        action="store_true",
        help="a soft stop: let the running step and its tool calls finish, stop before the next model request",
    )
    interrupt.add_argument("--cancel-queued", action="store_true", help="also cancel every queued turn")
    interrupt.set_defaults(run=run_interrupt)

    resume = commands.add_parser(
        "resume",
        help='resume a session\'s suspended turn (with [server] resume = "manual")',
        description="Prints the resumed turn's id; NothingToResume (exit 1) when no turn is suspended.",
    )
    add_server_options(resume)
    resume.add_argument("session_id", metavar="SID", help="the session (ses_...)")
    resume.set_defaults(run=run_resume)


def add_event_options(events: argparse.ArgumentParser) -> None:
    """The options of ``coordinator events``."""
    add_server_options(events)
    events.add_argument("--session", metavar="SID", help="only this session's events")
    start = events.add_mutually_exclusive_group()
    start.add_argument("--after", metavar="SEQ", type=int, default=0, help="start after this seq")
    start.add_argument(
        "--from-now",
        action="store_true",
        help="start at the live end: only events from now on (with --follow)",
    )
    events.add_argument(
        "--pretty",
        action="store_true",
        help="one readable line an event (as `coordinator demo` prints), not JSON",
    )
    events.add_argument("--follow", action="store_true", help="keep streaming live events, reconnecting")
    events.add_argument(
        "--deltas", action="store_true", help="also print the model's text as it streams (session.text.delta)"
    )
    events.add_argument(
        "--until",
        metavar="TYPE",
        help="stop after the first event of this type (with --follow: wait for it), e.g. permission.asked",
    )


def server_of(args: argparse.Namespace) -> tuple[str, str | None]:
    """The URL and token the command talks to. **Raises:** ``ConfigError`` for a bad config file."""
    config = _config(args.config)
    url = args.url or _url_of(config)
    token = args.token or apply_env(config, os.environ).server.token or None
    return url, token


def _config(path: str | None) -> Config:
    if path is not None:
        return load_config(path)
    return load_config(LOCAL_CONFIG) if Path(LOCAL_CONFIG).is_file() else Config()


def _url_of(config: Config) -> str:
    host = config.server.host
    host = "127.0.0.1" if host in WILDCARDS else host
    return f"http://[{host}]:{config.server.port}" if ":" in host else f"http://{host}:{config.server.port}"


def _call(args: argparse.Namespace, action: Callable[[CoordinatorClient], Awaitable[None]]) -> int:
    """Run ``action`` with a client of the server; a refusal or an unreachable server is one line."""
    url, token = server_of(args)

    async def main() -> None:
        async with CoordinatorClient(url, token) as client:
            await action(client)

    try:
        trio.run(main)
    except ClientError as exc:
        complain(f"{url}: {exc.name}: {exc.message}")
        return EXIT_FAILED
    except httpx.HTTPError as exc:
        complain(f"cannot reach the server at {url}: {exc!r} (is `coordinator serve` running?)")
        return EXIT_FAILED
    return EXIT_OK


def complain(line: str) -> None:
    print(f"coordinator: error: {' '.join(line.split())}", file=sys.stderr, flush=True)


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False), flush=True)


def _session_line(session: Session) -> str:
    return "\t".join([session.id, session.status, session.last_outcome or "-", session.title])


def run_sessions(args: argparse.Namespace) -> int:
    async def action(client: CoordinatorClient) -> None:
        for session in await client.list_sessions(limit=args.limit):
            if args.json:
                _print_json(wire.unstructure(session))
            else:
                print(_session_line(session), flush=True)

    return _call(args, action)


def run_session_new(args: argparse.Namespace) -> int:
    async def action(client: CoordinatorClient) -> None:
        print((await client.create_session(title=args.title)).id, flush=True)

    return _call(args, action)


def run_pending(args: argparse.Namespace) -> int:
    async def action(client: CoordinatorClient) -> None:
        permissions = await client.pending_permissions(args.session_id)
        forms = await _pending_forms(client, args.session_id)
        for request in permissions:
            asks = f"{request.action}: {request.resource}"
            print("\t".join(["permission", request.id, request.session_id, _one_line(asks)]), flush=True)
        for form in forms:
            asks = " / ".join(question.prompt for question in form.questions)
            print("\t".join(["form", form.id, form.session_id, _one_line(asks)]), flush=True)

    return _call(args, action)


async def _pending_forms(client: CoordinatorClient, session_id: str | None) -> list[Form]:
    """The pending forms of one session (its sub-agents' included), or of every session that has a
    turn (a form waits only in a running or suspended turn), each once."""
    if session_id is not None:
        return await client.pending_forms(session_id)
    found: dict[str, Form] = {}
    before = None
    while True:
        page = await client.list_sessions(limit=SESSION_PAGE, before=before)
        for session in page:
            if session.status != "idle":
                for form in await client.pending_forms(session.id):
                    found.setdefault(form.id, form)
        if len(page) < SESSION_PAGE:
            return sorted(found.values(), key=lambda form: form.created_at)
        before = page[-1].id


SESSION_PAGE = 1000


def _one_line(text: str) -> str:
    return " ".join(text.split())


def run_answer(args: argparse.Namespace) -> int:
    answers = {}
    for pair in args.answers:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            complain(f"answer: expected KEY=VALUE (a question's id, =, its answer), got {pair!r}")
            return EXIT_USAGE
        answers[key] = value

    async def action(client: CoordinatorClient) -> None:
        form = await client.submit_form(args.session_id, args.form_id, answers)
        _print_json(wire.unstructure(form))

    return _call(args, action)


def run_prompt(args: argparse.Namespace) -> int:
    if args.text == "-":
        # One trailing newline is the shell's (`echo ... |`), not the person's.
        args.text = sys.stdin.read().removesuffix("\n")

    async def action(client: CoordinatorClient) -> None:
        if args.steer:
            steered = await client.steer(args.session_id, args.text, expected_turn_id=args.expect)
            print(f"{steered.turn_id}\t{steered.steer_id}", flush=True)
            return
        mode = "interrupt" if args.interrupt else "queue"
        print(
            await client.prompt(args.session_id, args.text, mode=mode, expected_turn_id=args.expect),
            flush=True,
        )

    return _call(args, action)


def run_queue(args: argparse.Namespace) -> int:
    async def action(client: CoordinatorClient) -> None:
        for turn in await client.queued_turns(args.session_id):
            if args.json:
                _print_json(wire.unstructure(turn))
            else:
                print("\t".join([turn.turn_id, turn.created_at, " ".join(turn.text.split())]), flush=True)

    return _call(args, action)


def run_cancel(args: argparse.Namespace) -> int:
    async def action(client: CoordinatorClient) -> None:
        await client.cancel_turn(args.session_id, args.turn_id)
        print(f"cancelled {args.turn_id}", flush=True)

    return _call(args, action)


def run_reply(args: argparse.Namespace) -> int:
    edited = None
    if args.input is not None:
        try:
            edited = json.loads(args.input)
        except json.JSONDecodeError as exc:
            complain(f"--input is not JSON: {exc}")
            return EXIT_USAGE

    async def action(client: CoordinatorClient) -> None:
        request = await client.reply_permission(
            args.session_id, args.request_id, args.decision, args.message, input=edited
        )
        _print_json(wire.unstructure(request))

    return _call(args, action)


def run_interrupt(args: argparse.Namespace) -> int:
    async def action(client: CoordinatorClient) -> None:
        when = "after_step" if args.after_step else "now"
        queued = "cancel" if args.cancel_queued else "keep"
        stopped = await client.interrupt(args.session_id, when=when, queued=queued)
        print("true" if stopped else "false", flush=True)

    return _call(args, action)


def run_resume(args: argparse.Namespace) -> int:
    async def action(client: CoordinatorClient) -> None:
        print(await client.resume(args.session_id), flush=True)

    return _call(args, action)
