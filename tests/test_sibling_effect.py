"""The draws' causal label (`bt_core.counterfactual.sibling_effect`): each sibling's one-step effect
is the derivative it claims to be (central finite differences along the step the replay engine's
own one-step update takes), it has the sign of the exact finite change, the artifact holds it, and
no estimator can reach it. Uses the session's smoke artifacts (marked `train` by conftest)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

N_CHECKED = 24  # siblings checked (the issue asks for ≥ 20, as for metagrad)
EPS = 1e-2  # the step is scaled by 1 ± EPS around the empty step (the step itself is ~lr-sized)
MAX_REL_ERR = 1e-3  # metagrad's bar


def _rows(draw, n: int) -> np.ndarray:
    """`n` siblings spread over the draw's groups (fixed draw)."""
    groups = np.asarray(draw.rollouts.group)
    rng = np.random.default_rng(0)
    firsts = [rng.choice(np.flatnonzero(groups == g)) for g in np.unique(groups)]
    return np.sort(rng.permutation(firsts)[:n])


def _one_step(run, step: int, table, row: int | None, coef: float):
    """θ' after the replay engine's update on sibling `row` alone (A = coef: the loss −coef·ℓ,
    torch's clip_grad_norm_ and AdamW.step), or on no row at all (None): flat float64 parameters."""
    from bt_core.counterfactual.replay import partial_update
    from bt_core.training.model import cast_model

    model = cast_model(run.model_at(step), torch.float64)
    opt = run.optimizer_at(step, model)
    part = table.select(np.array([0 if row is None else row]))
    live = np.array([row is not None])
    clip = run.config.grpo.grad_clip
    partial_update(model, opt, part, live, np.array([coef], np.float64), run.codec, clip)
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach(), model


def test_the_effect_matches_central_finite_differences_along_the_engine_s_step(smoke_artifacts):
    """effect_i = ⟨∇f(θ'_∅), θ'_∅ − θ'_i⟩ equals −(f(θ'_∅ + εΔ) − f(θ'_∅ − εΔ)) / 2ε with
    Δ = θ'_i − θ'_∅, both steps taken by `partial_update` (the engine the replays use); and it has
    the sign of the exact finite change f(θ'_∅) − f(θ'_i) on every sibling checked."""
    from bt_core.config import get_scale
    from bt_core.counterfactual.sibling_effect import run_coefficient
    from bt_core.training.behavior import behavior_nll, measure_examples
    from bt_core.training.model import torch_threads

    a = smoke_artifacts[0]
    run, draw = a.run, a.draws[0]
    g = run.config.grpo
    coef = run_coefficient(g.group_size, g.prompts_per_step)
    ex = measure_examples(run.task, run.codec, get_scale("smoke").counterfactual)
    rows = _rows(draw, N_CHECKED)
    assert rows.size >= 20
    fd, exact = [], []
    with torch_threads(1):
        empty, model = _one_step(run, draw.analysis_step, draw.rollouts, None, coef)
        f_empty = behavior_nll(model, ex, run.codec.pad_id)

        def f_at(flat) -> float:
            torch.nn.utils.vector_to_parameters(flat, list(model.parameters()))
            return behavior_nll(model, ex, run.codec.pad_id)

        for i in rows:
            theta_i, _ = _one_step(run, draw.analysis_step, draw.rollouts, int(i), coef)
            delta = theta_i - empty
            fd.append(-(f_at(empty + EPS * delta) - f_at(empty - EPS * delta)) / (2 * EPS))
            exact.append(f_empty - f_at(theta_i))
    fd, exact, label = np.array(fd), np.array(exact), np.asarray(draw.effect)[rows]
    rel = np.abs(label - fd) / np.maximum(np.abs(fd), np.abs(label))
    assert np.all(np.abs(fd) > 1e-9), fd  # a real change, not rounding noise, is compared
    same = np.mean(np.sign(label) == np.sign(exact))
    print(
        f"sibling effect vs central FD on {rows.size} siblings: worst relative error "
        f"{rel.max():.3g}, median {np.median(rel):.3g}; sign = exact change's on {same:.0%}"
    )
    assert rel.max() <= MAX_REL_ERR, (rows[rel > MAX_REL_ERR], rel[rel > MAX_REL_ERR])
    assert np.array_equal(np.sign(label), np.sign(exact)), (label, exact)


def test_every_draw_holds_its_label_and_its_audit(smoke_artifacts):
    """effect.npy has one finite float64 per sibling, read-only; draw.json carries the exact-change
    audit, whose signs agree with the label on every sibling with a non-negligible effect (the
    module's claim about the linearization). A sibling whose effect is below 1% of the draw's median
    |effect| may flip: its first-order label is then smaller than the second-order term the
    linearization leaves out. Builds of the test key on other machines (other float rounding)
    differ there: one sibling of one draw flipped, at 0.06% of its draw's median, so asserting
    agreement on all 32 rows would assert the machine, not the label (CI's failure at 818a4bf)."""
    from bt_core.artifacts.readonly import is_readonly
    from bt_core.counterfactual.sibling_effect import AUDIT

    for a in smoke_artifacts.values():
        for d in a.draws:
            e = d.effect
            assert e.dtype == np.float64 and e.shape == (len(d.rollouts),) and np.isfinite(e).all()
            assert is_readonly(e) and 0.0 < float(np.mean(e > 0)) < 1.0
            audit = d.info["effect"]["audit"]
            head, exact = e[: audit["rows"]], np.asarray(audit["exact"])
            assert audit["rows"] == min(AUDIT, e.size) and exact.shape == head.shape, audit
            agree = np.sign(exact) == np.sign(head)
            assert audit["sign_agreement"] == pytest.approx(float(np.mean(agree)))
            counted = np.abs(head) >= 0.01 * np.median(np.abs(e))
            assert counted.sum() >= 0.9 * head.size, (counted.sum(), head.size)
            assert agree[counted].all(), (head[counted & ~agree], exact[counted & ~agree])


def test_no_estimator_is_handed_the_causal_label(smoke_evidence):
    """The label stays with the evidence, like the behavior flag: no problem field, no view column
    and no labelled variant carries it; the evidence hands it out read-only, and only for draws."""
    from bt_core.artifacts.readonly import is_readonly
    from bt_core.artifacts.rollouts import VIEW_FIELDS
    from bt_core.attribution.problem import problem_fields

    ev = smoke_evidence
    p = ev.draw_problem(0, 0)
    effect = ev.effect(p)
    assert is_readonly(effect)
    assert not {"effect", "causal", "effects"} & (set(problem_fields()) | set(VIEW_FIELDS))
    labelled = p.with_labels(ev.truth(p), ev.labels(p))
    for obj in (p, labelled, p.handout(None), labelled.handout(None)):
        for name in problem_fields():
            value = getattr(obj, name, None)
            if isinstance(value, np.ndarray) and value.shape == effect.shape:
                assert not np.array_equal(value, effect), name
    with pytest.raises(KeyError, match="only draw problems"):
        ev.effect(ev.stream_problem(0))


def test_the_one_step_formula_refuses_float32():
    from bt_core.counterfactual.sibling_effect import run_coefficient, sibling_effects

    model = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match="float64"):
        sibling_effects(model, torch.optim.AdamW(model.parameters()), [], None, None, 1.0, 1.0)
    with pytest.raises(ValueError, match="group_size=0"):
        run_coefficient(0, 8)
