"""Atomic file writes: write a sibling temporary file, then rename it over the target, so a reader
never sees half a file (a leaf module shared by the artifact store and the scorecard writer)."""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one rename (POSIX `os.replace` is atomic within a
    directory)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
