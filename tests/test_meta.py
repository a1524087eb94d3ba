"""Meta-tests: the checklist discriminates. Built-ins and adversarial estimators
(`tests/adversaries.py`) with known properties get the expected verdicts at the smoke scale, in one
run of the real suite."""

import pytest
from adversaries import ADVERSARIES
from adversaries_process import PROCESS_ADVERSARIES
from behaviortrace.checklist.controls import AIMED
from judged_session import by_cell, judge
from probes import PROBES

UNDECLARED = {
    "under_declared_target_reader": "targets",
    "undeclared_grad_norm": "grad_norm",
    # adversary → the field it reads without declaring it
    "catching_target_reader": "targets",
}
ITEMS = ("magnitude_control", "fluency_control", "headroom", "seed_variance", "draw_variance")
# declares the labels without being a built-in validation estimator: refused
LABEL_READERS = ("declared_label_reader",)
# the adversaries that raise reaching for the answers (the labels among them, undeclared) or writing
# into their inputs: every item of theirs is an error (not judged; the session cannot exit 0)
RAISERS = ("label_reader", "reward_reader", "eligibility_reader", "run_digger", "writer")
# an adversary is caught by a failed item or an error (never green); a pass or invalid-setup alone
# is not caught
CAUGHT = {"fail", "error"}
# (estimator, item) → expected status where the mechanism is known; besides, every adversary must
# be caught (test_every_adversary_is_caught)
#
# The text readers: on draws (weight 1) each is the reply's behavior flag, i.e. the surface baseline
# (or, for surface_signed_norm, the flag times ‖e‖); they pass the behavior label and must fail
# against the causal one
TEXT_READERS = (
    "surface_sign_advantage",
    "surface_advantage",
    "surface_signed_norm",
    "surface_trigger_early",
)
DRAW_ITEMS = ("fluency_control", "draw_variance")
EXPECTED = {
    # the answer key of the planted GT on the stream; on draws its truth is the behavior flag, the
    # surface baseline itself, which cannot beat itself against the causal label. In the causal view
    # (the default gate) it fails every causal item: the planted labels predict the replays no
    # better than the advantage does (its LDS takes none of headroom's room above the controls)
    "oracle": {i: "fail" for i in ("magnitude_control", "headroom", *DRAW_ITEMS, "seed_variance")},
    "random": {i: "fail" for i in (*ITEMS, "counterfactual")},
    "norm_only": {"magnitude_control": "fail"},
    "fluency": {"fluency_control": "fail"},
    "norm_plus_tiny_target": {"magnitude_control": "fail"},
    "seed_sign_flip": {"seed_variance": "fail"},
    "draw_keyed": {"draw_variance": "fail"},
    "advantage_only": {"magnitude_control": "fail"},
    "advantage_both": {"magnitude_control": "fail"},
    # issue 21 req. 7: against the draws' causal label the text readers fail both draw items; the
    # first is the surface baseline itself, so it cannot beat it on the stream either
    **{e: {i: "fail" for i in DRAW_ITEMS} for e in TEXT_READERS},
    "surface_sign_advantage": {"magnitude_control": "fail", **{i: "fail" for i in DRAW_ITEMS}},
    "fluency_rank": {"fluency_control": "fail"},
    # a declared label reader is refused: every item fails, with the reason
    **{e: {i: "fail" for i in (*ITEMS, "counterfactual")} for e in LABEL_READERS},
    # no way to the answers and no writing: reaching for them raises, so every item is an error
    # (not judged, never green: the session cannot exit 0), with the reason
    **{e: {i: "error" for i in (*ITEMS, "counterfactual")} for e in RAISERS},
    # reading a field it did not declare fails every item, with the field named (even when caught)
    **{e: {i: "fail" for i in (*ITEMS, "counterfactual")} for e in UNDECLARED},
}


