"""Every exception the coordinator raises, rooted at ``CoordinatorError``.

::

    CoordinatorError
    ├── ClientError                      reaches a client; has ``name`` and ``status``
    │   ├── InvalidRequest               400: malformed input
    │   ├── Unauthorized                 401: missing or wrong bearer token
    │   ├── ForbiddenOrigin              403: a web page of another origin sent the request
    │   ├── Forbidden                    403: the principal may not use this route (admin only)
    │   ├── RouteNotFound                404: no route has this path
    │   ├── MethodNotAllowed             405: the path has no route for this method
    │   ├── UnsupportedMediaType         415: a body that is not application/json
    │   ├── MisdirectedRequest           421: a Host header this server does not answer to
    │   ├── SessionNotFound              404
    │   ├── PermissionNotFound           404: request id never issued in this session
    │   ├── FormNotFound                 404: form id never issued in this session
    │   ├── PermissionAlreadySettled     409: replied or revoked before this reply
    │   ├── FormAlreadySettled           409: submitted, cancelled or revoked before
    │   ├── SessionBusy                  409: a delete of a session whose turn is not settled
    │   ├── NothingToResume              409: the session has no parked turn to resume
    │   ├── TurnNotFound                 404: no turn of this session has this id
    │   ├── TurnNotQueued                409: the turn is no longer queued (it started, or ended)
    │   ├── TurnMismatch                 409: ``expected_turn_id`` does not name the running turn
    │   ├── InvalidInput                 400: an edited tool input its tool's input schema refuses
    │   ├── CoordinatorClosed            503: the coordinator is shutting down or closed
    │   ├── StoreUnavailable             503: the database refused the request's write; nothing saved
    │   └── InternalError                500: anything unexpected; its traceback stays in the log
    ├── ConfigError                      a bad config file or flag (the CLI exits 2)
    ├── StoreError                       the store failed
    │   ├── StoreBusy                    another writer holds the database too long
    │   ├── StoreFull                    the disk or the database is full
    │   └── SchemaTooNew                 the database was written by a newer coordinator
    ├── Fenced                           this instance lost its claim: a newer owner holds it
    ├── InvalidTransition                a lifecycle was asked to move where it cannot (a bug)
    ├── ModelError                       the model failed after retries; the turn stops with error
    └── ToolFailure                      a tool fails its own call with a typed error

    ChaosFailure (an AssertionError)     ``coordinator.testing.run_chaos``: a run broke an invariant;
                                         the coordinator never raises it, a user's test does

Errors that reach a client carry their details as attrs fields; the server renders them as
``{"error": {"name", "message", **details}}`` and the embedder catches the same classes.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from coordinator.reasons import ToolErrorType


class CoordinatorError(Exception):
    """Root of every exception the coordinator raises on purpose."""


@attrs.define(eq=False)
class ClientError(CoordinatorError):
    """An error a client caused or must see; rendered by the server's one error handler."""

    name: ClassVar[str] = "ClientError"
    status: ClassVar[int] = 400

    message: str

    def __str__(self) -> str:
        return self.message


@attrs.define(eq=False)
class InvalidRequest(ClientError):
    """The request is malformed: bad JSON, a missing or wrong-typed field, an unknown word."""

    name: ClassVar[str] = "InvalidRequest"
    status: ClassVar[int] = 400


@attrs.define(eq=False)
class Unauthorized(ClientError):
    """A configured token was not presented as ``Authorization: Bearer <token>``."""

    name: ClassVar[str] = "Unauthorized"
    status: ClassVar[int] = 401


@attrs.define(eq=False)
class ForbiddenOrigin(ClientError):
    """The request carries an ``Origin`` that is neither the server's own nor in ``[server] cors_origins``.

    A web page the user happens to visit must never drive the local server.
    """

    name: ClassVar[str] = "ForbiddenOrigin"
    status: ClassVar[int] = 403

    origin: str = ""


@attrs.define(eq=False)
class Forbidden(ClientError):
    """The asking principal is a ``user``; the route is an ``admin``'s (the node list, the metrics)."""

    name: ClassVar[str] = "Forbidden"
    status: ClassVar[int] = 403


@attrs.define(eq=False)
class RouteNotFound(ClientError):
    """No route has this path (a session id is not found: that is ``SessionNotFound``)."""

    name: ClassVar[str] = "RouteNotFound"
    status: ClassVar[int] = 404


