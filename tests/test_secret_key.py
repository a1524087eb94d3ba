"""The contaminator key's pin enters the run's cache key: a cache built under one pinned key is
never reused under another (before, a cached run kept whatever key its first build drew, whatever a
later session pinned)."""

from bt_core.artifacts.keys import run_key, sketch_key
from bt_core.config import get_scale
from bt_core.secret_key import KEY_ENV, pin_fingerprint


def test_the_run_key_and_everything_downstream_follow_the_pin(monkeypatch):
    scale = get_scale("smoke")
    cfg = scale.run.with_seed(0)
    monkeypatch.setenv(KEY_ENV, (b"a" * 16).hex())
    a, sa = run_key(cfg), sketch_key(cfg, scale.sketch)
    assert run_key(cfg) == a  # the same pin gives the same key
    monkeypatch.setenv(KEY_ENV, (b"b" * 16).hex())
    assert run_key(cfg) != a and sketch_key(cfg, scale.sketch) != sa
    monkeypatch.delenv(KEY_ENV)
    assert pin_fingerprint() is None and run_key(cfg) not in (a, sa)


def test_the_fingerprint_does_not_show_the_key(monkeypatch):
    key = bytes(range(16))
    monkeypatch.setenv(KEY_ENV, key.hex())
    fp = pin_fingerprint()
    assert fp is not None and len(fp) == 32 and key.hex() not in fp
    monkeypatch.setenv(KEY_ENV, key[:8].hex())  # another pin, another fingerprint
    assert pin_fingerprint() != fp
