# Every target sets up the virtualenv first, so each works on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# What testing needs beyond running (pytest, linters, schemathesis, playwright, the bench's peer):
# installed by the targets that test, not by `make setup`, which is all someone who runs it needs.
DEV_STAMP := $(VENV)/.installed-dev
# An MCP server written by others (npm's server-everything), for tests/scenarios/test_mcp_third_party.py.
MCP_PEERS := tests/mcp/node_modules/.package-lock.json

.PHONY: setup run demo test unit lint fmt chaos bench soak model mutants faults clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev]'
	@if pkg-config --exists fuse3 2>/dev/null; then $(BIN)/pip install --quiet -e '.[faults]'; \
	else echo "libfuse3-dev not found: the power-cut rig's tests (tests/faults) will skip (CI=true fails them)"; fi
	touch $(DEV_STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/coordinator serve

demo: $(STAMP)
	$(BIN)/coordinator demo

test: lint unit

# Two workers (the machine has two cores): every scenario runs on SQLite and on PostgreSQL.
TEST_WORKERS ?= 2
unit: $(DEV_STAMP) $(MCP_PEERS)
	$(BIN)/pytest -q -n $(TEST_WORKERS)

$(MCP_PEERS): tests/mcp/package.json tests/mcp/package-lock.json
	@if command -v npm >/dev/null; then cd tests/mcp && npm ci --no-audit --no-fund --silent; \
	else echo "npm not found: the tests with npm's MCP server will skip (CI=true fails them)"; fi

lint: $(DEV_STAMP)
	$(BIN)/ruff format --check coordinator tests examples
	$(BIN)/ruff check coordinator tests examples
	$(BIN)/mypy
	@# The 100s (cancellation and cleanup) and 200s (blocking calls). Not adopted: ASYNC124 (ASGI
	@# endpoints must be async), ASYNC127 (asks for httpx2; the stack is httpx), the 900s.
	$(BIN)/flake8-async --startable-in-context-manager=run,serve,serve_until,_run_http,run_server,serve_listener,_live,_sync_until_failure \
		--enable=ASYNC1,ASYNC2 --disable=ASYNC124,ASYNC127 $$(git ls-files 'coordinator/*.py')

fmt: $(DEV_STAMP)
	$(BIN)/ruff format coordinator tests examples
	$(BIN)/ruff check --fix coordinator tests examples

# 10,000 in-process runs on every core, then ten rounds against a real server (see design/chaos.md).
chaos: $(STAMP)
	$(BIN)/coordinator chaos --runs 10000 --jobs $$(nproc 2>/dev/null || echo 2) --process-rounds 10

bench: $(DEV_STAMP)
	$(BIN)/coordinator bench

# Each stop bug of tests/mutants/mutants.py planted in a copy of the sources, one at a time, against the
# tests that must catch it; fails if one survives (design/mutants.md). Not part of `make test`.
mutants: $(DEV_STAMP)
	$(BIN)/python -m tests.mutants.run

# The power-cut campaign (tests/faults/power_cuts.py, design/store.md): the real server under load on
# SQLite FULL, on a FUSE filesystem that forgets what was not synced, killed and its power cut
# FAULT_CUTS times, its syncs refused for a while in a quarter of its lives; then the disk-fault
# scenarios and the two planted bugs they must catch (a missing sync, a recovery without a rewrite).
# Needs Debian's fuse3 and libfuse3-dev. Not part of `make test` (its short version is).
FAULT_CUTS ?= 500
# Then PostgreSQL going away under two nodes: FAULT_PG_KILLS times every connection ended, links
# stalled, and FAULT_PG_RESTARTS restarts of the whole server (pg_ctlcluster; nothing else may use
# it meanwhile). It ends with one summary line of counts.
FAULT_PG_KILLS ?= 200
FAULT_PG_RESTARTS ?= 50
faults: $(DEV_STAMP)
	$(BIN)/python -m tests.faults --cuts $(FAULT_CUTS) --pg-kills $(FAULT_PG_KILLS) --pg-restarts $(FAULT_PG_RESTARTS)

# Sessions created, prompted and deleted in a loop with retention on, printing RSS and the database's
# size each minute (bench/soak.py; not in CI). SOAK_MINUTES=30 by default.
SOAK_MINUTES ?= 30
soak: $(DEV_STAMP)
	$(BIN)/python -m bench.soak --minutes $(SOAK_MINUTES)

# The claim protocol's Spin model, checked exhaustively (design/model/README.md): the model verifies
# clean, and each deliberately broken variant and each behaviour of the code before its fix yields a
# counterexample. Needs spin and gcc, not the virtualenv.
MODEL_CHECK := design/model/verify.sh
model:
	$(MODEL_CHECK) safety clean
	$(MODEL_CHECK) liveness clean
	$(MODEL_CHECK) safety clean -DNODES=3 -DPAUSES=0 -DTRIES=1
	$(MODEL_CHECK) safety counterexample -DBROKEN_NO_FENCE
	$(MODEL_CHECK) safety counterexample -DBROKEN_RESUME_AFTER_CLAIM
	$(MODEL_CHECK) safety counterexample -DMAIN_UNFENCED_START
	$(MODEL_CHECK) safety counterexample -DMAIN_BEGIN_UNCHECKED
	$(MODEL_CHECK) safety counterexample -DMAIN_PENDING_ONLY
	$(MODEL_CHECK) safety counterexample -DNODES=3 -DPAUSES=0 -DTRIES=1 -DMAIN_STEALS_SUSPENDED
	$(MODEL_CHECK) safety clean -DMANUAL
	$(MODEL_CHECK) safety clean -DMANUAL -DNODES=3 -DPAUSES=0 -DTRIES=1
	$(MODEL_CHECK) safety counterexample -DMANUAL -DBROKEN_PLAIN_UNPARK

clean:
	rm -rf $(VENV) var build *.egg-info
