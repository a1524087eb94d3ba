"""Rendering of a scorecard: the HTML page's DOM (every section, every verdict cell coloured by its
status, the full reason one click away), the figures, and what the terminal shows (a plug-in's own
figures, every line within 120 columns). Unit tier: a hand-made scorecard; one test renders a
scorecard judged on the smoke fixtures (train tier)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from behaviortrace.checklist import ITEMS
from behaviortrace.checklist.magnitude_control import present_controls

from bt_core.reporting import figures
from bt_core.reporting.page import STATUS_CLASS
from bt_core.reporting.render import TERMINAL_WIDTH, render_all, render_markdown, render_terminal

SEEDS = ["0", "1", "2"]
PLUGIN = "my_plugin_method_with_a_long_name"
SECTIONS = {
    "summary",
    "best",
    "verdict-grid",
    "verdicts",
    "setup-validity",
    "setup",
    "margins",
    "lift",
    "auc",
    "lds",
    "table-lds",
    "table-lift-rollout",
    "table-lift-step",
    "table-auc",
    "fig-lift",
    "fig-auc",
    "fig-lds",
    "reasons",
    "provenance",
}


def _margin(values, versus, status):
    return {
        "figure": "Δ figure over the control",
        "bar": 0.0,
        "per_seed": {
            s: {"value": v, "ci": [v - 0.1, v + 0.1], "versus": versus, "status": status}
            for s, v in zip(SEEDS, values, strict=True)
        },
    }


def _rec(
    item,
    est,
    status,
    role,
    short="",
    figures_=None,
    origin="builtin",
    margin=None,
    reads_labels=False,
):
    return {
        "item": item,
        "estimator": est,
        "status": status,
        "reason": f"{item} × {est}: seed 0: the long reason; "
        f"seed 1: more figures; seed 2: {'x' * 300}",
        "figures": figures_ or {},
        "short": short,
        "margin": margin or {},
        "estimator_spec": {
            "name": est,
            "origin": origin,
            "role": role,
            "reads_labels": reads_labels,
        },
    }


def _lifts(base: float) -> dict:
    return {
        "per_seed": {
            s: {"lift": base + i, "ceiling_lift": 8.0, "step": {"lift": base / 2 + i}}
            for i, s in enumerate(SEEDS)
        }
    }


def _data(extra_items: int = 0) -> dict:
    """A scorecard holding a failed target gate, a plug-in method, a gated built-in method, a
    control and a validation estimator, with lift, AUC and LDS figures."""
    setup = [
        _rec("emergence", "setup", "pass", "", "holds on all 3 seeds"),
        _rec(
            "in_context_targets",
            "setup",
            "fail",
            "",
            "fails on seed 1: in-context CI lower 0.042 ≤ 0.05",
        ),
    ]
    for r in setup:
        r["reason"] = r["reason"].replace("|", "")
    setup[0]["reason"] = "seed 0: |GT| 12 of 99 (0.121)"
    lds = {
        s: {
            "lds": 0.4,
            "ci": [0.1, 0.6],
            "baselines_lds": {"advantage": 0.2, "surface": 0.3},
            "baselines_ci": {"advantage": [0.0, 0.4], "surface": [0.1, 0.5]},
            "ceiling": 0.7,
        }
        for s in SEEDS
    }
    auc = {s: {"auc": 0.7, "ci_lo": 0.6, "ci_hi": 0.8} for s in SEEDS}
    gated = {"gated_by": ["in_context_targets"], "ungated_status": "fail"}
    who = [
        (PLUGIN, "fail", "method", "path:my_method.py:Mine", False, -0.43),
        ("cosine", "invalid-setup", "method", "builtin", False, -0.2),
        ("norm_only", "fail", "control", "builtin", False, -0.6),
        ("oracle", "pass", "validation", "builtin", True, 0.3),
    ]
    items = [
        "magnitude_control",
        "fluency_control",
        "counterfactual",
        *[f"extra_item_{k}" for k in range(extra_items)],
    ]
    recs = []
    for name, status, role, origin, labels, m in who:
        for item in items:
            f = {
                **(gated if status == "invalid-setup" else {}),
                **(
                    {
                        "per_seed": {
                            "magnitude_control": _lifts(3.0 + m)["per_seed"],
                            "fluency_control": auc,
                            "counterfactual": lds,
                        }.get(item, {})
                    }
                ),
            }
            short = f"loses to advantage by {-m:.2f}" if m < 0 else f"beats advantage by {m:.2f}"
            recs.append(
                _rec(
                    item,
                    name,
                    status,
                    role,
                    short,
                    f,
                    origin,
                    _margin([m, m + 0.05, m - 0.05], "advantage", status),
                    labels,
                )
            )
    base = {
        s: {
            lv: {
                "chance": 0.1,
                "ceiling": 0.8,
                "ceiling_lift": 8.0,
                **{
                    c: {"precision": 0.5, "lift": 5.0}
                    for c in ("advantage", "norm_only", "surface")
                },
            }
            for lv in ("rollout", "step")
        }
        | {"draws": {"0": {"norm_only": 0.5, "surface": 1.0}}}
        for s in SEEDS
    }
    controls = {
        "advantage": {"rollout": "A", "step": "Σ|A|"},
        "norm_only": {"rollout": "|A|·‖e‖", "step": "‖∇L_s‖"},
    }
    baselines = {"controls": controls, "per_seed": base}
    present = {i.name: i.present for i in ITEMS}
    for r in setup + recs:  # what the suite writes: each item's presentation (`Item.judge`)
        hook = present.get(r["item"])
        r["presentation"] = hook(r) if hook else {}
    return {
        "schema": "behaviortrace.scorecard/1",
        "scale": "smoke",
        "seeds": [0, 1, 2],
        "config_hash": "x",
        "git_commit": "y",
        "created": "now",
        "records": setup + recs,
        "baselines": baselines,
        "presentation": present_controls(baselines),
    }


class DOM(HTMLParser):
    """The page's ids, the verdict grid's cells (row estimator, classes, summary text, full text),
    the CSS."""

    def __init__(self):
        super().__init__()
        self.ids, self.cells, self.rows, self.captions, self.css = set(), [], {}, [], ""
        self._table, self._row, self._cell, self._in, self._style, self._cap = (
            None,
            None,
            None,
            [],
            False,
            None,
        )

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "table":
            self._table = a.get("id")
        elif tag == "tr" and self._table == "verdicts":
            self._row = a.get("data-estimator")
            if self._row:
                self.rows[self._row] = a.get("class", "")
        elif tag == "td" and self._table == "verdicts" and "cell" in a.get("class", "").split():
            self._cell = {
                "row": self._row,
                "class": a["class"].split(),
                "title": a.get("title", ""),
                "summary": "",
                "full": "",
                "details": False,
            }
            self.cells.append(self._cell)
        elif tag == "details" and self._cell is not None:
            self._cell["details"] = True
        self._in.append(tag)
        self._style |= tag == "style"
        if tag == "figcaption":
            self._cap = ""

    def handle_endtag(self, tag):
        if tag == "td":
            self._cell = None
        if tag == "table":
            self._table = None
        if tag == "style":
            self._style = False
        if tag == "figcaption" and self._cap is not None:
            self.captions.append(self._cap)
            self._cap = None
        if self._in:
            self._in.pop()

    def handle_data(self, data):
        if self._style:
            self.css += data
        if self._cap is not None:
            self._cap += data
        if self._cell is not None:
            self._cell["summary" if "summary" in self._in else "full"] += data


def _dom(text: str) -> DOM:
    d = DOM()
    d.feed(text)
    return d


def _check_dom(d: DOM, data: dict) -> None:
    assert SECTIONS <= d.ids, SECTIONS - d.ids
    recs = [r for r in data["records"] if r["estimator"] != "setup"]
    assert len(d.cells) == len(recs)  # one cell per record, none lost to the parser
    by_row = {}
    for c in d.cells:
        by_row.setdefault(c["row"], []).append(c)
    items = list(dict.fromkeys(r["item"] for r in recs))
    for r in recs:
        c = by_row[r["estimator"]][items.index(r["item"])]
        assert STATUS_CLASS[r["status"]] in c["class"], (r["item"], r["estimator"], c["class"])
        # the why on the cell, the full reason one click away
        assert c["details"] and r["short"] in c["summary"]
        assert r["reason"][-200:] in c["full"].replace("\n", "")
    assert "validation" in d.rows["oracle"].split() and "method" in d.rows[PLUGIN].split()
    colours = {
        cls: re.search(rf"td\.{cls}\{{background:([^}}]+)\}}", d.css)
        for cls in STATUS_CLASS.values()
    }
    # a distinct colour per kind: pass, fail, held back (invalid-setup), not scored (error and
    # declined share one)
    assert all(colours.values()) and len({m.group(1) for m in colours.values()}) == 4


def test_page_has_every_section_and_colours_every_cell_by_status(tmp_path):
    data = _data()
    path = tmp_path / "scorecard.json"
    path.write_text(json.dumps(data))
    out = render_all(path)
    d = _dom(out["html"].read_text())
    _check_dom(d, data)
    assert "oracle" in d.rows and "validation only" in out["html"].read_text()
    # the summary card counts in words that agree with the number (not "1 methods")
    assert "2 methods, 1 built-in control, 1 validation estimator." in out["html"].read_text()
    # how to read it
    assert len(d.captions) >= 6 and all(len(c.split()) >= 25 for c in d.captions), d.captions
    names = {p.name for p in out["figures"].iterdir()}
    assert {"lift.png", "auc.png", "lds.png"} <= names
    assert "ladder.png" not in names  # no rung of the ladder was judged
    assert {
        f"margin_{i}.png" for i in ("magnitude_control", "fluency_control", "counterfactual")
    } <= names


def _ladder_presentation(rec: dict) -> dict:
    """What the counterfactual item writes for the ladder: its `ladder` panel, shares per seed."""
    from bt_core.reporting import present as pr

    shares = {s: f.get("share") for s, f in rec["figures"]["per_seed"].items()}
    panel = pr.ladder("ladder", "lds", "From cheap to exact", "how to read it " * 8, rec, shares)
    return pr.presentation(panel)


def _with_rungs(data: dict, rungs: dict) -> dict:
    """`data` plus counterfactual records of the ladder's rungs {name: (params, share per seed,
    seconds per seed)} and their scoring times."""
    data["scoring_time"] = {}
    for name, (params, shares, secs) in rungs.items():
        per = {
            s: {"lds": 0.9 * v, "ci": [0.0, 1.0], "share": v}
            for s, v in zip(SEEDS, shares, strict=True)
        }
        rec = _rec("counterfactual", name, "pass", "method", figures_={"per_seed": per})
        rec["estimator_spec"]["params"] = params
        rec["presentation"] = _ladder_presentation(rec)
        data["records"].append(rec)
        stream = {
            f"seed{s}/stream/rollout": {"seed": int(s), "seconds": t}
            for s, t in zip(SEEDS, secs, strict=True)
        }
        draws = {f"seed{s}/draw0/rollout": {"seed": int(s), "seconds": 99.0} for s in SEEDS}
        data["scoring_time"][name] = {"per_problem": {**stream, **draws}}
    return data


def test_the_ladder_figure_shows_when_two_rungs_were_judged(tmp_path):
    """Issue 62: the page draws the ladder (cost against share of the ideal, LDS section) once two
    or more rungs were judged, rungs in ladder order, the stream problem's seconds as the cost."""
    from bt_core.reporting.ladder import rows_of

    one = _with_rungs(_data(), {"metagrad": ({}, [1.0, 1.0, 1.0], [2.0, 2.1, 2.2])})
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "scorecard.json").write_text(json.dumps(one))
    out = render_all(tmp_path / "one" / "scorecard.json")
    assert not (out["figures"] / "ladder.png").exists()

    rungs = {
        "metagrad": ({}, [1.0, 1.0, 1.0], [2.0, 2.1, 2.2]),
        "ladder_r4": ({"rung": "R4", "k": 2}, [0.99, 0.97, 0.98], [1.5, 1.6, 1.7]),
        "ladder_r0c": ({"rung": "R0c"}, [0.7, 0.6, float("nan")], [0.3, 0.3, 0.3]),
    }
    data = _with_rungs(json.loads(json.dumps(_data())), rungs)
    plug = next(
        r for r in data["records"] if r["estimator"] == PLUGIN and r["item"] == "counterfactual"
    )
    for f in plug["figures"]["per_seed"].values():
        f["share"] = 0.3
    plug["presentation"] = _ladder_presentation(plug)
    # a plug-in with a `rung` setting of its own is no rung of the built-in ladder
    mimic = json.loads(json.dumps(plug))
    mimic["estimator"] = mimic["estimator_spec"]["name"] = "my_rung"
    mimic["estimator_spec"]["params"] = {"rung": "R1"}
    mimic["presentation"] = _ladder_presentation(mimic)
    data["records"].append(mimic)
    rows = rows_of(data)
    assert [r["label"] for r in rows if r["rung"]] == ["R0c", "R4(2)", "R5 (metagrad)"]
    # the others with a share of the ideal, in grey: here the plug-in alone carries one
    assert sorted(r["label"] for r in rows if not r["rung"]) == sorted([PLUGIN, "my_rung"])
    r4 = next(r for r in rows if r["label"] == "R4(2)")
    assert r4["points"] == {"0": (1.5, 0.99), "1": (1.6, 0.97), "2": (1.7, 0.98)}
    r0c = next(r for r in rows if r["label"] == "R0c")
    assert set(r0c["points"]) == {"0", "1"}  # a NaN share is no point
    path = tmp_path / "scorecard.json"
    path.write_text(json.dumps(data))
    out = render_all(path)
    html = out["html"].read_text()
    d = _dom(html)
    assert "fig-ladder" in d.ids
    lds = html.index('id="lds"')
    assert lds < html.index('id="fig-ladder"') < html.index('id="reasons"')
    # no cost recorded (an older scorecard's scoring_time): no log axis to draw on, no figure
    del data["scoring_time"]
    (tmp_path / "untimed").mkdir()
    (tmp_path / "untimed" / "scorecard.json").write_text(json.dumps(data))
    assert not (
        render_all(tmp_path / "untimed" / "scorecard.json")["figures"] / "ladder.png"
    ).exists()


