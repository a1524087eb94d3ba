"""The layout of bt_core: one subpackage per stage, imports pointing one way, no import cycle.

    pytest tests/test_layout.py -q  # shows there is no import cycle and no import pointing back up

Every `import` and `from … import` of bt_core, at module level or inside a function (a lazy import
is still a dependency), is read from the source with `ast`; the stages must only import stages below
them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "bt_core"

# Lower number = lower layer. A module may import its own layer or any lower one, never a higher
# one.
LAYERS = {
    "bt_core.config": 0,
    "bt_core.secret_key": 0,  # the contaminator key: read by training and by the run cache key
    "bt_core.faults": 0,
    "bt_core.atomic": 0,
    "bt_core.metrics": 0,
    "bt_core.extras": 0,
    "bt_core.progress": 0,
    "bt_core.reporting": 1,  # reads only the scorecard JSON
    "bt_core.artifacts": 1,  # loader types and the store: numpy, json, filelock
    "bt_core.training": 2,
    "bt_core.gradients": 3,
    "bt_core.counterfactual": 3,  # the exact metagradient: replays the training stage's updates
    "bt_core.targets": 4,
    "bt_core.draws": 4,  # sibling draws: sample at a checkpoint (training), sketch them (gradients)
    "bt_core.attribution": 5,
    "bt_core.pipeline": 6,
    "bt_core.cli": 7,
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """bt_core modules imported by `path` (absolute names; `from pkg import mod` counts as
    pkg.mod)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("bt_core")}
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("bt_core")
            and node.level == 0
        ):
            out |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
    return out


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        deps = set()
        for imp in _imports(path):
            while imp and imp not in modules:  # `from pkg import name` where name is not a module
                imp = imp.rpartition(".")[0]
            # a package's __init__ is its parent
            if imp and imp != name and not name.startswith(imp + "."):
                deps.add(imp)
        graph[name] = deps
    return graph


def _layer(module: str) -> int:
    for prefix, layer in sorted(LAYERS.items(), key=lambda kv: -len(kv[0])):
        if module == prefix or module.startswith(prefix + "."):
            return layer
    raise AssertionError(f"{module} belongs to no layer of tests/test_layout.py: add it to LAYERS")


def test_no_import_cycle():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                pytest.fail("import cycle: " + " → ".join(stack[stack.index(d) :] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_imports_point_down_the_stages():
    back = [
        f"{m} → {d}"
        for m, deps in _graph().items()
        for d in deps
        if _layer(d) > _layer(m) and not (m == "bt_core" or d == "bt_core")
    ]
    assert not back, "imports pointing back up the stages:\n" + "\n".join(sorted(back))


def test_reporting_reads_only_the_scorecard():
    deps = {d for m, ds in _graph().items() if m.startswith("bt_core.reporting") for d in ds}
    assert {d for d in deps if not d.startswith("bt_core.reporting")} <= {"bt_core.atomic"}


def test_importing_attribution_loads_no_training_stack():
    code = (
        "import sys, bt_core.attribution, bt_core.artifacts.seed, bt_core.attribution.evidence; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', "
        "'trl') or m.startswith(('bt_core.training', 'bt_core.gradients', 'bt_core.targets'))); "
        "print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


def test_pyproject_installs_every_package():
    """The explicit package list of pyproject.toml holds every package of the tree (a new subpackage
    that is not listed would be missing from the wheel)."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    tree = {_module_name(p.parent / "__init__.py") for p in PKG.rglob("__init__.py")}
    mapped = {f"behaviortrace.{d}" for d in ("fixtures", "checklist", "benchmarks")}
    assert listed == tree | mapped
    assert cfg["package-dir"] == {
        f"behaviortrace.{d}": d for d in ("benchmarks", "checklist", "fixtures")
    }
