"""The ``coordinator`` command line: serve, init, the commands that talk to a running server
(``remote.py``), events, demo, chaos and bench.

Exit codes: 0 on success and on a clean shutdown (SIGTERM, SIGINT), 1 when something failed at run
time (the address is taken, the server cannot be reached), 2 on bad usage or a bad config file. Every
failure is one line on stderr saying what is wrong and where.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import importlib
import importlib.metadata
import importlib.resources
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import httpx
import trio

from coordinator import event_lines, remote
from coordinator.config import PRINCIPAL_NAME, TOKEN_PRINCIPAL, Config, apply_env, config_from, load_config
from coordinator.errors import ClientError, ConfigError, StoreError
from coordinator.log_output import configure_logging
from coordinator.logs import get_logger
from coordinator.server.edge import is_loopback

log = get_logger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

EXAMPLE_CONFIG = "coordinator.example.toml"


class _Parser(argparse.ArgumentParser):
    """Reports bad usage as a ``ConfigError`` so that ``main`` prints it on one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message, self.prog)


DESCRIPTION = """\
Runs agent sessions (turns, model steps, tool calls, permission waits) with typed stop reasons.

a first look:
  coordinator demo                          six short stories, printed as their event streams
  coordinator init                          write coordinator.example.toml (a commented config)
  coordinator serve --config coordinator.example.toml
then, in another terminal:
  S=$(coordinator session new)              a new session's id
  coordinator prompt $S "run: echo hi"      start a turn; shell asks permission with that config
  coordinator pending                       what waits for an answer (permission requests, forms)
  coordinator reply $S RID once             let the shell call run (RID: the request's id)
  coordinator events --session $S --pretty  what happened, one readable line an event

`coordinator COMMAND --help` says more about each."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand; each sets ``run`` to the function that runs it."""
    parser = _Parser(
        prog="coordinator", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"coordinator {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the HTTP server until SIGTERM/SIGINT")
    serve.add_argument(
        "--config", metavar="FILE", help="a TOML config file (`coordinator init` writes an example)"
    )
    serve.add_argument(
        "--db",
        metavar="PATH|URL",
        help="a SQLite file's path (made with its folder) or a postgresql:// URL; overrides [server] db",
    )
    serve.add_argument("--host", metavar="H", help="the address to listen on; overrides [server] host")
    serve.add_argument(
        "--port", metavar="P", type=int, help="the port (0: any free one); overrides [server] port"
    )
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="serve a non-loopback host without a token (anyone may drive it)",
    )
    serve.set_defaults(run=_serve)

    init = commands.add_parser(
        "init",
        help=f"write the example config ({EXAMPLE_CONFIG}), every key commented",
        description="Writes the shipped example config; edit it, then `coordinator serve --config FILE`.",
    )
    init.add_argument(
        "path", metavar="PATH", nargs="?", default=EXAMPLE_CONFIG, help=f"(default {EXAMPLE_CONFIG})"
    )
    init.add_argument("--force", action="store_true", help="overwrite PATH if it exists")
    init.set_defaults(run=_init)

    principal = commands.add_parser(
        "principal",
        help="who may use the server: `coordinator principal add NAME [--role admin]`",
        description="`add` makes a principal: it prints its new token once and appends the entry (the "
        "token's SHA-256, never the token) to the config file. Restart the server to let it in.",
    )
    principal_actions = principal.add_subparsers(dest="principal_action", metavar="ACTION", required=True)
    add = principal_actions.add_parser("add", help="add a principal; prints its token once")
    add.add_argument("name", metavar="NAME", help="[a-z0-9_.-], 1 to 64 characters")
    add.add_argument(
        "--role",
        choices=("user", "admin"),
        default="user",
        help="user: its own sessions (default); admin: all",
    )
    add.add_argument(
        "--config",
        metavar="FILE",
        default=remote.LOCAL_CONFIG,
        help=f"the config file (default {remote.LOCAL_CONFIG})",
    )
    add.set_defaults(run=_principal_add)

    remote.add_commands(commands)
    events = commands.add_parser(
        "events",
        help="print a running server's events, one JSON object a line",
        description="The stored events, then (with --follow) the live ones; --after SEQ skips the older.",
    )
    remote.add_event_options(events)
    events.set_defaults(run=_events)

    demo = commands.add_parser("demo", help="run the built-in scripted scenarios and print their events")
    demo.set_defaults(run=_demo, log_level=logging.WARNING)

    chaos = commands.add_parser("chaos", help="run the fault-injection campaign")
    chaos.add_argument(
        "--config",
        metavar="FILE",
        help="your config: the campaign runs its plugins, permission rules and timeouts",
    )
    chaos.add_argument(
        "--script",
        metavar="FILE",
        help="a JSON script of what the scripted model answers; default built-in programs",
    )
    chaos.add_argument("--runs", metavar="N", type=int, default=100, help="how many runs (default 100)")
    chaos.add_argument("--seed", metavar="S", type=int, default=0, help="the first run's seed (default 0)")
    chaos.add_argument("--only", metavar="K", type=int, help="run only run number K of the seed (a replay)")
    chaos.add_argument(
        "--schedule", metavar="S", help="with --only: inject exactly these faults (as printed)"
    )
    chaos.add_argument("--jobs", metavar="J", type=int, default=1, help="worker processes (default 1)")
    chaos.add_argument(
        "--process-rounds", metavar="R", type=int, default=0, help="rounds against a real server"
    )
    chaos.add_argument(
        "--round", metavar="K", type=int, help="run only process round K (a replay, as printed)"
    )
    chaos.add_argument(
        "--db",
        metavar="URL",
        help="run the process rounds over --nodes servers sharing one PostgreSQL database: each round "
        "makes a fresh one on the server of this postgresql:// URL and drops it after",
    )
    chaos.add_argument(
        "--nodes", metavar="N", type=int, help="with --db: servers (nodes) in each round (default 3)"
    )
    chaos.set_defaults(run=_chaos, log_level=logging.WARNING)

    bench = commands.add_parser("bench", help="run the benchmarks and write bench/results/latest.json")
    # Unset unless given: the bench's own parser has the defaults (``python -m bench --help``).
    bench.add_argument("--quick", action="store_true", default=argparse.SUPPRESS, help="tiny sizes")
    bench.add_argument(
        "--only", metavar="GROUPS", default=argparse.SUPPRESS, help="comma-separated groups, e.g. turns,pg"
    )
    bench.add_argument(
        "--pg",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="the PostgreSQL server of the pg group (skipped when none answers)",
    )
    bench.add_argument("--out", metavar="FILE", type=Path, default=argparse.SUPPRESS, help="the JSON file")
    bench.set_defaults(run=_bench, log_level=logging.WARNING)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code (0 ok, 1 failed, 2 bad usage or config)."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:  # a bare `coordinator`: teach rather than complain
            parser.print_help()
            return EXIT_OK
        # The demo, chaos and bench print their own report; INFO lines would bury it.
        configure_logging(level=getattr(args, "log_level", logging.INFO))
        run: Callable[[argparse.Namespace], int] = args.run
        return run(args)
    except ConfigError as exc:
        _complain(str(exc))
        return EXIT_USAGE


