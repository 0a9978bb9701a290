"""``coordinator serve`` with SQLite's ``synchronous=NORMAL``: how the power-cut campaign measures what
that mode loses (``python -m tests.faults.serve_normal serve --config ...``). The server itself always
runs with FULL."""

from __future__ import annotations

import functools

from coordinator import _open
from coordinator.cli import main
from coordinator.server import serve

serve.open_coordinator = functools.partial(_open.open_coordinator, synchronous="normal")  # type: ignore[assignment]

raise SystemExit(main())