MODE: dict = {}  # the matrix session's scoring mode (its scorecard's meta)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory, smoke_artifacts, smoke_cache):
    """Run the real suite once in a fresh directory (a subprocess, as a user would) on the session's
    smoke cache, with the built-in controls and every adversary; return the result and the
    records."""
    ests = (
        ["metagrad", "oracle", "random", "norm_only", "fluency"]
        + [f"adversaries:{c}" for c in ADVERSARIES.values()]
        + [f"adversaries_process:{c}" for c in PROCESS_ADVERSARIES.values()]
        + [f"probes:{c}" for c in PROBES.values()]
    )
    res, card = judge(tmp_path_factory.mktemp("meta"), ests, smoke_cache)
    MODE.update(card["scoring"])
    return res, by_cell(card)


def test_setup_is_valid_at_smoke(matrix):
    """The gating setup items pass at smoke. in_context_targets (which gates only target readers)
    may go either way on the tiny model, but its status must be the one its rule gives the figures
    it reports."""
    from behaviortrace.checklist import GATING_SETUP_ITEMS
    from behaviortrace.checklist import in_context_targets as ict

    _, recs = matrix
    for item in GATING_SETUP_ITEMS:
        assert recs[("setup", item.name)]["status"] == "pass", recs[("setup", item.name)]["reason"]
    rec = recs[("setup", "in_context_targets")]
    num = lambda x: float("nan") if x is None else x  # noqa: E731  (NaN, written as null, passes nothing)
    ok = all(
        num(d["in_context"]["ci_lo"]) > ict.IN_CONTEXT_MIN
        for f in rec["figures"]["per_seed"].values()
        for d in f["per_draw"].values()
    )
    assert rec["status"] == ("pass" if ok else "fail"), rec["reason"]


def judged_status(rec: dict) -> str:
    """What the item's rule gives: the status, or — when the record is invalid-setup only because
    the targets it reads are not vouched for (in_context_targets failed on the tiny model) — the
    rule's own status kept in the record (`ungated_status`). Either way the estimator does not pass
    the gate."""
    return rec["figures"].get("ungated_status", rec["status"])


@pytest.mark.parametrize(
    "estimator, item, status", [(e, i, s) for e, exp in EXPECTED.items() for i, s in exp.items()]
)
def test_expected_verdict(matrix, estimator, item, status):
    _, recs = matrix
    rec = recs[(estimator, item)]
    assert judged_status(rec) == status, f"{item} × {estimator}: {rec['status']} — {rec['reason']}"


@pytest.mark.parametrize("estimator", list(ADVERSARIES))
def test_every_adversary_is_caught(matrix, estimator):
    """Each adversary fails at least one item that was judged (not invalid-setup), is refused, or
    raises reaching for what it may not have (`CAUGHT`: error is never green either)."""
    _, recs = matrix
    statuses = {i: judged_status(recs[(estimator, i)]) for i in ITEMS}
    assert CAUGHT & set(statuses.values()), f"{estimator} is not caught: {statuses}"
    if estimator not in RAISERS:
        assert "fail" in statuses.values(), f"{estimator} fails no judged item: {statuses}"


def test_the_declared_label_reader_is_marked_and_refused(matrix):
    _, recs = matrix
    for item in ITEMS:
        rec = recs[("declared_label_reader", item)]
        spec = rec["estimator_spec"]
        assert spec["reads_labels"] and spec["role"] == "validation"
        assert spec["validation_only"] == "reads labels — validation only"
        assert rec["figures"].get("refused") == "reads labels", rec["reason"]
    oracle = recs[("oracle", "magnitude_control")]
    assert oracle["estimator_spec"]["reads_labels"] and oracle["status"] == "fail"
    # the built-in validation estimator is not refused: the reference view's rule passes it
    assert oracle["views"]["reference"]["status"] == "pass"
    assert "refused" not in oracle["figures"]


# ------------------------------------------------------------------ issue 48: the causal view
# the items judged in the causal view (every estimator item has a causal form)
CAUSAL_ITEMS = (
    "magnitude_control",
    "fluency_control",
    "headroom",
    "counterfactual",
    "seed_variance",
    *DRAW_ITEMS,
)


def test_the_oracle_passes_every_planted_label_form(matrix):
    """The reference view's rules can be met: the planted labels' own answer key passes each one
    (recorded beside the causal verdict it fails)."""
    _, recs = matrix
    for item in ("magnitude_control", "fluency_control", "headroom", *DRAW_ITEMS, "seed_variance"):
        rec = recs[("oracle", item)]
        assert rec["views"]["reference"]["status"] == "pass", (item, rec["views"])