def test_the_counterfactual_item_writes_the_ladders_shares():
    """The ladder's data come from the item's presentation (reporting names no item): each
    estimator's share of the ideal per seed, its settings beside it, NaN shares left out."""
    from behaviortrace.checklist.counterfactual import present

    rec = next(r for r in _data()["records"] if r["item"] == "counterfactual")
    rec = json.loads(json.dumps(rec))
    rec["estimator_spec"]["params"] = {"rung": "R2"}
    for s, f in rec["figures"]["per_seed"].items():
        f["share"] = float("nan") if s == "2" else 0.5
    panels = [p for p in present(rec)["panels"] if p["kind"] == "ladder"]
    assert len(panels) == 1 and panels[0]["section"] == "lds"
    assert panels[0]["rows"] == [
        {"estimator": rec["estimator"], "params": {"rung": "R2"}, "values": {"0": 0.5, "1": 0.5}}
    ]


@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="chromium is not installed (CI installs it)"
)
def test_the_browser_builds_the_same_dom(tmp_path):
    """The page as chromium parses it: no cell moved or lost (a malformed table would be
    rebuilt)."""
    data = _data()
    (tmp_path / "scorecard.json").write_text(json.dumps(data))
    page = render_all(tmp_path / "scorecard.json")["html"]
    prof = tmp_path / "profile"
    prof.mkdir()
    res = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={prof}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    _check_dom(_dom(res.stdout), data)


