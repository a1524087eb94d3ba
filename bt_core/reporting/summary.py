"""What every rendering says first, read from the scorecard JSON without knowing any item by name:
the estimators in their groups (methods, controls, validation), which setup gates held and how many
verdicts each one held back, the best method per item, and each record's one-line `short`.
"""

from __future__ import annotations

import re

# ROLES: the display order of the estimator groups
from bt_core.reporting.scorecard import RANK, ROLES, judged

ROLE_TITLES = {
    "method": "methods",
    "control": (
        "controls (built-in, target-free: each fails the item aimed at its confound; a pass "
        "elsewhere is expected where a target-free score answers that item's question: gradient "
        "size carries some causal signal; docs/items.md)"
    ),
    "validation": (
        "validation (reads the planted labels — not a method; it fails the items judged on causal "
        "truth by design: the labels are the reference's view, not the replayed truth)"
    ),
}


def clip(text: str, width: int) -> str:
    """`text` on one line, at most `width` characters (an ellipsis marks a cut)."""
    text = " ".join(str(text).splitlines())
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def reason_parts(reason: str) -> tuple[str, list[str]]:
    """A long reason cut where it quotes seeds: (its head, one part per "seed N: …"), for a list per
    seed."""
    head, *parts = re.split(r"(?:;|—|:)\s+(?=seed \d+:)", reason)
    return head, parts


def setup_records(data: dict) -> list[dict]:
    return [r for r in data["records"] if r["estimator"] == "setup"]


def estimator_records(data: dict) -> list[dict]:
    return [r for r in data["records"] if r["estimator"] != "setup"]


def items(data: dict) -> list[str]:
    """The estimator items in the order the scorecard holds them."""
    return list(dict.fromkeys(r["item"] for r in estimator_records(data)))


def item_view(data: dict, item: str) -> str:
    """The view `item`'s verdicts are judged in ("causal" or "reference"; "" in a scorecard written
    before items had views)."""
    return next((r.get("view", "") for r in estimator_records(data) if r["item"] == item), "")


def item_heading(data: dict, item: str, sep: str = " ") -> str:
    """An item's column heading: its name and the view it is judged in ("fluency_control
    (causal)")."""
    view = item_view(data, item)
    return f"{item}{sep}({view})" if view else item


def other_views(rec: dict) -> list[tuple[str, str]]:
    """The record's other views as (view, status): reported beside the verdict, never gating."""
    return [
        (w, v.get("status", "?"))
        for w, v in (rec.get("views") or {}).items()
        if w != rec.get("view")
    ]


def gate_view_line(data: dict) -> str | None:
    """The sentence that says which view gates (None for a scorecard written before views)."""
    view = data.get("gate_view")
    if not view:
        return None
    other = "reference" if view == "causal" else "causal"
    what = {
        "causal": "the stream replayed with rollouts reweighted, and the draws' causal label",
        "reference": "the planted labels, as the reference study judged them",
    }
    return (
        f"Gating view: {view} ({what[view]}); the {other} view ({what[other]}) is shown beside "
        "each verdict that has one and never changes the exit code (--gate-view). An item with "
        "one view is judged in it whatever the gate; its heading says which."
    )


def role(rec: dict) -> str:
    spec = rec.get("estimator_spec") or {}
    return spec.get("role") or ("validation" if spec.get("reads_labels") else "method")


def estimators(data: dict) -> list[tuple[str, str]]:
    """(name, role) of every estimator with a record, methods first, then controls, then
    validation."""
    seen = {r["estimator"]: role(r) for r in estimator_records(data)}
    order = {k: i for i, k in enumerate(ROLES)}
    return sorted(seen.items(), key=lambda nr: order.get(nr[1], len(ROLES)))


def grid(data: dict) -> dict[tuple[str, str], dict]:
    """(estimator, item) → record."""
    return {(r["estimator"], r["item"]): r for r in estimator_records(data)}


def short(rec: dict, width: int = 80) -> str:
    """The record's one-line why: its `short`, or (a scorecard written before `short` existed) the
    start of its reason."""
    return clip(rec.get("short") or rec.get("reason", ""), width)


def rule_status(rec: dict) -> str | None:
    """What the item's own rule gives where a gate or a refusal overrode it."""
    f = rec.get("figures") or {}
    return f.get("ungated_status") or f.get("rule_status")


def gated(data: dict) -> dict[str, int]:
    """Setup item → how many estimator verdicts it held back as invalid-setup (records'
    `gated_by`)."""
    out = {r["item"]: 0 for r in setup_records(data)}
    for r in estimator_records(data):
        for name in (r.get("figures") or {}).get("gated_by") or ():
            out[name] = out.get(name, 0) + 1
    return out


