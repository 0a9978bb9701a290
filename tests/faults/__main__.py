"""``make faults``: the power-cut campaign (sync failures among its lives), the disk-fault scenarios
(a full disk, I/O errors on write and on sync, under the real server), the planted bugs they must
catch, then PostgreSQL going away under two nodes; each prints its progress, and the run ends with one
summary line of counts.

``python -m tests.faults [--cuts 500] [--pg-kills 200] [--pg-restarts 50] [--seed 1]``; exits 1 when
anything acknowledged was lost, an invariant failed, or the planted bug was not caught.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys

from tests.backends import server_url
from tests.faults import pg_faults, power_cuts
from tests.faults.rig import REPO

MUTANTS = ("acknowledged-before-synced", "synced-again-without-rewriting")
SCENARIOS = "tests/faults/test_store_faults.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuts", type=int, default=500, help="power cuts (default 500)")
    parser.add_argument("--pg-kills", type=int, default=200, help="times every connection is ended")
    parser.add_argument("--pg-restarts", type=int, default=50, help="restarts of the PostgreSQL server")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # unmount the rig on the way out

    cuts = power_cuts.run_campaign(cuts=args.cuts, seed=args.seed, synchronous="full", out=sys.stdout)
    scenarios = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", SCENARIOS], cwd=REPO, check=False
    )
    only = [arg for name in MUTANTS for arg in ("--only", name)]
    planted = subprocess.run([sys.executable, "-m", "tests.mutants.run", *only], cwd=REPO, check=False)
    pg = pg_faults.run_campaign(
        kills=args.pg_kills,
        restarts=args.pg_restarts,
        seed=args.seed,
        server_url=server_url(),
        out=sys.stdout,
    )
    caught = planted.returncode == 0
    print(
        f"power cuts {cuts.cuts}, acknowledged items lost {cuts.lost}, integrity failures "
        f"{cuts.integrity_failures}, invariant violations {cuts.violations}, lives with syncs refused "
        f"{cuts.sync_faults} (recoveries in process {cuts.recoveries}); disk-fault scenarios "
        f"{'passed' if scenarios.returncode == 0 else 'FAILED'}; planted bugs {len(MUTANTS)} "
        f"{'caught' if caught else 'NOT ALL CAUGHT'}; postgresql restarts {pg.restarts}, connection kills "
        f"{pg.kills}, link stalls {pg.stalls}, acknowledged items lost {pg.lost}, double runs "
        f"{pg.double_runs}, other violations {pg.violations - pg.double_runs}"
    )
    failed = cuts.lost or cuts.integrity_failures or cuts.violations or pg.lost or pg.violations
    return 1 if failed or not caught or scenarios.returncode != 0 else 0


if __name__ == "__main__":
    raise SystemExit(main())
