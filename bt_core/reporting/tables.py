"""The tables of a scorecard (rows of strings), shared by the terminal, the Markdown and the HTML page: the
verdict matrix, lift per seed beside the controls, the fluency-control AUC and the counterfactual LDS.
They read the scorecard JSON only.
"""

from __future__ import annotations

from typing import Any

from bt_core.reporting import summary


def _fmt(x: Any) -> str:
    return "—" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def split(data: dict) -> tuple[list[dict], list[dict]]:
    recs = data["records"]
    return [r for r in recs if r["estimator"] == "setup"], [r for r in recs if r["estimator"] != "setup"]


def setup_rows(data: dict, width: int = 110) -> list[list[str]]:
    setup, _ = split(data)
    return [[r["item"], r["status"].upper(), r["reason"][:width] + ("…" if len(r["reason"]) > width else "")]
            for r in setup]


LABEL_MARK = "reads labels — validation only"


UNSANDBOXED_MARK = "unsandboxed"  # scored in a plain subprocess: nothing kept it from the answers


def label(rec: dict) -> str:
    """The estimator's name as shown in every table: marked when it reads the labels, and when it was
    scored outside the sandbox (docs/sandbox.md)."""
    spec = rec.get("estimator_spec") or {}
    name = f"{rec['estimator']} [{LABEL_MARK}]" if spec.get("reads_labels") else rec["estimator"]
    return f"{name} [{UNSANDBOXED_MARK}]" if spec.get("unsandboxed") else name


def status_cell(rec: dict) -> str:
    """The status, and what the item's own rule gives when the record is invalid-setup only because the
    targets it reads are not vouched for (`ungated_status`)."""
    rule = (rec.get("figures") or {}).get("ungated_status")
    return rec["status"].upper() + (f" (rule: {rule.upper()})" if rule else "")


def matrix(data: dict, why: bool = False) -> tuple[list[str], list[list[str]]]:
    """Rows = estimators (methods, controls, validation), columns = estimator items; cells = status (and,
    with `why`, the record's one-line why)."""
    recs = summary.estimator_records(data)
    items = summary.items(data)
    names = {r["estimator"]: label(r) for r in recs}
    cell = {(r["estimator"], r["item"]): status_cell(r) + (f" — {summary.short(r)}" if why else "") for r in recs}
    return ["estimator", "role", *items], [[names[e], role] + [cell.get((e, i), "—") for i in items]
                                           for e, role in summary.estimators(data)]


def lift_table(data: dict, level: str) -> tuple[list[str], list[list[str]]]:
    """The reference's table: lift (precision@|GT| ÷ chance) per estimator and seed, then the controls, the
    surface baseline, chance and ceiling (from the scorecard's `baselines`)."""
    _, recs = split(data)
    mags = [r for r in recs if r["item"] == "magnitude_control" and r["figures"].get("per_seed")]
    base = (data.get("baselines") or {}).get("per_seed") or {}
    seeds = list(mags[0]["figures"]["per_seed"]) if mags else list(base)
    if not seeds:
        return [], []
    def fig(r, s):
        f = r["figures"]["per_seed"].get(s, {})
        return f if level == "rollout" else f.get("step", {})
    rows = [[label(r)] + [_fmt(fig(r, s).get("lift")) for s in seeds] for r in mags]
    rows += baseline_rows(data, level, seeds)
    return ["lift", *[f"seed {s}" for s in seeds]], rows


def baseline_rows(data: dict, level: str, seeds: list[str]) -> list[list[str]]:
    """Rows of the controls' and the surface baseline's lift, chance (precision) and ceiling (lift)."""
    b = data.get("baselines") or {}
    per = b.get("per_seed") or {}
    if not per:
        return []
    get = lambda s, *keys: _dig(per.get(str(s), {}).get(level, {}), *keys)  # noqa: E731
    rows = [[f"control: {c}"] + [_fmt(get(s, c, "lift")) for s in seeds] for c in b.get("controls", {})]
    rows.append(["surface baseline"] + [_fmt(get(s, "surface", "lift")) for s in seeds])
    rows.append(["chance (precision)"] + [_fmt(get(s, "chance")) for s in seeds])
    rows.append(["ceiling (lift)"] + [_fmt(get(s, "ceiling_lift")) for s in seeds])
    return rows


