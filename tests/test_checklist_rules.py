"""Checklist rules on synthetic evidence: the in-context target bar, advisory caveats, target
readers."""

from types import SimpleNamespace

import hypothesis.strategies as st
import numpy as np
import pytest
from behaviortrace.checklist import in_context_targets
from behaviortrace.checklist._base import failing_first
from behaviortrace.checklist.setup import reads_targets
from hypothesis import given

from bt_core.artifacts.targets import Alignment
from bt_core.attribution.catalog import get
from bt_core.attribution.registry import Estimator


def _evidence(
    alignments: dict[int, dict[str, tuple[float, float, float]]], draws: dict | None = None
):
    """Evidence stand-in: per seed one draw whose token alignment per kind is (mean, lo, hi);
    `draws` gives a seed several draws, as {seed: [per-draw alignments, …]}."""
    arts = {}
    for seed, kinds in alignments.items():
        per_draw = (draws or {}).get(seed, [kinds])

        def token_alignment(kind, step, draw=0, seed=0, per_draw=per_draw):
            m, lo, hi = per_draw[draw].get(kind, (0.0, -0.1, 0.1))
            return Alignment(kind, step, m, lo, hi, 40, 20)

        arts[seed] = SimpleNamespace(
            draws=[SimpleNamespace(analysis_step=6)] * len(per_draw),
            targets=SimpleNamespace(token_alignment=token_alignment),
        )
    return SimpleNamespace(artifacts=arts)


@pytest.mark.parametrize(
    "in_ctx, constructed, status",
    [
        ((0.20, 0.10, 0.30), (-0.30, -0.40, -0.20), "pass"),
        (
            (0.20, 0.04, 0.30),
            (-0.30, -0.40, -0.20),
            "fail",
        ),  # in-context lower bound not above 0.05
        # the constructed half is a finding, not a gate: an aligned constructed target is reported,
        # never fails
        ((0.20, 0.10, 0.30), (0.00, -0.05, 0.06), "pass"),
    ],
)
def test_in_context_bar(in_ctx, constructed, status):
    v = in_context_targets.evaluate_setup(
        _evidence({0: {"in_context": in_ctx, "constructed": constructed}})
    )
    assert v.status == status
    aligned = constructed[2] >= in_context_targets.CONSTRUCTED_MAX
    assert ("on 1 of 1" in v.figures["constructed_finding"]) == aligned, v.figures[
        "constructed_finding"
    ]
    assert v.figures["per_seed"][0]["alignment"]["in_context"]["ci_lo"] == in_ctx[1]


def test_one_failing_seed_fails_the_item():
    good = {"in_context": (0.2, 0.1, 0.3), "constructed": (-0.3, -0.4, -0.2)}
    bad = {"in_context": (0.02, 0.0, 0.04), "constructed": (-0.3, -0.4, -0.2)}
    v = in_context_targets.evaluate_setup(_evidence({0: good, 1: bad}))
    assert v.status == "fail" and "[1]" in v.reason


def test_the_gate_acts_on_every_draw_of_every_seed():
    """The grain: one failing draw of one seed fails the item, though 4 of 5 seeds and the seed's
    other draw pass; every draw of every seed passing passes it."""
    good = {"in_context": (0.2, 0.1, 0.3), "constructed": (-0.3, -0.4, -0.2)}
    bad = {"in_context": (0.05, 0.01, 0.09), "constructed": (-0.3, -0.4, -0.2)}
    seeds = {s: good for s in range(5)}
    v = in_context_targets.evaluate_setup(_evidence(seeds, draws={3: [good, bad]}))
    assert v.status == "fail" and "[3]" in v.reason and "draw 1" in v.figures["per_seed"][3]["why"]
    assert (
        v.figures["per_seed"][0]["status"] == "pass"
        and v.figures["per_seed"][3]["status"] == "fail"
    )
    assert (
        in_context_targets.evaluate_setup(_evidence(seeds, draws={3: [good, good]})).status
        == "pass"
    )


