"""Gradients: per-rollout gradients of the shared objective over the one parameter layout
(`layout`), the projectors (CountSketch, dense, exact), the sketch stage that embeds every training
rollout at the parameters that produced it (writing a `Sketches` artifact), the coverage check, and
throughput benches."""