def baseline_table(data: dict, level: str) -> tuple[list[str], list[list[str]]]:
    """The controls and the surface baseline alone (terminal): lift per seed at `level`."""
    per = (data.get("baselines") or {}).get("per_seed") or {}
    seeds = list(per)
    rows = baseline_rows(data, level, seeds)
    return ([f"{level} lift", *[f"seed {s}" for s in seeds]], rows) if rows else ([], [])


def _dig(d, *keys):
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def auc_table(data: dict) -> tuple[list[str], list[list[str]]]:
    _, recs = split(data)
    flu = [r for r in recs if r["item"] == "fluency_control" and r["figures"].get("per_seed")]
    if not flu:
        return [], []
    seeds = list(flu[0]["figures"]["per_seed"])
    def cell(f):
        out = f"{_fmt(f.get('auc'))} [{_fmt(f.get('ci_lo'))}, {_fmt(f.get('ci_hi'))}]"
        c = f.get("causal")  # the draws' causal label (checklist/fluency_control.py), when present
        if not isinstance(c, dict):
            return out
        ci = f"[{_fmt(c.get('ci_lo'))}, {_fmt(c.get('ci_hi'))}]"
        return f"{out} · causal {_fmt(c.get('auc'))} {ci}"
    rows = [[label(r)] + [cell(r["figures"]["per_seed"][s]) for s in seeds] for r in flu]
    per = (data.get("baselines") or {}).get("per_seed") or {}
    shown_as = (("norm_only", "control: norm_only"),
                ("surface", "surface baseline (the behavior label)"))
    for name, shown in shown_as:
        def base(s, name=name):
            causal = _dig(per.get(s, {}), "draws", "0", "causal", name)
            tail = f" · causal {_fmt(causal)}" if causal is not None else ""
            return _fmt(_dig(per.get(s, {}), "draws", "0", name)) + tail
        rows.append([shown] + [base(s) for s in seeds])
    head = "fluency-residualized AUC [95% CI] · vs the causal label"
    return [head, *[f"seed {s}" for s in seeds]], rows


def lds_table(data: dict) -> tuple[list[str], list[list[str]]]:
    """The counterfactual item's LDS [95% CI] (share of the ceiling) per estimator and seed, then the
    controls', the surface baseline's and the ceiling (the same on every record; read from the first)."""
    _, recs = split(data)
    lds = [r for r in recs if r["item"] == "counterfactual" and r["figures"].get("per_seed")]
    if not lds:
        return [], []
    seeds = list(lds[0]["figures"]["per_seed"])
    def cell(f):
        ci = f.get("ci") or [None, None]
        sh = f.get("share")
        share = f" ({100 * sh:.0f}%)" if isinstance(sh, float) and sh == sh else ""  # of the ceiling
        return f"{_fmt(f.get('lds'))} [{_fmt(ci[0])}, {_fmt(ci[1])}]{share}"
    rows = [[label(r)] + [cell(r["figures"]["per_seed"][s]) for s in seeds] for r in lds]
    ref = next((r for r in lds if all("baselines_lds" in r["figures"]["per_seed"][s] for s in seeds)), None)
    if ref is not None:
        per = ref["figures"]["per_seed"]
        for name in per[seeds[0]]["baselines_lds"]:
            shown = "surface baseline" if name == "surface" else f"control: {name}"
            rows.append([shown] + [f"{_fmt(per[s]['baselines_lds'][name])} [{_fmt(per[s]['baselines_ci'][name][0])}, "
                                   f"{_fmt(per[s]['baselines_ci'][name][1])}]" for s in seeds])
        rows.append([f"ceiling ({per[seeds[0]].get('ceiling_features', 'step-count datamodel')})"]
                    + [_fmt(per[s]["ceiling"]) for s in seeds])
    return ["LDS [95% CI]", *[f"seed {s}" for s in seeds]], rows


SURFACE_NOTE = ("The surface baseline reads only the reply text and the advantage: 1 if the reply contains the "
                "behavior token × sign(A); on draws it is the behavior flag, i.e. the label. A method that does not "
                "beat it on the stream has not shown more than text matching of the rewarded behavior and fails "
                "magnitude_control; on draws it is the label and is only reported.")


def _controls_line(data: dict) -> str:
    ctrl = (data.get("baselines") or {}).get("controls") or {}
    return "; ".join(f"{n} = {c.get('rollout')} (step: {c.get('step')})" for n, c in ctrl.items())