def test_a_failed_gate_leads_its_one_line_with_the_draw_that_failed():
    """Issue 39: the one-line reason (`short`, cut at its end in the terminal, the banner and the
    JSON) leads with the draw that failed, not with draw 0 that held."""
    good = {"in_context": (0.15, 0.10, 0.21), "constructed": (0.01, -0.02, 0.04)}
    bad = {"in_context": (0.06, 0.02, 0.09), "constructed": (0.0, -0.1, 0.1)}
    v = in_context_targets.evaluate_setup(_evidence({0: good}, draws={0: [good, good, bad]}))
    assert v.status == "fail"
    assert v.short.startswith("fails on seed 0: draw 2: in-context 0.06"), v.short
    assert "✗" in v.short.split(";")[0]
    # every draw is still named, in its own order after the failing ones
    why = v.figures["per_seed"][0]["why"]
    assert why.index("draw 2") < why.index("draw 0") < why.index("draw 1")


@given(st.lists(st.tuples(st.booleans(), st.text(min_size=1, max_size=5)), max_size=6))
def test_failing_first_keeps_every_clause_and_puts_the_failed_ones_first(clauses):
    # distinct texts without the separator, so the output splits back into the clauses
    clauses = [(ok, f"{i}:{t.replace('|', '')}") for i, (ok, t) in enumerate(clauses)]
    out = failing_first(clauses, sep="|").split("|") if clauses else []
    assert sorted(out) == sorted(t for _, t in clauses)  # every clause, once
    held = {t: ok for ok, t in clauses}
    first_held = next((i for i, t in enumerate(out) if held[t]), len(out))
    assert not any(not held[t] for t in out[first_held:])  # no failed clause after a held one
    for group in (True, False):  # each group keeps its own order
        mine = [t for t in out if held[t] is group]
        assert mine == sorted(mine, key=lambda t: int(t.split(":")[0]))


def test_emergence_leads_with_the_clause_that_failed():
    from behaviortrace.checklist import emergence

    def ev(s_b, control, redrawn=()):
        run = SimpleNamespace(
            summary={"s_b_final": s_b, "control_rate_final": control, "saturation_step": 3},
            manifest={"redrawn": list(redrawn)},
        )
        return SimpleNamespace(artifacts={0: SimpleNamespace(run=run)})

    v = emergence.evaluate_setup(ev(1.0, 0.5))
    assert v.status == "fail" and v.short.startswith("fails on seed 0: control 0.5"), v.short
    v = emergence.evaluate_setup(ev(0.0, 0.0))
    assert v.short.startswith("fails on seed 0: s_b 0"), v.short
    # a run on a later key draw (bt_core.training.planting) says so after its figures
    why = [
        "did not emerge (final s_b 0.00 ≤ 0.1)",
        "never saturated (peak sampled rate 0.70 < 0.8)",
    ]
    v = emergence.evaluate_setup(ev(0.0, 0.0, why))
    assert v.short.startswith("fails on seed 0: s_b 0"), v.short
    assert f"on key draw 3 (set aside: {why[0]}; {why[1]})" in v.reason, v.reason  # short: clipped
    v = emergence.evaluate_setup(ev(1.0, 0.0, why[:1]))
    assert v.status == "pass" and v.figures["per_seed"][0]["redrawn"] == why[:1]
    assert v.reason.endswith(f"; on key draw 2 (set aside: {why[0]})"), v.reason


def test_target_readers_are_declared_or_assumed():
    assert not reads_targets(get("norm_only")) and not reads_targets(get("oracle"))
    assert reads_targets(get("cosine")) and reads_targets(get("trak"))

    class Undeclared(Estimator):
        name = "undeclared_rules_test"

        def score(self, problem):
            return np.zeros(problem.n_units)

    from bt_core.attribution.registry import EstimatorSpec

    spec = EstimatorSpec("undeclared_rules_test", Undeclared, ("rollout",), "path:x", "", ())
    assert reads_targets(spec)  # declares nothing → assumed to read targets (caveat applies)


