"""The checklist: one module per item, each holding its rule, thresholds, rationale and the
reference pitfall it guards against, and ending with its `Item`
(`behaviortrace.checklist._base.Item`).

* Setup-validity items (`kind="setup"`, estimator "setup"): run once per fixture set and shown
  first.
  When a gating one fails, every estimator item reports invalid-setup; `in_context_targets` gates
  only the estimators that read targets (`behaviortrace.checklist.setup`).
* Estimator items (`kind="estimator"`): parametrized over estimators, each asking its own question
  with its own comparison (issue 61; docs/items.md, "Six questions"), the target-free controls and
  the surface baseline of `behaviortrace.checklist.controls` shown beside every one.

The tuples below fix the display order (scorecard, terminal table, test ids). Thresholds are module
constants of each item and are never tuned to make a built-in method pass.
"""

from . import (
    counterfactual,
    draw_variance,
    fluency_control,
    headroom,
    magnitude_control,
    seed_variance,
)
from ._base import Item
from .setup import ADVISORY_SETUP_ITEMS, GATING_SETUP_ITEMS, SETUP_ITEMS, TARGET_SETUP_ITEMS

ESTIMATOR_ITEMS: tuple[Item, ...] = (
    magnitude_control.ITEM,
    fluency_control.ITEM,
    headroom.ITEM,
    counterfactual.ITEM,
    seed_variance.ITEM,
    draw_variance.ITEM,
)
ITEMS: tuple[Item, ...] = SETUP_ITEMS + ESTIMATOR_ITEMS

# The version of the items' rules, written into every scorecard (`rules`): a verdict judged under
# other rules is not comparable, and --scorecard-compare refuses its baseline
# (`bt_core.reporting.compare`). 2: issue 61, one question per item (counterfactual no longer makes
# magnitude_control's paired comparison with the controls). A scorecard without it is of rules 1.
RULES = 2

__all__ = [
    "ADVISORY_SETUP_ITEMS",
    "ESTIMATOR_ITEMS",
    "GATING_SETUP_ITEMS",
    "ITEMS",
    "RULES",
    "SETUP_ITEMS",
    "TARGET_SETUP_ITEMS",
    "Item",
]
