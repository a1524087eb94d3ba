"""The checklist: one module per item, each holding its rule, thresholds, rationale and the reference
pitfall it guards against. An item is a function `evaluate(spec, evidence) -> Verdict`.

Thresholds are module constants of each item and are never tuned to make a built-in method pass.
"""

from checklist import fluency_control, magnitude_control

ESTIMATOR_ITEMS = (magnitude_control, fluency_control)