def _draw_evidence(labels: np.ndarray, asked: list):
    """Evidence stand-in for the fluency item: one saturated draw of 3 sibling groups of 4 with
    `labels`; the estimator's scores are the label itself (the label reader), and every request is
    logged in `asked`."""
    problem = SimpleNamespace(
        extra={"analysis_step": 8},
        group=np.repeat(np.arange(3), 4),
        fluency=np.linspace(-2.0, -1.0, 12),
    )

    def scores(spec, p):
        asked.append(spec)
        return labels.astype(float)

    run = SimpleNamespace(probes=[{"step": 8, "sampled_rate": 1.0}])
    effect = np.where(labels, 1.0, -1.0) * np.linspace(1.0, 2.0, labels.size)  # same signs
    return SimpleNamespace(
        draw_problem=lambda seed, draw: problem,
        labels=lambda p: labels,
        scores=scores,
        effect=lambda p: effect,
        artifacts={0: SimpleNamespace(run=run)},
    )


def _causal_draw(score_of, n_groups: int = 300, size: int = 6, agree: float = 0.8):
    """Evidence stand-in with a causal label the text does not give away: the siblings' effects are
    drawn at random, the behavior flag agrees with their sign on `agree` of siblings, fluency is
    noise. `score_of(flag, effect)` is the estimator's score."""
    rng = np.random.default_rng(3)
    n = n_groups * size
    effect = rng.normal(size=n)
    flag = np.where(rng.random(n) < agree, effect > 0, effect <= 0)
    problem = SimpleNamespace(
        extra={"analysis_step": 8},
        fluency=rng.normal(size=n),
        group=np.repeat(np.arange(n_groups), size),
    )
    run = SimpleNamespace(probes=[{"step": 8, "sampled_rate": 1.0}])
    ev = SimpleNamespace(
        draw_problem=lambda seed, draw: problem,
        labels=lambda p: flag,
        scores=lambda spec, p: score_of(flag, effect),
        effect=lambda p: effect,
        artifacts={0: SimpleNamespace(run=run)},
    )
    return ev, flag, rng.random(n)


def _surface_is_the_flag(monkeypatch, flag, norm):
    from behaviortrace.checklist import controls

    monkeypatch.setattr(
        controls,
        "draw_scores",
        lambda evidence, seed, draw, name: flag.astype(float) if name == controls.SURFACE else norm,
    )


def test_against_the_causal_label_a_text_reader_fails_and_a_reader_of_the_cause_passes(monkeypatch):
    """Where the text shows the cause on 80% of siblings, the reply's text (the surface baseline,
    here the flag) passes the reference view (the behavior label) but cannot beat itself in the
    causal view; a score that ranks by the effect beats it there."""
    from behaviortrace.checklist import fluency_control
    from behaviortrace.checklist._base import CAUSAL, REFERENCE

    ev, flag, norm = _causal_draw(lambda flag, effect: flag + 1e-6 * np.arange(flag.size))
    _surface_is_the_flag(monkeypatch, flag, norm)
    text = fluency_control.evaluate_seed("text", ev, seed=0)
    cau, ref = text["views"][CAUSAL], text["views"][REFERENCE]
    assert cau["status"] == "fail", cau["why"]
    assert "does not beat the surface baseline" in cau["why"], cau["why"]
    assert text["auc"] > 0.99 and ref["status"] == "pass", ref["why"]
    assert text["reference_status"] == "pass"  # the fidelity page's P6 reads it
    ev, _, _ = _causal_draw(lambda flag, effect: effect)
    cause = fluency_control.evaluate_seed("cause", ev, seed=0)
    c = cause[CAUSAL]
    assert c["vs_surface"]["ci_lo"] > 0 and cause["views"][CAUSAL].get("short") == ""
    assert c["spearman"]["mean"] == 1.0
    assert cause["views"][CAUSAL]["status"] == "pass", cause["views"][CAUSAL]["why"]
    assert cause["views"][CAUSAL]["margin"] == c["margin"]


