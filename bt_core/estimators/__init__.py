"""Built-in estimators, one family per module. Importing this package registers them."""

from bt_core.estimators import cosine, fluency, norm_only, oracle, random  # noqa: F401
