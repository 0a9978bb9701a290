"""The actor tree: one module per actor (session, step, tool call, durable wait, sub-agent task),
the stop arbiter every stop decision goes through, and the one settlement path (``design/actors.md``)."""
