"""The ladder's dose-response on the pinned smoke key (issue 62 req. 3): the exact ideal and the
rungs below it, judged in one session of the real suite. A long check (about 4 min of one core):
the README's test command leaves it out and CI runs it after that command (`docs/contributing.md`,
the `long` tier)."""

import itertools

import pytest
from behaviortrace.checklist import ESTIMATOR_ITEMS
from judged_session import by_cell, judge

pytestmark = pytest.mark.long

# issue 62's ladder below the ideal (R0c, a side branch, is not on the chain); the ideal is the
# chain's top. R3 is left out: it adds the clip, which never acts at smoke, so R3 is R2 bit for bit
# there (test_ladder asserts it on seed 0; on this key their LDS and CI were equal on all three
# seeds), and judging it cost the session 32 s.
LADDER = ("ladder_r0", "ladder_r1", "ladder_r2", "ladder_r4")
CHAIN = (*LADDER, "metagrad")
CAUSAL_ITEMS = tuple(i.name for i in ESTIMATOR_ITEMS)  # every estimator item, judged causal


@pytest.fixture(scope="module")
def chain(tmp_path_factory, smoke_artifacts, smoke_cache):
    _, card = judge(tmp_path_factory.mktemp("meta_ladder"), list(CHAIN), smoke_cache)
    return by_cell(card)


def test_the_ladder_climbs_on_the_pinned_smoke_key(chain):
    """Issue 62 req. 3 (`docs/ladder.md#dose-response`): the rungs are nested by construction, each
    adding one thing the ideal propagates, so along the chain R0 → R1 → R2 → R4(1) → the ideal
    (R3 = R2 at smoke: see LADDER), for each step a → b and each seed, b's causal LDS is at least
    the lower end of a's 95% CI (a fall within a's CI is resampling noise, one beyond it a finding
    about the items or the rungs), and b passes at least as many of the six causal items as a."""
    from behaviortrace.checklist import GATING_SETUP_ITEMS

    recs = chain
    for item in GATING_SETUP_ITEMS:  # a chain judged on a setup that failed would claim nothing
        assert recs[("setup", item.name)]["status"] == "pass", recs[("setup", item.name)]["reason"]
    per_seed = {n: recs[(n, "counterfactual")]["figures"]["per_seed"] for n in CHAIN}
    passed = {n: [i for i in CAUSAL_ITEMS if recs[(n, i)]["status"] == "pass"] for n in CHAIN}
    seeds = sorted(per_seed["metagrad"])
    assert seeds and all(sorted(per_seed[n]) == seeds for n in CHAIN), per_seed
    table = {n: {s: round(per_seed[n][s]["lds"], 3) for s in seeds} for n in CHAIN}
    for a, b in itertools.pairwise(CHAIN):
        for s in seeds:
            lo_a = per_seed[a][s]["ci"][0]
            assert per_seed[b][s]["lds"] >= lo_a, (
                f"seed {s}: {b}'s LDS {per_seed[b][s]['lds']:.3f} fell below {a}'s CI "
                f"(lower end {lo_a:.3f}); the chain's LDS: {table}"
            )
        assert len(passed[b]) >= len(passed[a]), (a, passed[a], b, passed[b], table)
    assert passed["metagrad"] == list(CAUSAL_ITEMS), passed