def test_the_lift_figure_draws_the_controls_that_decide_magnitude(tmp_path, monkeypatch):
    drawn = {}
    monkeypatch.setattr(
        figures, "save", lambda fig, path: drawn.setdefault(path.name, fig) and path
    )
    f = next(f for f in figures.render(_data(), tmp_path) if f.path.name == "lift.png")
    assert f.section == "lift"
    labels = [t.get_text() for t in drawn["lift.png"].axes[0].get_xticklabels()]
    assert {"advantage (control)", "norm_only (control)", "surface baseline"} <= set(labels)
    assert PLUGIN[:15] in " ".join(labels)
    # norm_only judged as an estimator is the control itself: drawn once, in the band (issue 39)
    assert sum("norm_only" in label for label in labels) == 1, labels
    # labels that would collide upright are turned (four "… (control)" labels collided: issue 39)
    assert all(t.get_rotation() == 35 for t in drawn["lift.png"].axes[0].get_xticklabels())


def test_terminal_shows_a_plugins_own_figures_within_120_columns():
    # 8 items: the grid is split to keep within the width
    out = render_terminal(_data(extra_items=5))
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= TERMINAL_WIDTH, max(lines, key=len)
    assert sum(line.startswith("estimator ") for line in lines) == 2  # the grid, split in two
    lift = [line for line in lines if line.startswith(PLUGIN[:20])]
    # its own rollout lift per seed
    assert any("2.570" in line and "3.570" in line for line in lift)
    assert any("loses to advantage by 0.43" in line for line in lines)  # its own why, per item
    assert any(
        line.startswith("SETUP FAILED: in_context_targets") and "8 of 32" in line for line in lines
    )
    assert "gated:FAIL" in out and "oracle [reads labels]" in out


