"""Sibling draws: G fresh responses per draw prompt sampled at the analysis checkpoint, their labels
and their sketches (`build`). They are what the draw-level items rank; `bt_core.artifacts.draws`
loads them."""
