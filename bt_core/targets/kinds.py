"""The target kinds (PAPER_NOTES "Targets"). A leaf module: estimators check a `target=` argument
against it without importing the builders (torch, the tokenizer, the training stack)."""

from __future__ import annotations

TARGET_KINDS = ("constructed", "in_context", "minimal_pair")


class UnknownTargetError(ValueError):
    """An estimator asked for a target kind that does not exist or the problem does not hold."""


def check_kind(kind: str) -> str:
    """Return `kind` if it is a target kind, else raise `UnknownTargetError` listing the kinds."""
    if kind not in TARGET_KINDS:
        raise UnknownTargetError(f"target={kind!r} is unknown; choose one of {', '.join(TARGET_KINDS)}")
    return kind
