"""Estimator registry: duplicates, close-name suggestions, module:factory paths."""

import pytest

from bt_core.attribution import registry
from bt_core.attribution.catalog import get, names
from bt_core.attribution.registry import (
    DuplicateEstimatorError,
    Estimator,
    UnknownEstimatorError,
    register,
)


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

    names()  # the built-ins are registered on first use of the catalog
    with pytest.raises(DuplicateEstimatorError, match="already registered"):
        register(Other)


def test_a_reimported_module_registers_its_classes_again(scoped_registry):
    """Re-executing one definition (a module imported anew after sys.modules was restored) replaces
    its spec; another class under a taken name is still refused."""
    import importlib
    import sys

    names()
    old = scoped_registry["random"].factory
    saved = sys.modules.pop("bt_core.attribution.estimators.random")
    try:
        importlib.import_module("bt_core.attribution.estimators.random")
        assert scoped_registry["random"].factory is not old
    finally:
        sys.modules["bt_core.attribution.estimators.random"] = saved


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
    assert "weird_levels_test" not in registry.REGISTRY


def test_roles_come_from_the_estimator_classes():
    """One definition of the roles: each class's `role`, read by the registry (what the scorecard
    records and which label reader is admitted), by the checklist's spec record and by the fidelity
    script."""
    from behaviortrace.benchmarks import fidelity
    from behaviortrace.checklist._base import spec_record

    from bt_core.attribution.catalog import available

    builtin = {s.name: s for s in available() if s.origin == "builtin"}
    assert {n for n, s in builtin.items() if s.role == "control"} == {
        "norm_only",
        "random",
        "fluency",
    }
    assert [n for n, s in builtin.items() if s.builtin_validation] == ["oracle"]
    assert {"cosine", "trak", "local_buffer", "metagrad"} <= {
        n for n, s in builtin.items() if s.role == "method"
    }
    assert all(builtin[m].role == "method" for m in fidelity.METHODS)
    assert set(fidelity.BUILTINS) - set(fidelity.METHODS) - {"local_buffer"} == {
        n for n, s in builtin.items() if s.role in ("control", "validation")
    }

    class FakeEvidence:
        def settings(self, spec):
            return {}

        def scoring(self, spec):
            from bt_core.attribution.sandbox import Scoring

            return Scoring("sandboxed", "test")

    assert spec_record(builtin["norm_only"], FakeEvidence())["role"] == "control"


def test_a_plugin_cannot_declare_itself_a_control_or_validation():
    class Sly(Estimator):
        name, role, needs = "sly_control", "control", ()

    class SlyOracle(Estimator):
        name, role, needs = "sly_oracle", "validation", ("labels",)

    assert registry.spec_from(Sly, None, "plugin:sly").role == "method"
    spec = registry.spec_from(SlyOracle, None, "plugin:sly")
    # reads labels, yet refused as a gate
    assert spec.role == "validation" and not spec.builtin_validation


def test_unknown_role_rejected():
    class Odd(Estimator):
        name, role = "odd_role", "judge"

    with pytest.raises(ValueError, match="role='judge'"):
        registry.spec_from(Odd, None, "builtin")
