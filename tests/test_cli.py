"""The behaviortrace console script."""

import json

from bt_core.cli import main


def test_estimators_json(capsys):
    assert main(["estimators", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"name", "levels", "origin"} <= rows[0].keys()
    assert "oracle" in {r["name"] for r in rows}


def test_show_json_of_a_cached_run(smoke_artifacts, capsys):
    path = smoke_artifacts[0].run.path
    assert main(["show", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("s_b_final", "control_rate_final", "saturation_step", "gt_size", "n_rollouts", "wall_s",
                "rollouts_sha256"):
        assert key in out
    assert out["n_rollouts"] == len(smoke_artifacts[0].run.rollouts)


def test_train_refuses_a_non_empty_out(tmp_path, capsys):
    (tmp_path / "x").write_text("keep me")
    assert main(["train", "--scale", "smoke", "--out", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err
