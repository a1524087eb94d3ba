"""The tables every scorecard has (rows of strings), shared by the terminal, the Markdown and the
HTML page: the setup items and the verdict matrix. The items' own tables are the rows they write
(`present`). They read the scorecard JSON only.
"""

from __future__ import annotations

from bt_core.reporting import summary
from bt_core.reporting.present import LABEL_MARK, UNSANDBOXED_MARK
from bt_core.reporting.present import estimator_label as label

__all__ = ["LABEL_MARK", "UNSANDBOXED_MARK", "label", "matrix", "setup_rows", "status_cell"]


def setup_rows(data: dict, width: int = 110) -> list[list[str]]:
    setup = summary.setup_records(data)
    return [
        [
            r["item"],
            r["status"].upper(),
            r["reason"][:width] + ("…" if len(r["reason"]) > width else ""),
        ]
        for r in setup
    ]


def status_cell(rec: dict) -> str:
    """The status, and what the item's own rule gives when the record is invalid-setup only because
    the targets it reads are not vouched for (`ungated_status`)."""
    rule = (rec.get("figures") or {}).get("ungated_status")
    return rec["status"].upper() + (f" (rule: {rule.upper()})" if rule else "")


def matrix(data: dict, why: bool = False) -> tuple[list[str], list[list[str]]]:
    """Rows = estimators (methods, controls, validation), columns = estimator items; cells = status
    (and, with `why`, the record's one-line why)."""
    recs = summary.estimator_records(data)
    items = summary.items(data)
    names = {r["estimator"]: label(r) for r in recs}
    cell = {
        (r["estimator"], r["item"]): status_cell(r)
        + (f" — {summary.short(r)}" if why else "")
        + "".join(f" · {w} view: {st.upper()}" for w, st in summary.other_views(r))
        for r in recs
    }
    heads = [summary.item_heading(data, i) for i in items]
    return ["estimator", "role", *heads], [
        [names[e], role] + [cell.get((e, i), "—") for i in items]
        for e, role in summary.estimators(data)
    ]
