"""One checklist session of the real suite, run as a user runs it (a subprocess in a fresh folder,
on the test session's smoke cache), for the meta-tests that read its verdicts (`tests/test_meta.py`,
`tests/test_meta_ladder.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def judge(folder: Path, estimators: list[str], cache: Path, timeout: int = 900):
    """Judge `estimators` in one session (one scoring worker, as CI's two cores allow beside the
    other xdist worker); return the finished process and its scorecard."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--scale=smoke",
            f"--bt-cache={cache}",
            "--bt-workers=1",
            f"--estimator={','.join(estimators)}",
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    path = folder / "scorecard.json"
    assert path.exists(), (
        f"the session wrote no scorecard (exit {res.returncode}):\n"
        f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    )
    return res, json.loads(path.read_text())


def by_cell(card: dict) -> dict:
    """{(estimator, item): record} of a scorecard."""
    return {(r["estimator"], r["item"]): r for r in card["records"]}