def test_the_exact_ideal_passes_every_causal_item(matrix):
    """`metagrad` (the exact derivative of the behavior measure through the logged updates) passes
    every item judged in the causal view, on every seed of the committed smoke key: each causal gate
    is passable. On draws this is a consistency check: metagrad's draw score is the causal label's
    linear term (docs/causal_draw_label.md)."""
    _, recs = matrix
    for item in CAUSAL_ITEMS:
        rec = recs[("metagrad", item)]
        assert rec["view"] == "causal", (item, rec["view"])
        assert rec["status"] == "pass", f"{item} × metagrad: {rec['reason']}"


CONTROLS = ("random", "norm_only", "fluency")


@pytest.mark.parametrize("estimator", ["oracle", *CONTROLS, *ADVERSARIES])
def test_every_control_and_adversary_fails_a_causal_item_and_exits_1(matrix, estimator):
    """The gate keeps its meaning (issue 61): no control, no reader of the planted labels and no
    adversary passes all six causal items. Each fails at least one (one that raises reaching for
    what it may not have is an error there: caught, never green), so a session of it alone exits 1:
    its failed item is a failed test of the session, listed in pytest's summary."""
    res, recs = matrix
    statuses = {i: judged_status(recs[(estimator, i)]) for i in CAUSAL_ITEMS}
    assert all(recs[(estimator, i)]["view"] == "causal" for i in CAUSAL_ITEMS)
    want = "error" if estimator in RAISERS else "fail"
    assert want in statuses.values(), f"{estimator} is not caught: {statuses}"
    # the session's own summary lists a failed test of this estimator (the exit code's cause)
    failed = [
        ln
        for ln in res.stdout.splitlines()
        if ln.startswith("FAILED") and f"test_checklist[{estimator}-" in ln
    ]
    if want == "fail":
        assert failed, f"no FAILED test of {estimator} in the session's summary"


@pytest.mark.parametrize("control, item", list(AIMED.items()))
def test_each_control_fails_the_item_aimed_at_its_confound(matrix, control, item):
    """norm_only fails magnitude_control, fluency fluency_control, random counterfactual (issue 61):
    a control may pass an item whose question it answers, never the one aimed at it."""
    from bt_core.reporting.summary import ROLE_TITLES

    _, recs = matrix
    rec = recs[(control, item)]
    assert rec["view"] == "causal" and rec["status"] == "fail", rec["reason"]
    assert "aimed at its confound" in ROLE_TITLES["control"]  # the controls' row says so


def test_each_column_can_fail_while_another_passes(matrix):
    """Issue 61, requirement 2: every estimator item is failed by some estimator of this matrix that
    passes at least one other item, on the committed smoke key: no column fails exactly where all
    the others fail. The probes (tests/probes.py) are built for it: the exact ideal on one fixture
    and a confound (or noise) on the other; the controls and adversaries count too."""
    _, recs = matrix
    names = sorted({e for e, _ in recs if e != "setup"})
    witnesses = {}
    for item in CAUSAL_ITEMS:
        for e in names:
            st = {i: judged_status(recs[(e, i)]) for i in CAUSAL_ITEMS}
            if st[item] == "fail" and any(v == "pass" for i, v in st.items() if i != item):
                witnesses.setdefault(item, []).append(e)
    missing = [i for i in CAUSAL_ITEMS if i not in witnesses]
    assert not missing, f"no estimator fails {missing} while passing another item"


# (probe) → (the items it must pass, the items it must fail): each answers one fixture's questions
# with the exact ideal and the other's with what cannot answer them
PROBE_VERDICTS = {
    "stream_ideal_draw_fluency": (
        ("counterfactual", "magnitude_control", "headroom"),
        ("fluency_control", "draw_variance", "seed_variance"),
    ),
    "draw_ideal_stream_random": (
        ("fluency_control", "draw_variance"),
        ("counterfactual", "magnitude_control", "headroom", "seed_variance"),
    ),
    # a control judged as a method: it cannot beat itself
    "signed_norm_probe": ((), ("magnitude_control",)),
}


