"""The claim protocol's Spin model (design/model/): it verifies clean, and it can fail.

Each broken variant removes one rule the code relies on (the epoch check on writes; the resume's
status check made with its count), and each ``MAIN_*`` variant is what the code did before a fix
the model found; Spin must report a
counterexample for every one of them, so the properties are shown to be able to fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

VERIFY = Path(__file__).resolve().parents[2] / "design" / "model" / "verify.sh"


MISSING = [tool for tool in ("spin", "gcc") if shutil.which(tool) is None]
if MISSING and os.environ.get("CI") != "true":
    pytest.skip(f"{' and '.join(MISSING)} not installed (apt-get install spin)", allow_module_level=True)


def _verify(mode: str, expect: str, *switches: str) -> str:
    if MISSING:  # under CI, where .ci/run installs spin
        pytest.fail(f"{' and '.join(MISSING)} missing under CI")
    done = subprocess.run(
        ["bash", str(VERIFY), mode, expect, *switches],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _errors(output: str) -> int:
    found = re.search(r"errors: (\d+)", output)
    assert found is not None, output
    return int(found.group(1))


THREE_NODES = ("-DNODES=3", "-DPAUSES=0", "-DTRIES=1")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["safety", "liveness"])
def test_the_model_verifies_clean(mode: str) -> None:
    """Every reachable state keeps the safety properties, and every fair run settles the turn (two
    nodes; ``make model`` also runs three)."""
    output = _verify(mode, "clean")
    assert _errors(output) == 0
    assert "states, stored" in output


@pytest.mark.slow
def test_the_model_with_the_manual_resume_policy_verifies_clean() -> None:
    """With every node on ``resume = "manual"``: no tool starts while its turn is parked, a parked turn
    is resumed only after a person asked, and no late park swallows that resume."""
    output = _verify("safety", "clean", "-DMANUAL")
    assert _errors(output) == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("switch", "violated", "bounds"),
    [
        # A zombie's late write lands: the turn is settled twice, or the tool starts under a stale epoch.
        ("BROKEN_NO_FENCE", "assertion violated", ()),
        # A decline committed between the claim and the resume is resumed.
        ("BROKEN_RESUME_AFTER_CLAIM", "assertion violated  !(intent)", ()),
        # Findings, each a behaviour of the code before its fix (design/model/README.md).
        ("MAIN_UNFENCED_START", "epoch==myep[n]", ()),
        ("MAIN_BEGIN_UNCHECKED", "assertion violated", ()),
        ("MAIN_PENDING_ONLY", "assertion violated (d_reply!=1)", ()),
        # Two live nodes take a suspended turn from each other without end: the epoch bound is hit.
        ("MAIN_STEALS_SUSPENDED", "assertion violated (epoch<7)", THREE_NODES),
        # resume = "manual": a resume that clears the flag lets a watch that read the turn before it
        # park it again, and the resume is lost.
        ("BROKEN_PLAIN_UNPARK", "assertion violated (d_resume!=1)", ("-DMANUAL",)),
    ],
)
def test_a_broken_variant_yields_a_counterexample(
    switch: str, violated: str, bounds: tuple[str, ...]
) -> None:
    """Spin finds the scenario each removed rule protects against, and writes its trail."""
    output = _verify("safety", "counterexample", *bounds, f"-D{switch}")
    assert _errors(output) >= 1
    assert violated in output