def lower_end(m: dict) -> float | None:
    """A margin entry's lower end: the CI's lower bound, or the value without a CI."""
    ci = m.get("ci")
    x = ci[0] if ci and ci[0] is not None else m.get("value")
    return x if isinstance(x, (int, float)) and x == x else None


def worst_margin(rec: dict) -> float | None:
    """The lowest lower end over the record's seeds (pooled entry included), or None."""
    m = rec.get("margin") or {}
    ends = [lower_end(e) for e in [*(m.get("per_seed") or {}).values(), m.get("pooled") or {}]]
    ends = [e for e in ends if e is not None]
    return min(ends) if ends else None


def best(data: dict) -> dict[str, dict | None]:
    """Item → the best method's record: a pass before anything else, then the highest worst-seed
    margin (a gated record ranks by what its rule gives). None where no method has a record."""
    out = {}
    for item in items(data):
        recs = [r for r in estimator_records(data) if r["item"] == item and role(r) == "method"]
        key = lambda r: (
            RANK.get(r["status"], 0) * 10 + RANK.get(rule_status(r) or r["status"], 0),  # noqa: E731
            worst_margin(r) if worst_margin(r) is not None else float("-inf"),
        )
        out[item] = max(recs, key=key) if recs else None
    return out


def methods_judged(counts: dict[str, int]) -> str:
    """How many of the methods were judged on every item, in words (terminal and page); a session
    of controls alone says so instead of "0 of the 0 methods"."""
    if not counts["method"]:
        return "no method was run"
    return f"{counts['methods_judged']} of the {plural(counts['method'], 'method')}"


def judged_counts(data: dict) -> dict[str, int]:
    """How many estimators were judged (pass or fail) on every item, how many were not judged on
    some (held back by the fixtures: invalid-setup; or not scored: error, declined), and how many
    verdicts have each status."""
    names = [n for n, _ in estimators(data)]
    g = grid(data)
    full = [
        n for n in names if all(judged(g[(n, i)]["status"]) for i in items(data) if (n, i) in g)
    ]
    scored = [
        n
        for n in names
        if all(g[(n, i)]["status"] not in ("error", "declined") for i in items(data) if (n, i) in g)
    ]
    methods = {n for n, r in estimators(data) if r == "method"}
    verdicts: dict[str, int] = {}
    for r in estimator_records(data):
        verdicts[r["status"]] = verdicts.get(r["status"], 0) + 1
    return {
        "estimators": len(names),
        "judged_everywhere": len(full),
        "held_back": len(names) - len(full),
        "unscored": len(names) - len(scored),
        "methods_judged": len(methods & set(full)),
        "verdicts": verdicts,
        **{role: sum(1 for _, r in estimators(data) if r == role) for role in ROLES},
    }


def headline(data: dict) -> list[str]:
    """The summary in sentences (terminal and page): gates, judged estimators."""
    setup = setup_records(data)
    held = [r["item"] for r in setup if r["status"] == "pass"]
    counts, g = judged_counts(data), gated(data)
    n_rec = len(estimator_records(data))
    lines = [
        f"Setup gates: {len(held)} of {len(setup)} held." if setup else "No setup item was run."
    ]
    view = gate_view_line(data)
    if view and n_rec:
        lines.append(view)
    for r in setup:
        if r["status"] != "pass":
            held_back = (
                f"it held back {g[r['item']]} of {n_rec} estimator verdicts as invalid-setup"
                if g.get(r["item"])
                else "it held back no estimator verdict"
            )
            lines.append(f"SETUP FAILED: {r['item']} — {held_back}. Why: {short(r, 200)}")
    lines.append(
        f"Estimators: {counts['estimators']} ({plural(counts['method'], 'method')}, "
        f"{plural(counts['control'], 'control')}, {counts['validation']} validation); "
        f"{counts['judged_everywhere']} judged (pass or fail) on every item — "
        f"{methods_judged(counts)} — and "
        f"{counts['held_back']} not judged on at least one."
    )
    lines.append(f"Verdicts: {verdict_counts(counts)}.")
    return lines


def verdict_counts(counts: dict) -> str:
    """The verdicts by status, judged apart from not judged (`judged_counts`'s "verdicts"), e.g.
    "3 pass, 69 fail judged; 0 invalid-setup, 0 error, 0 declined not judged"."""
    v = counts["verdicts"]
    return (
        f"{v.get('pass', 0)} pass, {v.get('fail', 0)} fail judged; {v.get('invalid-setup', 0)} "
        f"invalid-setup, {v.get('error', 0)} error, {v.get('declined', 0)} declined not judged"
    )