@pytest.mark.parametrize("probe", list(PROBE_VERDICTS))
def test_the_probes_pass_and_fail_where_built_to(matrix, probe):
    _, recs = matrix
    passes, fails = PROBE_VERDICTS[probe]
    for item in passes:
        rec = recs[(probe, item)]
        assert rec["status"] == "pass", f"{item} × {probe}: {rec['reason']}"
    for item in fails:
        rec = recs[(probe, item)]
        assert rec["status"] == "fail", f"{item} × {probe}: {rec['reason']}"


@pytest.mark.parametrize("estimator, field", list(UNDECLARED.items()))
def test_an_undeclared_read_fails_every_item_naming_the_field(matrix, estimator, field):
    """`needs` is enforced: the under-declaring target reader does not escape the targets gate with
    a PASS (`dot`, with identical scores, is gated); it fails, and so does a reader of an undeclared
    grad_norm."""
    _, recs = matrix
    for item in (*ITEMS, "counterfactual"):
        rec = recs[(estimator, item)]
        assert rec["status"] == "fail", f"{item} × {estimator}: {rec['status']} — {rec['reason']}"
        assert f"read undeclared problem field(s) ['{field}']" in rec["reason"], rec["reason"]


def test_the_writer_errs_with_the_reason_and_changes_nobody_else(matrix):
    _, recs = matrix
    assert "read-only" in recs[("writer", "magnitude_control")]["reason"]
    # norm_only ran after it in the same session and still ranks: the advantage was not zeroed
    assert "same score" not in recs[("norm_only", "magnitude_control")]["reason"]


def test_exit_code_gates(matrix):
    """Judged failures (the controls', the label readers') make the session exit 1; the raisers'
    errors are listed beside them as not judged."""
    res, _ = matrix
    assert res.returncode == pytest.ExitCode.TESTS_FAILED, res.stdout[-2000:]
    assert "more not judged" in res.stdout.splitlines()[-1], res.stdout[-500:]


# (process adversary) → what its records must say while the sandbox is active: the answers are out
# of reach
OUT_OF_REACH = {
    "cache_reader": ("no artifact cache reachable",),
    "stack_walker": ("no Evidence on the call stack",),
    "replay_fitter": ("no artifact cache reachable", "there are none of draws"),
}


def test_every_record_says_where_it_was_scored(matrix):
    """Sandboxed where bubblewrap runs; else every estimator record says "unsandboxed"
    (docs/sandbox.md)."""
    _, recs = matrix
    for (est, item), rec in recs.items():
        if est == "setup":
            continue
        spec = rec["estimator_spec"]
        want = "in-process" if est == "oracle" else MODE["mode"]
        assert spec["scoring"]["mode"] == want, (est, item, spec["scoring"])
        assert ("unsandboxed" in spec) == (want == "unsandboxed"), (est, item)


@pytest.mark.parametrize("estimator", list(PROCESS_ADVERSARIES))
def test_the_answer_key_is_out_of_reach_of_every_process_adversary(matrix, estimator):
    """Issue 23: recomputing the contaminator, reading the cache, walking the stack to the judge and
    fitting the judge's replays each passed items in the judge's process; sandboxed, each fails
    every item, with the reason (the first three found GT; `recompute_eligibility` now gets a key
    that is not the run's)."""
    if MODE["mode"] != "sandboxed":
        pytest.skip(
            f"the matrix ran {MODE['mode']} ({MODE['why']}): nothing keeps a plug-in from the cache"
        )
    if estimator == "recompute_eligibility":
        pytest.skip(
            "this session's runs pin the old public key (tests/conftest.py), which this adversary "
            "knows; against another key: test_fresh_key.py::"
            "test_every_setup_gate_holds_on_an_untuned_key, on an untuned key's run"
        )
    _, recs = matrix
    for item in (*ITEMS, "counterfactual"):
        rec = recs[(estimator, item)]
        assert judged_status(rec) in CAUGHT, (
            f"{item} × {estimator}: {rec['status']} — {rec['reason']}"
        )
        if estimator in OUT_OF_REACH:
            assert any(why in rec["reason"] for why in OUT_OF_REACH[estimator]), rec["reason"]