def test_markdown_escapes_pipes_inside_cells_and_marks_label_readers():
    md = render_markdown(_data())
    row = next(line for line in md.splitlines() if line.startswith("| emergence"))
    # three cells, the evidence's "|GT|" kept inside one
    assert "\\|GT\\|" in row and row.count(" | ") == 2
    assert "oracle [reads labels — validation only]" in md
    assert "## Counterfactual LDS" in md and "loses to advantage by 0.43" in md


def test_a_scorecard_judged_on_the_smoke_fixtures_renders(smoke_evidence, tmp_path):
    """The real records (a plug-in judged beside a control and the oracle): every verdict has its
    one-line why, each margin names its deciding control, and the page and the terminal show
    them."""
    import numpy as np
    from behaviortrace.checklist import ESTIMATOR_ITEMS, SETUP_ITEMS
    from behaviortrace.checklist.controls import baselines

    from bt_core.attribution.catalog import get
    from bt_core.attribution.registry import Estimator, EstimatorSpec
    from bt_core.reporting.scorecard import Scorecard

    # a plug-in that scores the advantage: it can at best tie that control
    class Advantage(Estimator):
        name = "plugin_advantage"
        needs = ("weight",)

        def score(self, problem):
            return np.asarray(problem.weight, float)

    plugin = EstimatorSpec(
        "plugin_advantage", Advantage, ("rollout",), "path:test_render:Advantage", "", ("weight",)
    )
    ev = smoke_evidence
    base = baselines(ev)
    card = Scorecard(
        {
            "scale": "smoke",
            "seeds": ev.seeds,
            "gate_view": "causal",
            "baselines": base,
            "presentation": present_controls(base),
        }
    )
    for item in SETUP_ITEMS:
        card.add(item.judge(ev))
    for spec in (plugin, get("norm_only"), get("oracle")):
        for item in ESTIMATOR_ITEMS:
            card.add(item.judge(spec, ev))
    out = render_all(card.write_json(tmp_path / "scorecard.json"))
    data = json.loads(out["json"].read_text())
    recs = [r for r in data["records"] if r["estimator"] != "setup"]
    assert all(r["short"] for r in data["records"])
    for r in recs:
        for m in (r["margin"] or {}).get("per_seed", {}).values():
            assert m["versus"] is None or isinstance(m["versus"], str)
    d = _dom(out["html"].read_text())
    assert len(d.cells) == len(recs)
    assert {"summary", "verdicts", "margins", "lds", "lift", "auc"} <= d.ids
    for c in d.cells:
        assert len(set(c["class"]) & set(STATUS_CLASS.values())) == 1
    text = render_terminal(data)
    assert max(len(line) for line in text.splitlines()) <= TERMINAL_WIDTH
    # its own lift row
    assert any(line.startswith("plugin_advantage") for line in text.splitlines())
    assert "plugin_advantage (method)" in text  # and its why per item
    # issue 48: each verdict names its view, and the other view's status is shown beside it
    for r in recs:
        item = next(i for i in ESTIMATOR_ITEMS if i.name == r["item"])
        assert r["view"] == item.view_for("causal") and set(r["views"]) == set(item.views)
        assert r["views"][r["view"]]["status"] == r["status"]
        # and its headline, which --scorecard-compare reads in the view that does not gate
        assert r["views"][r["view"]]["headline"] == r["figures"].get("headline")
    assert any(
        (v.get("headline") or {}).get("value") is not None
        for r in recs
        for w, v in r["views"].items()
        if w != r["view"]
    )
    assert "Gating view: causal" in " ".join(text.split())
    # every estimator item has a causal form (headroom's since this stop): each heading names the
    # gating view, none the other
    assert "counterfactual" in text and "(causal)" in text and "(reference)" not in text
    others = [(w, v["status"]) for r in recs for w, v in r["views"].items() if w != r["view"]]
    assert others and all(f"{w[:3]} {st.upper()}" in text for w, st in others)
    md = out["markdown"].read_text()
    assert "magnitude_control (causal)" in md and "· reference view: " in md
    assert "causal view</span></th>" in out["html"].read_text()


