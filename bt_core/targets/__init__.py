"""Targets: the teacher-forced examples that define each target, the
builder of the `Targets` artifact (per checkpoint and seeded draw), the token-level rows, and the
generation draws (fresh sibling groups at the analysis checkpoint, written as `Draw` artifacts)."""
