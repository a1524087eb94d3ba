"""Optional extras (traker, dattri, captum, matplotlib): import them or explain how to install them.

    from bt_core.extras import require

    class TrakAdapter(Estimator):
        def score(self, problem):
            trak = require("trak", extra="trak")      # import inside the method, never at module top
            ...

Inside a running pytest test (``PYTEST_CURRENT_TEST`` is set) a missing extra *skips* the test with
the install command as the reason, so `pytest benchmarks --estimator=trak` without the extra reports
skips, not failures or a crash. Everywhere else it raises `MissingExtra` (an ImportError) with the
same message. `Skipped` derives from BaseException, so the `except Exception` that turns a plug-in's
bug into a failed item (bt_core/evidence.py) lets the skip through.

Adapters must call `require` lazily (in `__init__` or `score`), not at import, so that listing the
registered estimators works without any extra installed.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

DIST = "behaviortrace"


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the pip command."""


def install_command(extra: str) -> str:
    return f'pip install "{DIST}[{extra}]"'


def require(module: str, extra: str, purpose: str | None = None) -> ModuleType:
    """Import `module` (e.g. "trak") or skip/raise naming `pip install "behaviortrace[<extra>]"`."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        who = purpose or "this feature"
        msg = (f"{who} needs the optional package {module!r} ({type(e).__name__}: {e}); install it with: "
               f"{install_command(extra)}")
        if os.environ.get("PYTEST_CURRENT_TEST"):
            import pytest

            raise pytest.skip.Exception(msg, allow_module_level=True) from e
        raise MissingExtra(msg, name=module) from e