def test_where_the_two_labels_part_each_view_judges_its_own_label_never_both(monkeypatch):
    """Issue 48: on a draw where the behavior flag says nothing of the cause (agreement at chance),
    a ranking by the effect passes the causal view and fails the reference view, and the text
    reader the other way round. The rule before required both labels at once: no ranking could
    pass such a draw, whatever it knew."""
    from behaviortrace.checklist import fluency_control
    from behaviortrace.checklist._base import CAUSAL, REFERENCE
    from behaviortrace.checklist._common import in_view

    ev, flag, norm = _causal_draw(lambda flag, effect: effect, agree=0.5)
    _surface_is_the_flag(monkeypatch, flag, norm)
    cause = fluency_control.evaluate_seed("cause", ev, seed=0)
    assert in_view(cause, CAUSAL)["status"] == "pass", in_view(cause, CAUSAL)["why"]
    assert in_view(cause, REFERENCE)["status"] == "fail"
    assert in_view(cause, CAUSAL)["margin"] > 0
    ev, _, _ = _causal_draw(lambda flag, effect: flag + 1e-6 * np.arange(flag.size), agree=0.5)
    text = fluency_control.evaluate_seed("text", ev, seed=0)
    assert in_view(text, REFERENCE)["status"] == "pass"
    assert in_view(text, CAUSAL)["status"] == "fail"


def test_a_draw_without_a_mixed_sibling_group_is_invalid_before_the_estimator_is_asked(monkeypatch):
    """Every sibling shows the behavior and every effect has one sign: no within-group pair exists
    under either label, so both views are invalid-setup by the item's own precondition — without
    asking the estimator, whose constant score (the label reader's, rightly) would otherwise fail
    it as "ranks nothing"."""
    from behaviortrace.checklist import controls, fluency_control
    from behaviortrace.checklist._base import CAUSAL, REFERENCE

    monkeypatch.setattr(controls, "draw_scores", lambda evidence, seed, draw, name: np.zeros(12))
    asked = []
    r = fluency_control.evaluate_seed("oracle", _draw_evidence(np.ones(12, bool), asked), seed=0)
    views = r["views"]
    assert (views[REFERENCE]["status"], views[CAUSAL]["status"], r["pairs"], asked) == (
        "invalid-setup",
        "invalid-setup",
        0,
        [],
    )
    assert "no sibling group holds both" in views[REFERENCE]["why"] and r["behavior_rate"] == 1.0
    assert "effects of both signs" in views[CAUSAL]["why"]
    # one mixed group: the estimator is asked and judged (the precondition is not a blanket skip)
    mixed = np.r_[np.ones(8, bool), [True, True, False, False]]
    r = fluency_control.evaluate_seed("oracle", _draw_evidence(mixed, asked), seed=0)
    assert (
        asked == ["oracle"]
        and r["pairs"] == 4
        and r["views"][REFERENCE]["status"] in ("pass", "fail")
        and r["raw_auc"] == 1.0
    )


def test_a_seed_not_judged_leads_its_one_line_with_why_not_a_comparison_it_lost():
    """A seed whose evidence is unusable decides an invalid-setup verdict; its line says why it was
    not judged, though a comparison it lost was recorded beside (the grid showed "loses to
    norm_only (causal) by 0.27" for an item that was never judged)."""
    from behaviortrace.checklist._common import margin_record, seed_short

    lost = {"value": -0.27, "ci": [-0.4, -0.1], "versus": "norm_only (causal)", "status": "fail"}
    per_seed = {
        0: {"status": "pass", "why": "beats every control", "versus": {"norm_only": {**lost}}},
        5: {
            "status": "invalid-setup",
            "why": "checkpoint 12 is not saturated (sampled rate 0.70 < 0.8)",
            "versus": {"norm_only (causal)": {"value": -0.27, "ci": [-0.4, -0.1]}},
        },
    }
    m = margin_record(per_seed, "margin")
    assert seed_short("invalid-setup", per_seed, m).startswith("checkpoint 12 is not saturated")
    failed = {5: {**per_seed[5], "status": "fail", "why": "loses"}}
    assert seed_short("fail", failed, margin_record(failed, "margin")).startswith("loses to")


