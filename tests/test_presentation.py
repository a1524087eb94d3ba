"""Items own their presentation: a toy item declared like a real one (an `Item` with a `present`
hook) shows its rows in the terminal, the Markdown, the HTML page and a figure without a line of
reporting/ knowing it; the merge rules of `present.collect`; an older scorecard without
presentations still renders and says why its tables are missing; and reporting/ names no checklist
item. Unit tier."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from behaviortrace.checklist import ITEMS, Item

from bt_core.reporting import present as pr
from bt_core.reporting.render import render_all, render_terminal
from bt_core.reporting.scorecard import Scorecard, Verdict

REPORTING = Path(__file__).resolve().parents[1] / "bt_core" / "reporting"
SEEDS = ["0", "1"]


def _toy_evaluate(spec, evidence) -> Verdict:
    """A toy rule: the estimator's 'wobble' per seed (a figure no other item has)."""
    w = {"alpha": 0.25, "beta": 0.75}[spec]
    per = {
        int(s): {"wobble": w + i / 10, "lo": w - 0.1, "hi": w + 0.2} for i, s in enumerate(SEEDS)
    }
    return Verdict(
        "toy_item",
        spec,
        "pass" if w > 0.5 else "fail",
        f"wobble {w}",
        {"per_seed": per},
        {"name": spec, "role": "method"},
        short=f"wobble {w}",
    )


def _toy_present(rec: dict) -> dict:
    per = pr.per_seed(rec)
    seeds = list(per)
    row = [rec["estimator"], *(f"wob={pr.cell(per[s]['wobble'])}" for s in seeds)]
    dots = pr.dot_row(
        rec["estimator"],
        [{s: pr.point(per[s]["wobble"], per[s]["lo"], per[s]["hi"]) for s in seeds}],
    )
    return pr.presentation(
        pr.table(
            "toy_rows",
            "toy",
            "Toy wobble per seed",
            pr.seed_columns("wobble", seeds),
            [row],
            [["toy reference", *("ref=0.500" for _ in seeds)]],
        ),
        pr.dots(
            "toy_dots",
            "toy",
            "Toy wobble figure",
            "Each marker is one seed's wobble; dashed: 0.5.",
            [pr.axis("wobble", lines=[pr.line(0.5)])],
            [dots],
            [pr.dot_row("toy reference", [{s: pr.point(0.5) for s in seeds}], band=True)],
        ),
        sections={"toy": {"title": "Toy section", "note": "The toy item's note."}},
    )


TOY = Item("toy_item", "a toy item", "estimator", _toy_evaluate, present=_toy_present)


def test_a_new_item_shows_its_rows_everywhere_without_editing_reporting(tmp_path):
    card = Scorecard({"scale": "smoke", "seeds": [0, 1], "config_hash": "x", "git_commit": "y"})
    for est in ("alpha", "beta"):
        card.add(TOY.judge(est, None))
    out = render_all(card.write_json(tmp_path / "scorecard.json"))
    data = json.loads(out["json"].read_text())
    assert data["records"][0]["presentation"]["panels"][0]["rows"] == [
        ["alpha", "wob=0.250", "wob=0.350"]
    ]

    term = render_terminal(data)
    assert "Toy wobble per seed" in term
    assert all(x in term for x in ("wob=0.250", "wob=0.750", "wob=0.850", "ref=0.500"))
    assert term.count("toy reference") == 1  # the shared row once, after every record's own

    md = out["markdown"].read_text()
    assert (
        "## Toy section" in md and "### Toy wobble per seed" in md and "The toy item's note." in md
    )
    lines = md.splitlines()
    order = [
        next(i for i, x in enumerate(lines) if x.startswith(f"| {n} "))
        for n in ("alpha", "beta", "toy")
    ]
    assert order == sorted(order)

    html = out["html"].read_text()
    assert 'id="toy"' in html and 'id="table-toy_rows"' in html and 'id="fig-toy_dots"' in html
    assert "wob=0.850" in html and "Toy wobble figure" in html
    assert (out["figures"] / "toy_dots.png").stat().st_size > 1000
    for f in REPORTING.glob("*.py"):
        assert "toy" not in f.read_text().lower(), f