def _complain(line: str) -> None:
    print(f"coordinator: error: {' '.join(line.split())}", file=sys.stderr, flush=True)


def _serve(args: argparse.Namespace) -> int:
    config = config_from(args.config, db=args.db, host=args.host, port=args.port)
    config = apply_env(config, os.environ)
    host = config.server.host
    if not is_loopback(host) and not config.server.token and not config.principal:
        if not args.insecure:
            raise ConfigError(
                f"refusing to serve {host} without a token: anyone who can reach it could run its tools; "
                "set [server] token (or COORDINATOR_TOKEN), add a principal (coordinator principal add), "
                "or pass --insecure"
            )
        log.warning("serving_without_token", host=host)
    taken = _port_taken(host, config.server.port)
    if taken is not None:
        _complain(taken)
        return EXIT_USAGE
    try:
        _run_trio(_serve_until_signal, config)
    except KeyboardInterrupt:  # SIGINT before the signal receiver was installed: still a clean stop
        return EXIT_OK
    except OSError as exc:
        if exc.filename is not None:  # the database's folder or file, not the socket
            _complain(f"{exc.filename}: {exc.strerror or exc}")
        else:
            _complain(f"cannot listen on {config.server.host}:{config.server.port}: {exc.strerror or exc}")
        return EXIT_FAILED
    except StoreError as exc:
        _complain(f"{config.server.db}: {exc}")
        return EXIT_FAILED
    return EXIT_OK


