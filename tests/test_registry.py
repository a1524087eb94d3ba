"""Estimator registry: duplicates, close-name suggestions, module:factory paths."""

import pytest

from bt_core.attribution import registry
from bt_core.attribution.catalog import get, names
from bt_core.attribution.registry import DuplicateEstimatorError, Estimator, UnknownEstimatorError, register


def test_builtins_registered():
    assert {"random", "norm_only", "fluency", "cosine", "oracle"} <= set(names())


def test_unknown_name_suggests_and_lists():
    with pytest.raises(UnknownEstimatorError) as e:
        get("cosin")
    msg = str(e.value)
    assert "Did you mean 'cosine'" in msg and "Available:" in msg and "norm_only" in msg


def test_duplicate_name_is_an_error():
    class Other(Estimator):
        name = "random"

        def score(self, problem):
            return None

    with pytest.raises(DuplicateEstimatorError, match="already registered"):
        register(Other)


def test_module_path_resolves_unregistered_code():
    spec = get("bt_core.attribution.estimators.random:Random")
    assert spec.origin.startswith("path:") and spec.create().name == "random"
    with pytest.raises(UnknownEstimatorError, match="no module .no_such_module_xyz."):
        get("no_such_module_xyz:Thing")


def test_bad_level_rejected():
    class Weird(Estimator):
        name = "weird_levels_test"
        levels = ("token",)

    with pytest.raises(ValueError, match="unknown level"):
        register(Weird)
    assert "weird_levels_test" not in registry._REGISTRY