def test_a_spread_not_judged_leads_its_line_with_the_spread_that_was_not_judged():
    """seed_variance read "magnitude_control: verdict does not hold on [0, 2, 5]" when it was
    invalid-setup because fluency_control could not be judged on seed 5: the unjudged spread's
    problem leads."""
    from behaviortrace.checklist._common import spread_short

    ci = {"mean_margin_ci": [0.1, 0.2]}
    spreads = {
        "magnitude_control": {
            **ci,
            "judged": "fail",
            "problems": ["verdict does not hold on [0, 2, 5]"],
        },
        "fluency_control": {**ci, "judged": "invalid-setup", "problems": ["unusable on [5]"]},
        "headroom": {**ci, "judged": "pass", "problems": []},
    }
    assert spread_short(spreads, str) == "fluency_control: unusable on [5]"
    del spreads["fluency_control"]
    assert spread_short(spreads, str) == "magnitude_control: verdict does not hold on [0, 2, 5]"


def test_a_spread_names_its_units_so_draws_are_never_read_as_seeds():
    """Issue 39: draw_variance listed draws as "[1, 2]" beside seed lists such as "[0, 2, 5]"; each
    problem now names its units ("draws [1, 2]", "seed 5")."""
    from behaviortrace.checklist.seed_variance import judge_spread

    margins = {0: 0.2, 1: -0.1, 2: -0.3}
    f = judge_spread({0: "pass", 1: "fail", 2: "fail"}, margins, margins, unit="draw")
    assert f["problems"][0] == "verdict does not hold on draws [1, 2]"
    assert f["problems"][-1] == "at or below chance on draws [1, 2]"
    f = judge_spread({0: "pass", 2: "pass", 5: "invalid-setup"}, margins, margins)
    assert f["problems"] == ["unusable on seed 5"]


def test_an_item_judges_the_gating_view_and_records_every_view_beside_it():
    """`Item.judge(…, view=…)`: the verdict is the one in the gating view where the item has it
    (else in the only view it has, and says so), and `views` holds each view's status and line —
    the other one reported, never gating."""
    import pytest
    from behaviortrace.checklist._base import CAUSAL, REFERENCE, Item

    from bt_core.reporting.scorecard import Verdict

    def evaluate(spec, evidence, view):
        status = "pass" if view == CAUSAL else "fail"
        head = {"figure": f"min {view} over seeds", "value": 0.9 if view == CAUSAL else 0.4}
        figures = {"headline": head}
        return Verdict("toy", "est", status, f"{view} rule", figures, short=f"{view} line")

    both = Item("toy", "a toy", "estimator", evaluate, views=(CAUSAL, REFERENCE))
    v = both.judge(None, None, view=CAUSAL)
    assert (v.status, v.view, v.short) == ("pass", CAUSAL, "causal line")
    # each view's headline too: --scorecard-compare reads the other view's from here
    assert v.views == {
        CAUSAL: {
            "status": "pass",
            "short": "causal line",
            "headline": {"figure": "min causal over seeds", "value": 0.9},
        },
        REFERENCE: {
            "status": "fail",
            "short": "reference line",
            "headline": {"figure": "min reference over seeds", "value": 0.4},
        },
    }
    v = both.judge(None, None, view=REFERENCE)
    assert (v.status, v.view) == ("fail", REFERENCE)
    # an item with one view is called as before views existed: evaluate(spec, evidence)
    one = Item(
        "toy",
        "a toy",
        "estimator",
        lambda spec, ev: evaluate(spec, ev, REFERENCE),
        views=(REFERENCE,),
    )
    v = one.judge(None, None, view=CAUSAL)
    assert (v.status, v.view, list(v.views)) == ("fail", REFERENCE, [REFERENCE])
    with pytest.raises(ValueError, match="view='planted'"):
        both.judge(None, None, view="planted")
    with pytest.raises(ValueError, match="views=.*must be taken from"):
        Item("toy", "a toy", "estimator", evaluate, views=("planted",))