def _port_taken(host: str, port: int) -> str | None:
    """The line saying ``host:port`` is in use, found before anything starts (so that it is all a
    person sees), or None. Any other failure to listen, and a race with another program taking the
    port later, are reported by the server's own bind."""
    if port == 0:
        return None
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds it
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return (
                        f"port {port} on {host} is already in use (another server?); pick another with --port"
                    )
                return None
    return None


async def _serve_until_signal(config: Config) -> None:
    from coordinator.server.serve import serve_until, tune_gc_for_serving

    # Installed before the server starts, so a signal at any later point is a graceful shutdown.
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def until_signal() -> None:
                async for signum in signals:
                    log.info("signal_received", signal=signal.Signals(signum).name)
                    nursery.start_soon(
                        _force_exit_later, signals, config.server.shutdown_grace + FORCE_MARGIN
                    )
                    return

            async def run_server(task_status: trio.TaskStatus[Any]) -> None:  # noqa: ASYNC128 (serve_until)
                await serve_until(config, until_signal, task_status=task_status)
                nursery.cancel_scope.cancel(reason="the server stopped")

            listening = await nursery.start(run_server)
            tune_gc_for_serving()
            print(f"coordinator listening on {listening.url}", flush=True)


# Seconds past ``shutdown_grace`` before a shutdown that has not finished is forced.
FORCE_MARGIN = 5.0


async def _force_exit_later(signals: AsyncIterator[int], deadline: float) -> None:
    """A second signal, or the deadline, ends the process at once, settling nothing.

    What was left is then found by the next start as a crash (its owner is dead) and resumed.
    """
    with trio.move_on_after(deadline) as waiting:
        async for signum in signals:
            log.warning("forced_exit", signal=signal.Signals(signum).name)
            break
    if waiting.cancelled_caught:
        log.warning("forced_exit", reason="shutdown deadline passed", seconds=deadline)
    os._exit(EXIT_FAILED)


def _init(args: argparse.Namespace) -> int:
    target = Path(args.path)
    if target.exists() and not args.force:
        raise ConfigError("exists; pass --force to overwrite it", str(target))
    text = importlib.resources.files("coordinator").joinpath(EXAMPLE_CONFIG).read_text(encoding="utf-8")
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        _complain(f"{target}: {exc.strerror or exc}")
        return EXIT_FAILED
    print(f"wrote {target}; start with: coordinator serve --config {target}", flush=True)
    return EXIT_OK


def _principal_add(args: argparse.Namespace) -> int:
    """Append a ``[[principal]]`` to the config (checked first, as the server will read it), then
    print the token: only its hash is kept, so this is the one time anyone sees it."""
    path = Path(args.config)
    existing = load_config(path) if path.exists() else Config()
    if not PRINCIPAL_NAME.match(args.name):
        raise ConfigError(f"expected a name of [a-z0-9_.-], 1 to 64 characters, got {args.name!r}", "NAME")
    if args.name == TOKEN_PRINCIPAL or any(entry.name == args.name for entry in existing.principal):
        raise ConfigError(f"the name {args.name!r} is taken", str(path))
    token = secrets.token_urlsafe(32)
    digest = hashlib.sha256(token.encode()).hexdigest()
    entry = f'\n[[principal]]\nname = "{args.name}"\ntoken_sha256 = "{digest}"\nrole = "{args.role}"\n'
    try:
        with path.open("a", encoding="utf-8") as file:
            file.write(entry)
    except OSError as exc:
        _complain(f"{path}: {exc.strerror or exc}")
        return EXIT_FAILED
    load_config(path)  # what the server will read: a bad file is caught here, not at its start
    print(token, flush=True)
    print(
        f"added {args.role} {args.name!r} to {path}; its token is above, shown this once. Restart the server.",
        file=sys.stderr,
        flush=True,
    )
    return EXIT_OK