def test_a_session_of_controls_alone_says_no_method_was_run(tmp_path):
    """Not "0 of the 0 methods": the summary and the page say that no method was run."""
    from bt_core.reporting import summary

    data = _data()
    data["records"] = [
        r for r in data["records"] if r["estimator"] == "setup" or summary.role(r) != "method"
    ]
    assert summary.judged_counts(data)["method"] == 0
    path = tmp_path / "scorecard.json"
    path.write_text(json.dumps(data))
    html = render_all(path)["html"].read_text()
    text = " ".join(summary.headline(data))
    for out in (html, text):
        assert "no method was run" in out and "of the 0 methods" not in out
    full = _data()
    assert "of the 2 methods" in " ".join(summary.headline(full))


def test_badge_names_what_kind_of_outside_code_an_estimator_is():
    """A library the suite wraps is an adapter, named with its library; a user's entry point or
    module path is a plug-in; a built-in gets no origin badge (the page once called adapters
    plug-ins)."""
    from bt_core.reporting.page import _badges

    def badge(origin):
        return _badges({"estimator_spec": {"origin": origin}, "role": "method"})

    assert ">adapter · dattri-llm<" in badge("adapter:dattri-llm")
    assert "plug-in" not in badge("adapter:kronfluence")
    assert ">plug-in · my-dist<" in badge("plugin:my-dist")
    assert ">plug-in<" in badge("path:my_method.py:Mine")
    assert badge("builtin") == ""
