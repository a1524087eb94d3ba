"""The checklist: one module per item, each holding its rule, thresholds, rationale and the reference
pitfall it guards against.

* Setup-validity items (`evaluate_setup(evidence) -> Verdict`, estimator "setup"): run once per fixture
  set and shown first. When a gating one fails, every estimator item reports invalid-setup; an advisory
  one's failure is quoted as a caveat in the verdicts of estimators that read targets.
* Estimator items (`evaluate(spec, evidence) -> Verdict`), parametrized over estimators.

Thresholds are module constants of each item and are never tuned to make a built-in method pass.
"""

from checklist import emergence, gt_minority, in_context_targets, sketch_coverage  # noqa: I001  (setup first)
from checklist import fluency_control, headroom, magnitude_control
from checklist import draw_variance, seed_variance

SETUP_ITEMS = (emergence, sketch_coverage, in_context_targets, gt_minority)
# A failing gating item makes every estimator item invalid-setup (the evidence itself is broken). An
# advisory item's failure is attached to the verdicts of estimators that read targets as a caveat: the
# token-level P4 bar is not met robustly by our tiny models (see checklist/in_context_targets.py), and
# gating on it would leave no verdict at all, controls included.
GATING_SETUP_ITEMS = (emergence, sketch_coverage, gt_minority)
ADVISORY_SETUP_ITEMS = (in_context_targets,)
ESTIMATOR_ITEMS = (magnitude_control, fluency_control, headroom, seed_variance, draw_variance)
