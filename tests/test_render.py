"""Rendering of a scorecard (unit tier: a hand-made scorecard)."""

from bt_core.reporting.render import render_markdown, render_terminal


def _data():
    setup = {"item": "gt_minority", "estimator": "setup", "status": "pass", "reason": "seed 0: |GT| 12 of 99 (0.121)",
             "figures": {}}
    rec = {"item": "magnitude_control", "estimator": "cosine", "status": "invalid-setup",
           "reason": "targets not vouched", "figures": {"ungated_status": "fail"},
           "estimator_spec": {"role": "method", "reads_labels": False}}
    oracle = {"item": "magnitude_control", "estimator": "oracle", "status": "pass", "reason": "beats every control",
              "figures": {}, "estimator_spec": {"role": "validation", "reads_labels": True}}
    return {"schema": "behaviortrace.scorecard/1", "scale": "smoke", "seeds": [0], "config_hash": "x",
            "git_commit": "y", "created": "now", "records": [setup, rec, oracle]}


def test_markdown_escapes_pipes_inside_cells_and_marks_label_readers():
    md = render_markdown(_data())
    row = next(line for line in md.splitlines() if line.startswith("| gt_minority"))
    assert "\\|GT\\|" in row and row.count(" | ") == 2  # three cells, the evidence's "|GT|" kept inside one
    assert "oracle [reads labels — validation only]" in md


def test_terminal_quotes_the_rule_behind_an_invalid_setup_cell():
    out = render_terminal(_data())
    assert "INVALID-SETUP (rule: FAIL)" in out and "validation" in out
