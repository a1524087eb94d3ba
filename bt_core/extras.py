"""Optional extras (traker, dattri, captum, matplotlib): import them or explain how to install them.

    from bt_core.extras import require

    class TrakAdapter(Estimator):
        def score(self, problem):
            trak = require("trak", extra="trak")  # import inside the method, never at module top
            ...

A missing extra raises `MissingExtra` (an ImportError) whose message names the pip command. Library
code never decides what a test does with it: the checklist suite (`behaviortrace.benchmarks`)
reports an item whose estimator lacks its extra as *skipped* with that command, and the project's
own tests skip with `pytest.importorskip`.

Adapters must call `require` lazily (in `__init__` or `score`), not at import, so that listing the
registered estimators works without any extra installed.
"""

from __future__ import annotations

import importlib
from types import ModuleType

DIST = "behaviortrace"


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the pip command."""


def install_command(extra: str) -> str:
    return f'pip install "{DIST}[{extra}]"'


def require(module: str, extra: str, purpose: str | None = None) -> ModuleType:
    """Import `module` (e.g. "trak") or raise `MissingExtra` naming `pip install
    "behaviortrace[<extra>]"`."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        who = purpose or "this feature"
        msg = (
            f"{who} needs the optional package {module!r} ({type(e).__name__}: {e}); install it "
            f"with: {install_command(extra)}"
        )
        raise MissingExtra(msg, name=module) from e
