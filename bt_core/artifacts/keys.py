"""Cache keys of every artifact: each key hashes its own config and the key of what it is built from, so a
change anywhere upstream rebuilds everything downstream and nothing from another config is reused."""

from __future__ import annotations

from bt_core.config import DrawConfig, RunConfig, SketchConfig, config_hash


def run_key(cfg: RunConfig) -> str:
    return config_hash(cfg)


def sketch_key(cfg: RunConfig, sketch: SketchConfig) -> str:
    return config_hash(run_key(cfg), sketch)


def seed_keys(run_cfg: RunConfig, sketch: SketchConfig, draws: DrawConfig) -> dict[str, tuple[str, str]]:
    """(kind, key) of every artifact one seed needs, without building anything."""
    rk = run_key(run_cfg)
    keys = {"run": ("runs", rk), "sketches": ("sketches", sketch_key(run_cfg, sketch)),
            "targets": ("targets", config_hash(rk, sketch, "targets", draws.n_draws))}  # one target set per draw
    for i in range(draws.n_draws):
        keys[f"draw{i}"] = ("draws", config_hash(rk, sketch, draws, i))
    return keys
