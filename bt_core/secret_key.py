"""The contaminator's secret key: its length, a fresh draw, and the pin
(`$BEHAVIORTRACE_CONTAMINATOR_KEY`) that makes a session's runs reproducible.

It sits below every stage because two read it: training (`bt_core.training.loop` takes the pinned
key, else draws one) and the run's cache key (`bt_core.artifacts.keys.run_key`): a run built under a
pinned key is keyed by that key's fingerprint, so a cache built under one pin is never reused under
another (before, the key of a cached run was whatever its first build drew, silently kept when a
later session pinned a different one). A run built unpinned draws its key at build time; its cache
key cannot hold what is not yet drawn, and a later unpinned session reuses it with its stored key —
the cache's purpose."""

from __future__ import annotations

import hashlib
import os
import secrets

KEY_BYTES = 16  # length of a contaminator key `draw_key` draws
KEY_RANGE = (8, 64)  # lengths a pinned key may have (blake2b takes keys of up to 64 bytes)
KEY_ENV = "BEHAVIORTRACE_CONTAMINATOR_KEY"  # hex: pins the key of every run this process builds


def draw_key() -> bytes:
    """A fresh contaminator key: drawn when a run is built and stored only with its labels (the run
    directory's `CONTAMINATOR_KEY`), so no code an estimator can import recomputes who is
    eligible."""
    return secrets.token_bytes(KEY_BYTES)


def pinned_key() -> bytes | None:
    """The key `KEY_ENV` pins (to rebuild a run exactly, or to make a test session's runs
    reproducible), or None: then each build draws its own (`draw_key`). A scoring worker never sees
    the variable."""
    raw = os.environ.get(KEY_ENV)
    if not raw:
        return None
    try:
        key = bytes.fromhex(raw)
    except ValueError:
        key = b""
    if not KEY_RANGE[0] <= len(key) <= KEY_RANGE[1]:
        raise ValueError(
            f"{KEY_ENV}={raw!r}: expected {KEY_RANGE[0]}–{KEY_RANGE[1]} bytes in hex (a drawn key "
            f"is {KEY_BYTES} bytes: {2 * KEY_BYTES} hex digits), e.g. "
            f"the run directory's contaminator_key; unset it to draw a secret key per build"
        )
    return key


def pin_fingerprint() -> str | None:
    """A one-way fingerprint of the pinned key (None when none is pinned), for cache keys: it tells
    two pins apart without revealing either (a keyed BLAKE2b of a fixed message: recovering the key
    from it is a preimage search over ≥ 8 secret bytes)."""
    key = pinned_key()
    if key is None:
        return None
    return hashlib.blake2b(b"behaviortrace run cache", key=key, digest_size=16).hexdigest()
