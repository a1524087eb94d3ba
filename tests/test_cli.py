"""The behaviortrace console script."""

import json

import pytest

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
    for key in (
        "s_b_final",
        "control_rate_final",
        "saturation_step",
        "gt_size",
        "n_rollouts",
        "wall_s",
        "rollouts_sha256",
        "model",
    ):
        assert key in out
    assert out["n_rollouts"] == len(smoke_artifacts[0].run.rollouts)
    assert out["model"]["gguf_file"] is None and "built from config" in out["model"]["name"]


def test_train_refuses_a_non_empty_out(tmp_path, capsys):
    (tmp_path / "x").write_text("keep me")
    assert main(["train", "--scale", "smoke", "--out", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err


@pytest.mark.train
def test_train_steps_is_a_quick_check_and_show_names_the_model(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--scale",
                "smoke",
                "--steps",
                "2",
                "--seed",
                "1",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["show", str(out), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["n_rollouts"] == 2 * 36 and [p["step"] for p in shown["s_b_curve"]] == [0, 2]
    assert set(shown["model"]) == {"name", "path", "gguf_file", "package"}


def test_train_refuses_zero_steps_and_unknown_scales(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train", "--scale", "smoke", "--steps", "0", "--out", str(tmp_path / "a")])
    assert "--steps 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--scale", "huge", "--out", str(tmp_path / "b")])
    assert "real" in capsys.readouterr().err  # the choices name every scale


def test_the_ladder_rungs_are_opt_in_and_still_resolve():
    """A session given no --estimator judges every registered estimator but the opt-in ones (issue
    62 req. 5: the rungs must not slow the default suite); named, they resolve as before."""
    from bt_core.attribution.catalog import available, default_names, get, names

    opt_in = {s.name for s in available() if s.opt_in}
    assert {f"ladder_{r}" for r in ("r0", "r0c", "r1", "r2", "r3", "r4")} <= opt_in
    assert set(default_names()) == set(names()) - opt_in
    assert {"metagrad", "random", "oracle"} <= set(default_names())
    assert get("ladder_r2").as_dict()["opt_in"] and not get("metagrad").as_dict()["opt_in"]