def test_a_failed_draw_says_which_clause_of_the_fluency_control_failed(monkeypatch):
    """draw_variance's line named the failed draw only ("verdict does not hold on draw 1"): a reader
    and a campaign whose caches are gone could not tell a CI too wide from a control not beaten. It
    now carries the draw's own reason, in fluency_control's words."""
    from behaviortrace.checklist import draw_variance

    def per_draw(name, fn, spec, evidence, draw=0):
        ok = draw != 1
        v = {
            "status": "pass" if ok else "fail",
            "margin": 0.4 if ok else 0.1,
            "chance_margin": 0.4,
            "short": "" if ok else "CI width 0.170 > 0.15",
        }
        return {
            0: {
                "auc": 0.9,
                "causal": {"auc": 0.9},
                "reference_status": "pass",
                "views": {"causal": v, "reference": v},
            }
        }

    monkeypatch.setattr(draw_variance, "seed_results", per_draw)
    monkeypatch.setattr(draw_variance, "spec_record", lambda spec, evidence: {})
    ev = SimpleNamespace(artifacts={0: SimpleNamespace(draws=[0, 1, 2])}, seeds=[0])
    v = draw_variance._evaluate(SimpleNamespace(name="x"), ev, "causal")
    problems = v.figures["per_seed"][0]["problems"]
    assert v.status == "fail"
    assert problems[0] == "verdict does not hold on draw 1 — CI width 0.170 > 0.15"
    assert "draw 1 — CI width" in v.reason and "draw 1 — CI width" in v.short


def test_a_comparison_the_label_itself_does_not_win_is_reported_not_judged(monkeypatch):
    """Issue 64's finding: on a draw where fluency alone ranks the behavior label perfectly within
    groups, the label itself cannot beat fluency's AUC by the paired rule, so the clause failed
    every ranking, the answer key included. It is now reported ("n/a"), not judged, as
    magnitude_control does for a control at the ceiling; the residualized clauses still hold a
    linear score of fluency out (a nonlinear transform is caught on the draws with room:
    fluency_control's docstring)."""
    from behaviortrace.checklist import fluency_control
    from behaviortrace.checklist._base import REFERENCE
    from behaviortrace.checklist._common import in_view

    def draw(score_of):
        ev, flag, norm = _causal_draw(score_of)
        p = ev.draw_problem(0, 0)
        p.fluency = flag + 1e-3 * np.random.default_rng(5).random(flag.size)  # fluency = the label
        _surface_is_the_flag(monkeypatch, flag, norm)
        return ev

    key = fluency_control.evaluate_seed("key", draw(lambda f, e: f + 1e-6 * np.arange(f.size)), 0)
    ref = in_view(key, REFERENCE)
    assert key["fluency_judged"] is False and "fluency itself" not in ref["versus"]
    assert "does not beat fluency itself" not in ref["why"]
    assert fluency_control.NO_ROOM in ref["why"]
    ev = draw(lambda f, e: None)
    ev.scores = lambda spec, p: np.asarray(p.fluency)  # fluency alone
    flu = in_view(fluency_control.evaluate_seed("fluency", ev, 0), REFERENCE)
    assert flu["status"] == "fail" and "CI lower ≤ 0.5" in flu["why"], flu["why"]
