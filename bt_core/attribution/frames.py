"""Where plug-in code raised: `FILE:LINE` for the messages that report an estimator's error.

raised_at(e)       an error raised while importing a plug-in (syntax error, import-time exception)
raised_in(e, est)  an error raised by `est.score(...)`: the innermost frame in the estimator's own
                   source (its module's folder and below), else the innermost frame
"""

from __future__ import annotations

import importlib
import inspect
import os
import traceback
from pathlib import Path

# importlib's own frames say nothing to a user
_IMPORTLIB = os.path.dirname(importlib.__file__) + os.sep


# what file names are shown relative to: the judge's working directory (None: cwd)
BASE: Path | None = None


def _short(filename: str) -> str:
    """A file name relative to the working directory (the judge's, in a scoring worker: `BASE`) when
    it lies inside it, else as given."""
    try:
        return str(Path(filename).resolve().relative_to((BASE or Path.cwd()).resolve()))
    except (ValueError, OSError):
        return filename


def _user_frames(tb, skip: tuple[str, ...] = ()) -> list[traceback.FrameSummary]:
    return [
        f
        for f in traceback.extract_tb(tb)
        if not f.filename.startswith(("<frozen", _IMPORTLIB)) and f.filename not in skip
    ]


def raised_at(e: BaseException, skip: tuple[str, ...] = ()) -> str:
    """`FILE:LINE: Type: message` of an error raised while importing code: where a syntax error is,
    or the import-time statement that raised (and, if it came from deeper, the innermost frame too).
    Frames of the files in `skip` (the importer's own) are left out."""
    if isinstance(e, SyntaxError) and e.filename:
        text = (e.text or "").strip()
        return f"{_short(e.filename)}:{e.lineno}: {type(e).__name__}: {e.msg}" + (
            f"\n    {text}" if text else ""
        )
    frames = _user_frames(e.__traceback__, skip)
    if not frames:
        return f"{type(e).__name__}: {e}"
    top, last = frames[0], frames[-1]
    deeper = f" (raised in {_short(last.filename)}:{last.lineno})" if last is not top else ""
    return f"{_short(top.filename)}:{top.lineno}: {type(e).__name__}: {e}{deeper}"


def raised_in(e: BaseException, factory: object) -> str:
    """`at FILE:LINE in FUNCTION` of the frame of the estimator's own code (the folder of the module
    defining `factory`, its class or factory function, and below) that raised `e`; called from the
    `except` around ``est.score(...)``, whose own frame is the traceback's first and is skipped."""
    frames = _user_frames(e.__traceback__)[1:]
    if not frames:
        return ""
    try:
        home = Path(inspect.getfile(factory)).resolve().parent
    except (TypeError, OSError):
        home = None
    own = [
        f for f in frames if home is not None and Path(f.filename).resolve().is_relative_to(home)
    ]
    f = (own or frames)[-1]
    return f"at {_short(f.filename)}:{f.lineno} in {f.name}"