def _src(role: str, name: str, rows, shared=(), join=False, kind="table") -> dict:
    if kind == "table":
        panel = pr.table("t", "s", f"title from {name}", ["c"], rows, shared)
    else:
        panel = pr.dots(
            "t",
            "s",
            f"title from {name}",
            "",
            [{}],
            [
                pr.dot_row(r, [{"0": [1.0, None, None]}], extra=[{"0": [0.1]}], join=join)
                for r in rows
            ],
        )
    return {
        "item": "i",
        "estimator": name,
        "status": "pass",
        "reason": "",
        "presentation": pr.presentation(panel),
        "estimator_spec": {"role": role},
    }


def test_collect_orders_by_role_shares_rows_once_and_hides_panels_without_own_rows():
    data = {
        "records": [
            _src("control", "ctl", [["ctl"]], [["shared A"]]),
            _src("method", "m", [["m"]], [["shared B"]]),
            _src("validation", "v", [], [["shared C"]]),
        ]
    }
    (sec,) = pr.collect(data)
    (panel,) = sec.panels
    assert pr.table_rows(panel) == [["m"], ["ctl"], ["shared B"]]  # methods first; shared rows once
    assert panel["title"] == "title from m"
    assert pr.collect({"records": [_src("method", "m", [], [["only shared"]])]}) == []
    joined = {
        "records": [
            _src("method", "j", ["m"], join=True, kind="dots"),
            _src("method", "m", ["m"], kind="dots"),
            _src("method", "k", ["absent"], join=True, kind="dots"),
        ]
    }
    rows = pr.collect(joined)[0].panels[0]["rows"]
    assert [r["label"] for r in rows] == ["m"] and rows[0]["extra"] == [{"0": [0.1, 0.1]}]
    assert joined["records"][1]["presentation"]["panels"][0]["rows"][0]["extra"] == [
        {"0": [0.1]}
    ]  # untouched


def test_an_older_scorecard_without_presentations_renders_and_says_why(tmp_path):
    rec = {
        "item": "magnitude_control",
        "estimator": "cosine",
        "status": "fail",
        "reason": "r",
        "short": "s",
        "figures": {"per_seed": {"0": {"lift": 2.0}}},
        "estimator_spec": {"name": "cosine", "role": "method"},
        "margin": {},
    }
    data = {
        "schema": "behaviortrace.scorecard/1",
        "scale": "smoke",
        "seeds": [0],
        "created": "then",
        "records": [rec],
    }
    (tmp_path / "old.json").write_text(json.dumps(data))
    out = render_all(tmp_path / "old.json")
    for text in (render_terminal(data), out["markdown"].read_text(), out["html"].read_text()):
        assert "holds no item presentations" in text


def test_reporting_names_no_checklist_item():
    names = {i.name for i in ITEMS}
    for f in REPORTING.glob("*.py"):
        tree = ast.parse(f.read_text())
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
            ):
                hit = [n for n in names if n in node.value]
                assert not hit, f"{f.name}:{node.lineno} names item(s) {hit} in {node.value[:60]!r}"


def test_the_documented_pattern_renders(tmp_path):
    """docs/architecture.md's example hook, run as written: its table row and figure come out."""
    doc = (REPORTING.parents[1] / "docs" / "architecture.md").read_text()
    code = doc.split("```python\n", 1)[1].split("```", 1)[0]
    scope = {"Item": Item, "NAME": "my_item", "TITLE": "an example", "evaluate": _toy_evaluate}
    exec(code, scope)
    rec = {
        "item": "my_item",
        "estimator": "alpha",
        "status": "pass",
        "reason": "",
        "short": "",
        "estimator_spec": {"role": "method"},
        "margin": {},
        "figures": {"per_seed": {"0": {"x": 0.5, "lo": 0.4, "hi": 0.6}}},
    }
    rec["presentation"] = scope["ITEM"].present(rec)
    data = {"schema": "behaviortrace.scorecard/1", "seeds": [0], "created": "now", "records": [rec]}
    (tmp_path / "doc.json").write_text(json.dumps(data))
    out = render_all(tmp_path / "doc.json")
    assert "0.500 [0.400, 0.600]" in out["markdown"].read_text()
    assert (out["figures"] / "my_item.png").exists() and "## My item" in out["markdown"].read_text()