@attrs.define(eq=False)
class MethodNotAllowed(ClientError):
    """The path exists, but not with this method; the response's ``Allow`` header lists its methods."""

    name: ClassVar[str] = "MethodNotAllowed"
    status: ClassVar[int] = 405


@attrs.define(eq=False)
class UnsupportedMediaType(ClientError):
    """A request body without ``Content-Type: application/json``.

    Refused before it is read: a cross-site form post (``text/plain``) needs no preflight.
    """

    name: ClassVar[str] = "UnsupportedMediaType"
    status: ClassVar[int] = 415


@attrs.define(eq=False)
class MisdirectedRequest(ClientError):
    """The ``Host`` header names neither a loopback address nor one of ``[server] allowed_hosts``.

    This is what a DNS rebinding attack sends; differs from ``ForbiddenOrigin``, which judges the page.
    """

    name: ClassVar[str] = "MisdirectedRequest"
    status: ClassVar[int] = 421

    host: str = ""


@attrs.define(eq=False)
class SessionNotFound(ClientError):
    """No session has this id."""

    name: ClassVar[str] = "SessionNotFound"
    status: ClassVar[int] = 404

    session_id: str = ""


@attrs.define(eq=False)
class PermissionNotFound(ClientError):
    """The request id was never issued, or was issued in another session.

    Differs from ``PermissionAlreadySettled``: a settled request is never "not found".
    """

    name: ClassVar[str] = "PermissionNotFound"
    status: ClassVar[int] = 404

    request_id: str = ""


@attrs.define(eq=False)
class FormNotFound(ClientError):
    """The form id was never issued, or was issued in another session."""

    name: ClassVar[str] = "FormNotFound"
    status: ClassVar[int] = 404

    form_id: str = ""


@attrs.define(eq=False)
class PermissionAlreadySettled(ClientError):
    """The request was replied to or revoked before this reply; ``settlement`` says how."""

    name: ClassVar[str] = "PermissionAlreadySettled"
    status: ClassVar[int] = 409

    request_id: str = ""
    settlement: dict[str, Any] = attrs.Factory(dict)


@attrs.define(eq=False)
class FormAlreadySettled(ClientError):
    """The form was submitted, cancelled or revoked before this answer; ``settlement`` says how."""

    name: ClassVar[str] = "FormAlreadySettled"
    status: ClassVar[int] = 409

    form_id: str = ""
    settlement: dict[str, Any] = attrs.Factory(dict)


@attrs.define(eq=False)
class SessionBusy(ClientError):
    """The session cannot be deleted: a turn of it is queued, running or suspended (``turns`` lists
    their statuses). Nothing was changed; interrupt the turn, or wait until it settles."""

    name: ClassVar[str] = "SessionBusy"
    status: ClassVar[int] = 409

    session_id: str = ""
    turns: list[str] = attrs.Factory(list)


@attrs.define(eq=False)
class NothingToResume(ClientError):
    """The session has no suspended turn to resume.

    Only a turn parked by a start with ``[server] resume = "manual"`` is resumed by hand: the session is
    idle, its turn runs, or an automatic resume (or another resume) has taken the turn already.
    """

    name: ClassVar[str] = "NothingToResume"
    status: ClassVar[int] = 409

    session_id: str = ""


@attrs.define(eq=False)
class TurnNotFound(ClientError):
    """No turn of this session has this id (a task call's turn is not the session's to cancel)."""

    name: ClassVar[str] = "TurnNotFound"
    status: ClassVar[int] = 404

    turn_id: str = ""


@attrs.define(eq=False)
class TurnNotQueued(ClientError):
    """Only a queued turn can be cancelled; this one started (or ended) already: ``status`` says
    where it is. Interrupt a running turn instead."""

    name: ClassVar[str] = "TurnNotQueued"
    status: ClassVar[int] = 409

    turn_id: str = ""
    turn_status: str = ""


@attrs.define(eq=False)
class TurnMismatch(ClientError):
    """The prompt named a turn (``expected_turn_id``) that is not the session's running turn:
    ``running_turn_id`` is the one that runs (None when none does). Nothing was accepted."""

    name: ClassVar[str] = "TurnMismatch"
    status: ClassVar[int] = 409

    expected_turn_id: str = ""
    running_turn_id: str | None = None
    turn_id: str | None = None  # the same: the running turn's id


