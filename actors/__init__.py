"""The actor tree: one module per actor (``design/actors.md``).

The actors import only the lower modules of ``coordinator`` (store, bus, events, reasons, records,
tools, ...), but importing any of those first initializes the ``coordinator`` package, whose
``__init__`` imports the embedding API, which imports the actors. Were an actor module the first one
imported, the embedding API would then import the actors while that module is still half-initialized
(and fail on the first name taken from it). So this package initializes ``coordinator`` first: every
actor module then loads after it, whichever module a program imports first. Nothing here uses it.
"""

from __future__ import annotations

import coordinator  # noqa: F401 (initialized first, see above)
