"""``python -m coordinator``: the same command line as the ``coordinator`` console script."""

from __future__ import annotations

from coordinator.cli import main

raise SystemExit(main())