def _version() -> str:
    try:
        return importlib.metadata.version("coordinator")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


def _events(args: argparse.Namespace) -> int:
    url, token = remote.server_of(args)
    try:
        _run_trio(_print_events, url, token, args, args.session)
    except KeyboardInterrupt:
        return EXIT_OK
    except BrokenPipeError:  # the reader went away (`| head`): nothing more to print
        sys.stdout = open(os.devnull, "w")  # keeps the final flush at exit quiet
        return EXIT_OK
    except ClientError as exc:
        _complain(f"{url}: {exc.name}: {exc.message}")
        return EXIT_FAILED
    except httpx.HTTPError as exc:
        _complain(f"cannot read events from {url}: {exc!r}")
        return EXIT_FAILED
    return EXIT_OK


async def _print_events(
    url: str, token: str | None, args: argparse.Namespace, session_id: str | None
) -> None:
    from coordinator.client import CoordinatorClient

    async with CoordinatorClient(url, token) as client:
        after = await client.last_seq(session_id) if args.from_now else args.after
        stream = client.events(after=after, session_id=session_id, follow=args.follow, deltas=args.deltas)
        printer = event_lines.Printer(out=sys.stdout, colour=sys.stdout.isatty()) if args.pretty else None
        # Cancelled, not broken out of, at --until: the stream's connection closes at once (client.events).
        with trio.CancelScope() as found:
            async for event in stream:
                # A stream whose next events are already read yields them without a checkpoint, so
                # the cancellation lands a few events late: those are not printed.
                if found.cancel_called:
                    continue
                if printer is None:
                    print(json.dumps(event, ensure_ascii=False), flush=True)
                else:
                    printer.event(event_lines.from_wire(event))
                if event.get("type") == args.until:
                    found.cancel()


def _demo(args: argparse.Namespace) -> int:
    demo = importlib.import_module("coordinator.demo")  # imported late: it loads the whole stack
    return _exit_code(demo.main())


def _chaos(args: argparse.Namespace) -> int:
    chaos = importlib.import_module("coordinator.chaos")  # imported late: it loads the whole stack
    return _exit_code(chaos.main(args))


def _bench(args: argparse.Namespace) -> int:
    """The benchmarks live in the project's checkout (``bench/``), not in the installed package: they
    run as ``python -m bench`` from the current folder, which must be that checkout."""
    if not (Path.cwd() / "bench" / "__main__.py").is_file():
        print(
            f"coordinator: error: the benchmarks run from a checkout of the project; no bench/ in {Path.cwd()}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    argv = [f"--{name}={value}" for name, value in vars(args).items() if name in _BENCH_OPTIONS]
    argv += ["--quick"] if getattr(args, "quick", False) else []
    return subprocess.run([sys.executable, "-m", "bench", *argv], check=False).returncode


_BENCH_OPTIONS = ("only", "pg", "out")


def _exit_code(result: Any) -> int:
    return result if isinstance(result, int) and not isinstance(result, bool) else EXIT_OK


def _run_trio(function: Callable[..., Any], *args: Any) -> None:
    """``trio.run``, re-raising an exception that a nursery wrapped alone in a group as itself."""
    try:
        trio.run(function, *args)
    except BaseExceptionGroup as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
            leaf = leaf.exceptions[0]
        if leaf is group:
            raise
        raise leaf from group  # noqa: ASYNC123 (a lone child, its group kept as the cause)