@attrs.define(eq=False)
class InvalidInput(ClientError):
    """An approval's edited input does not fit the tool's input schema; ``problems`` says where."""

    name: ClassVar[str] = "InvalidInput"
    status: ClassVar[int] = 400

    problems: list[str] = attrs.Factory(list)


@attrs.define(eq=False)
class CoordinatorClosed(ClientError):
    """The coordinator is shutting down or closed; no new work is accepted."""

    name: ClassVar[str] = "CoordinatorClosed"
    status: ClassVar[int] = 503


@attrs.define(eq=False)
class StoreUnavailable(ClientError):
    """The database refused this request's write (a full disk, an I/O error, a database server that
    went away): nothing of the request was saved, and the server keeps answering reads. Retry once
    the store writes again; turns it was running resume by themselves then."""

    name: ClassVar[str] = "StoreUnavailable"
    status: ClassVar[int] = 503


@attrs.define(eq=False)
class InternalError(ClientError):
    """Anything unexpected. The client sees only this; the traceback goes to the log."""

    name: ClassVar[str] = "InternalError"
    status: ClassVar[int] = 500


@attrs.define(eq=False)
class ConfigError(CoordinatorError):
    """The config file or a flag is wrong; ``where`` names the key, entry or file."""

    message: str
    where: str = ""

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class StoreError(CoordinatorError):
    """The store failed in a way its callers cannot fix."""


class StoreNotDurable(StoreError):
    """The disk failed to make committed writes durable (a failed sync): they may be kept or lost. The
    store refuses writes until it has made its log durable again."""


class StoreBusy(StoreError):
    """The database stayed locked by another writer for longer than the busy timeout."""


class StoreFull(StoreError):
    """The disk or the database is full; nothing of the failed transaction was written."""


class SchemaTooNew(StoreError):
    """The database's schema version is newer than this coordinator knows."""


@attrs.define(eq=False)
class Fenced(CoordinatorError):
    """This instance's claim on a session was taken over; its actors must write nothing more.

    Raised by a store write whose fencing token (the claim's epoch) is stale.
    """

    session_id: str
    epoch: int

    def __str__(self) -> str:
        return f"claim on {self.session_id} at epoch {self.epoch} was taken over"


@attrs.define(eq=False)
class InvalidTransition(CoordinatorError):
    """A lifecycle was asked to move to a state it cannot reach from where it is: a bug."""

    lifecycle: str
    current: str
    target: str

    def __str__(self) -> str:
        return f"{self.lifecycle}: {self.current} -> {self.target} is not allowed"


@attrs.define(eq=False)
class ModelError(CoordinatorError):
    """The model could not answer: after the client's retries, or a malformed reply.

    The step that asked fails, and the turn stops with reason ``error`` carrying ``message``.
    """

    message: str

    def __str__(self) -> str:
        return self.message


@attrs.define(eq=False)
class ToolFailure(CoordinatorError):
    """A tool reports that its call failed; ``type`` and ``message`` become the call's ``error``.

    Raised by tools (a shell call's own timeout, a bad input); any other exception from a tool is
    reported as type ``error`` with its message.
    """

    type: ToolErrorType
    message: str
    partial: Any = None

    def __str__(self) -> str:
        return self.message


class SessionEnded(CoordinatorError):
    """What a tool asked to keep for its session cannot be kept: the session's life in this process
    ended (the session was deleted, or the coordinator is shutting down) before it was open."""


@attrs.define(eq=False, kw_only=True)
class ChaosFailure(AssertionError):
    """A run of ``coordinator.testing.run_chaos`` broke an invariant (or the user's scenario raised).

    An ``AssertionError``, so that a test framework reports it as a failed test. ``replay`` is the one
    call that runs that same run again, with exactly the faults of ``schedule``.
    """

    seed: int
    run: int
    schedule: str  # the faults injected, as ``coordinator chaos --schedule`` reads them
    replay: str
    violations: tuple[str, ...]

    def __str__(self) -> str:
        shown = "\n".join(f"  {v}" for v in self.violations)
        return f"chaos run {self.run} of seed {self.seed} failed:\n{shown}\n  schedule: {self.schedule}\n  replay:   {self.replay}"
