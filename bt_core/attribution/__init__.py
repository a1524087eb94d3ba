"""Attribution: what an estimator sees (`AttributionProblem`), how it is declared (`Estimator`,
`register`), which estimators exist (`catalog`), and the validated, memoized scores the checklist
reads (`evidence.Evidence`). Built-in estimators live in `estimators/`, library adapters in
`adapters/`.

Importing this package loads numpy only: no torch training stack, no transformers. Estimators that
compute their own gradients reach the training stage lazily, through `problem.model_at`.
"""

from bt_core.attribution.problem import AttributionProblem, UnknownTargetError
from bt_core.attribution.registry import Declined, Estimator, EstimatorSpec, register

__all__ = [
    "AttributionProblem",
    "Declined",
    "Estimator",
    "EstimatorSpec",
    "UnknownTargetError",
    "register",
]
