"""The program ``execute`` runs in a separate Python process: one script, its nested calls over a socket.

Started as ``python -I <this folder> <fd>`` (see ``__main__.py``), in its own process group, with the
standard library only: ``fd`` is this process's end of a socket pair, the protocol channel (JSON lines,
described in ``design/execute.md``). The coordinator sends ``start`` with the code; the script's
``print`` output comes back as ``log`` messages, each ``tools.NAME(**input)`` as a ``call`` answered by a
``result``, and the end as ``return`` or ``error``. Output written to the file descriptors 1 and 2
directly (by a child process, say) goes to a pipe the coordinator reads as log lines too, so nothing the
script writes can corrupt the protocol.

The package imports only the standard library and its own modules, relatively: in the runner process
it is loaded on its own, under a top-level name, without the ``coordinator`` package and its
dependencies.

It isolates a process; it is not a security sandbox.
"""

from __future__ import annotations

from ._calls import Client, ToolError, Tools
from ._channel import Channel, encode
from ._main import main
from ._output import (
    DEFAULT_LINE_BYTES,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES,
    DROP_REPORT_SECONDS,
    LineSink,
    LogBudget,
    capture_output,
    flush_output,
)
from ._script import (
    DEFAULT_MAX_MESSAGE_BYTES,
    SCRIPT_FILENAME,
    SCRIPT_FUNCTION,
    compile_script,
    load_script,
    run_script,
    script_traceback,
    syntax_error_text,
)

__all__ = [
    "DEFAULT_LINE_BYTES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_LINES",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DROP_REPORT_SECONDS",
    "SCRIPT_FILENAME",
    "SCRIPT_FUNCTION",
    "Channel",
    "Client",
    "LineSink",
    "LogBudget",
    "ToolError",
    "Tools",
    "capture_output",
    "compile_script",
    "encode",
    "flush_output",
    "load_script",
    "main",
    "run_script",
    "script_traceback",
    "syntax_error_text",
]
