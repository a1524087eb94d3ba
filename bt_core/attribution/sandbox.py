"""Where an estimator's `score()` runs: in a worker process that cannot read the answers.

    make_scorer("sandbox", forbidden)      bubblewrap where it runs, else a plain subprocess
                                           ("unsandboxed")
    make_scorer("subprocess", forbidden)   the plain subprocess, forced (what a machine without
                                           bwrap gets)
    make_scorer("in-process", forbidden)   the judge's own process: explicit, marked on every record

The judge writes each label-free problem once per session into a scratch directory
(`bt_core.attribution.scratch`) and starts one worker per estimator (`bt_core.attribution.worker`),
which imports the estimator, builds it once and scores every problem it is sent. The worker gets no
cache path, no judge object and an environment without BehaviorTrace's variables (`worker_env`).

Under bubblewrap (Linux, Debian's ``bubblewrap``) the worker sees only: the system directories
(/usr, /etc), the Python environment, this distribution's packages (``bt_core``,
``behaviortrace.*``), the plug-in's own module (its file, or its
top-level package), the files the plug-in declares in ``files`` (read-only), the problems
(read-only, at ``/bt/problems``), its output directory (``/bt/out``) and an empty /tmp; no network,
its own process tree (it cannot read the judge's command line or environment through /proc). The
labels, the replays, the contaminator's key and the cache are in none of these; a plug-in whose
module or declared files lie in the cache (or hold it) is refused. Without bubblewrap the same
worker runs as a plain subprocess: it still gets no path to the answers, but nothing stops it from
searching the file system, and every record of the session says "unsandboxed".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bt_core.artifacts.store import restamp_after_links
from bt_core.attribution.outcome import Outcome, call_score
from bt_core.attribution.problem import AttributionProblem
from bt_core.attribution.registry import EstimatorSpec
from bt_core.attribution.scratch import ScratchError, write_problem

MODES = ("sandbox", "subprocess", "in-process")
PASSED_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "PYTHONHASHSEED",
    "CUDA_VISIBLE_DEVICES",
)


@dataclass(frozen=True)
class Scoring:
    """How a session scores, recorded in every record's ``estimator_spec.scoring`` and the
    scorecard's meta: ``sandboxed`` (bubblewrap), ``unsandboxed`` (a plain subprocess, `why`) or
    ``in-process``."""

    mode: str
    why: str

    def record(self) -> dict:
        return {"mode": self.mode, "why": self.why}


def detect(bwrap: str = "bwrap") -> tuple[str | None, str]:
    """(path of a bubblewrap that runs here, or None; what was found): it is run once as a probe."""
    if not sys.platform.startswith("linux"):
        return None, f"no sandbox on {sys.platform}: bubblewrap is Linux only"
    path = shutil.which(bwrap)
    if path is None:
        return (
            None,
            (
                f"bubblewrap ({bwrap!r}) is not installed: on Debian/Ubuntu `apt-get install "
                "bubblewrap`"
            ),
        )
    try:
        res = subprocess.run(
            [path, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"bubblewrap at {path} cannot start: {e}"
    if res.returncode != 0:
        return None, (
            f"bubblewrap at {path} cannot run here ({res.stderr.strip()[:200]}): user namespaces "
            "are probably disabled (kernel.unprivileged_userns_clone, or a container without them)"
        )
    ver = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.strip()
    return path, ver or "bubblewrap"


def worker_env(home: str, pythonpath: list[str]) -> dict[str, str]:
    """The worker's whole environment: a few locale and thread variables, nothing of
    BehaviorTrace's."""
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    env.update(HOME=home, TMPDIR=home, PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1")
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    return env


def _inside(p: Path, roots: list[Path]) -> Path | None:
    """The forbidden root that `p` lies in or holds, if any."""
    p = p.resolve()
    return next((r for r in roots if p == r or r in p.parents or p in r.parents), None)


class InProcess:
    """Scores in the judge's own process (explicit; every record says "in-process")."""

    def __init__(
        self,
        why: str = "chosen explicitly (--bt-scoring=in-process): not separated from the answers",
    ):
        self.scoring = Scoring("in-process", why)
        self._built: dict[tuple, object] = {}
        self._params: dict[tuple, dict | None] = {}

    def build(self, spec: EstimatorSpec, params: dict):
        if spec.key not in self._built:
            self._built[spec.key] = spec.create(**params)
        return self._built[spec.key]

    def score(self, spec: EstimatorSpec, params: dict, problem: AttributionProblem) -> Outcome:
        given = problem.handout(spec.needs if spec.declares_needs else None)
        return call_score(lambda: self.build(spec, params), spec.factory, given)

    def params(self, spec: EstimatorSpec, params: dict) -> dict | None:
        if spec.key not in self._params:
            try:
                own = getattr(self.build(spec, params), "params", None)
            # a constructor that raises fails the items; the record shows what was asked
            except Exception:
                own = None
            self._params[spec.key] = own if isinstance(own, dict) else None
        return self._params[spec.key]

    def retire(self, spec: EstimatorSpec) -> bool:
        """Drop `spec`'s built estimator (the session has nothing left for it to score)."""
        return self._built.pop(spec.key, None) is not None

    def close(self) -> None:
        self._built.clear()


class _Proc:
    """One worker process and its line protocol."""

    def __init__(self, argv: list[str], env: dict, cwd: Path, log: Path):
        self.log = log
        with open(log, "ab") as err:
            self.p = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                cwd=cwd,
                text=True,
            )

    def ask(self, req: dict) -> dict | None:
        try:
            self.p.stdin.write(json.dumps(req) + "\n")
            self.p.stdin.flush()
            line = self.p.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        return json.loads(line) if line else None

    def died(self) -> str:
        rc = self.p.wait(timeout=30)
        tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
        return f" ended its scoring worker (exit code {rc})" + (
            f": {' | '.join(tail)}" if tail else ""
        )

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def _module_mounts(factory) -> tuple[list[Path], list[str]]:
    """(what to mount read-only, what to put on the worker's sys.path) for the plug-in defining
    `factory`: its top-level package's folders, or its module's file and the Python files beside it
    (sibling modules it imports; not the folder, which may hold data or the cache); nothing for code
    inside the Python environment or bt_core (mounted anyway)."""
    top = sys.modules.get(getattr(factory, "__module__", "").split(".")[0])
    if top is None or getattr(top, "__file__", None) is None and not hasattr(top, "__path__"):
        return [], []
    dirs = [Path(p) for p in getattr(top, "__path__", [])] or [Path(top.__file__)]
    here = [Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), *_package_dirs()]
    if all(any(r in d.resolve().parents or d.resolve() == r for r in here) for d in dirs):
        return [], []
    if not hasattr(top, "__path__"):
        dirs = sorted(dirs[0].parent.glob("*.py"))
    return dirs, sorted({str(d.parent) for d in dirs})


def _bt_core_dir() -> Path:
    import bt_core

    return Path(bt_core.__file__).resolve().parent


def _package_dirs() -> list[Path]:
    """This distribution's code: bt_core and the suite's packages (behaviortrace.checklist,
    .fixtures, .benchmarks), wherever they are installed (an editable install keeps them in the
    checkout)."""
    import importlib.util

    dirs = [_bt_core_dir()]
    for name in ("behaviortrace.checklist", "behaviortrace.fixtures", "behaviortrace.benchmarks"):
        try:
            spec = importlib.util.find_spec(name)
        except ImportError:
            spec = None
        dirs += [Path(p).resolve() for p in (spec.submodule_search_locations or [])] if spec else []
    return dirs


def declared_files(spec: EstimatorSpec) -> list[Path]:
    """The extra files or folders a plug-in declares in ``files`` (relative to its module's
    folder)."""
    own = getattr(spec.factory, "files", ()) or ()
    if isinstance(own, (str, os.PathLike)):
        own = (own,)
    mod = sys.modules.get(getattr(spec.factory, "__module__", ""))
    base = Path(mod.__file__).parent if getattr(mod, "__file__", None) else Path.cwd()
    return [(base / Path(f)).resolve() for f in own]


def _site_dirs() -> list[Path]:
    """The directories the worker's interpreter imports its dependencies from, wherever they lie:
    the site directories on this interpreter's path, those its own prefix holds and those its
    ``.pth`` files add (a virtual environment whose dependencies live in another environment,
    e.g. a CI runner's venv inside the clone). Only folders named ``site-packages`` or
    ``dist-packages`` or listed by `site`: never the working directory, a checkout root or anything
    else on ``sys.path``. (The user site is not among them: the worker runs with
    ``PYTHONNOUSERSITE``.)"""
    import site

    named = {Path(p) for p in site.getsitepackages() if Path(p).is_dir()}
    for p in sys.path:
        q = Path(p)
        if q.name in ("site-packages", "dist-packages") and q.is_dir():
            named.add(q)
    return sorted(named)


def _system_mounts(forbidden: list[Path] = ()) -> list[str]:
    """bubblewrap's read-only mounts of the system and the Python environment: /usr, /etc, the
    interpreter's prefixes and its site directories (`_site_dirs`), none that lies in or holds a
    `forbidden` root (the artifact cache)."""
    args = []
    for name in ("bin", "lib", "lib64", "sbin"):
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.exists():
            args += ["--ro-bind", str(p), str(p)]
    args += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    bound = [Path("/usr")]
    prefixes = sorted({Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix)})
    for p in [*prefixes, *_site_dirs()]:
        real = p.resolve()
        if any(real.is_relative_to(b) for b in bound) or _inside(p, list(forbidden)):
            continue
        args += ["--ro-bind", str(p), str(p)]
        bound.append(real)
    return args


class Isolated:
    """Scores in worker processes: under bubblewrap when `bwrap` is given, else plain
    subprocesses."""

    def __init__(self, forbidden: list[Path], bwrap: str | None, scoring: Scoring):
        self.forbidden = [Path(f).resolve() for f in forbidden]
        self.bwrap, self.scoring = bwrap, scoring
        self.root = Path(tempfile.mkdtemp(prefix="bt-scoring-"))
        self.problems = self.root / "problems"
        self.problems.mkdir()
        self._written: dict[str, str | ScratchError] = {}
        self._procs: dict[tuple, tuple[_Proc, Path]] = {}
        self._params: dict[tuple, dict | None] = {}
        self._n = 0
        # cache files hard-linked into the scratch (re-stamped once the scratch is removed)
        self._linked: set[Path] = set()
        # also at interpreter exit
        self._finalizer = weakref.finalize(self, _shut, self._procs, self.root, self._linked)
        system = [Path(sys.prefix), Path(sys.base_prefix), *_package_dirs(), self.root]
        held = [str(p) for p in system if _inside(p, self.forbidden)]
        if held:
            raise RuntimeError(
                f"the scoring sandbox would see the artifact cache {self.forbidden}: it lies "
                f"in or holds {held}; keep the cache (--bt-cache) outside the Python "
                "environment, the bt_core package and the temporary directory"
            )

    def _scratch(self, problem: AttributionProblem) -> str:
        if problem.name not in self._written:
            name = problem.name.replace("/", "__") or f"problem{len(self._written)}"
            try:
                write_problem(problem, self.problems / name, self._linked)
                self._written[problem.name] = name
            except ScratchError as e:
                self._written[problem.name] = e
        got = self._written[problem.name]
        if isinstance(got, ScratchError):
            raise got
        return got

    def _refusal(self, spec: EstimatorSpec) -> str | None:
        mounts, _ = _module_mounts(spec.factory)
        bad = [str(p) for p in [*mounts, *declared_files(spec)] if _inside(p, self.forbidden)]
        missing = [str(p) for p in declared_files(spec) if not p.exists()]
        if bad:
            return (
                f" refused: its module or declared `files` {bad} lie in or hold the artifact "
                "cache, which holds the answers; a plug-in may mount its own files only"
            )
        if missing:
            return (
                f" declares `files` {missing} that do not exist (paths are relative to its "
                "module's folder)"
            )
        return None

    def _argv(self, spec: EstimatorSpec, out: Path) -> tuple[list[str], dict, Path]:
        mounts, path = _module_mounts(spec.factory)
        worker = [sys.executable, "-m", "bt_core.attribution.worker"]
        if self.bwrap is None:
            return [*worker, str(self.problems), str(out)], worker_env(str(out), path), out
        # the empty /tmp first: bwrap applies mounts in order, so an environment or a checkout that
        # lives under /tmp (a CI runner's clone, a scratch venv) is bound on top of it, not hidden
        # by it
        args = [
            self.bwrap,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--tmpfs",
            "/tmp",
            *_system_mounts(self.forbidden),
            "--proc",
            "/proc",
            "--dev",
            "/dev",
        ]
        for p in [*_package_dirs(), *mounts, *declared_files(spec)]:
            args += ["--ro-bind", str(p), str(p)]
        args += ["--ro-bind", str(self.problems), "/bt/problems", "--bind", str(out), "/bt/out"]
        for k, v in worker_env("/tmp", path).items():
            args += ["--setenv", k, v]
        return [*args, "--chdir", "/tmp", "--", *worker, "/bt/problems", "/bt/out"], {}, out

    def _worker(self, spec: EstimatorSpec, params: dict) -> tuple[_Proc, Path]:
        if spec.key not in self._procs:
            out = Path(tempfile.mkdtemp(prefix="w", dir=self.root))
            argv, env, cwd = self._argv(spec, out)
            proc = _Proc(argv, env, cwd, out / "stderr.log")
            ref = f"{spec.factory.__module__}:{spec.factory.__qualname__}"
            proc.ask(
                {
                    "op": "init",
                    "ref": ref,
                    "name": spec.name,
                    "origin": spec.origin,
                    "params": params,
                    "needs": list(spec.needs) if spec.declares_needs else None,
                    "cwd": str(Path.cwd()),
                }
            )
            self._procs[spec.key] = (proc, out)
        return self._procs[spec.key]

    def score(self, spec: EstimatorSpec, params: dict, problem: AttributionProblem) -> Outcome:
        refused = self._refusal(spec)
        if refused:  # reaching for the cache is refused (fail); a missing declared file is an error
            return Outcome(error=refused, refused=refused.startswith(" refused:"))
        try:
            name = self._scratch(problem)
        except ScratchError as e:
            return Outcome(error=f": {e}")
        proc, out = self._worker(spec, params)
        self._n += 1
        reply = proc.ask({"op": "score", "id": self._n, "problem": name})
        if reply is None:
            del self._procs[spec.key]
            return Outcome(error=proc.died())
        scores = None
        if reply["scores"]:
            f = out / reply["scores"]
            scores = np.array(np.load(f, allow_pickle=False), dtype=np.float64)
            f.unlink()
        return Outcome.from_json(reply["outcome"], scores)

    def params(self, spec: EstimatorSpec, params: dict) -> dict | None:
        if spec.key not in self._params:
            if self._refusal(spec):
                return None
            reply = self._worker(spec, params)[0].ask({"op": "params"})
            self._params[spec.key] = None if reply is None else reply.get("params")
        return self._params[spec.key]

    def retire(self, spec: EstimatorSpec) -> bool:
        """Stop `spec`'s worker: the session has no item left that scores it. Its scores stay
        memoized in the judge (`Evidence`); were it asked to score again, a new worker would be
        built. What it returned from `params` is kept. True if a worker was stopped."""
        got = self._procs.pop(spec.key, None)
        if got is None:
            return False
        got[0].close()
        shutil.rmtree(got[1], ignore_errors=True)
        return True

    def close(self) -> None:
        self._finalizer()


def _shut(procs: dict, root: Path, linked: set | None = None) -> None:
    """Stop the workers, remove the scratch directory; then re-stamp the cache files that were
    linked into it (removing a link moves a file's ctime, which would make the next session hash
    their artifacts again: `restamp_after_links`)."""
    for proc, _ in procs.values():
        proc.close()
    procs.clear()
    shutil.rmtree(root, ignore_errors=True)
    if linked:
        restamp_after_links(sorted(linked))
        linked.clear()


def make_scorer(mode: str, forbidden: list[Path]):
    """The session's scorer for `mode` (one of `MODES`); `forbidden` are the artifact cache
    roots."""
    if mode == "in-process":
        return InProcess()
    if mode == "subprocess":
        return Isolated(
            forbidden,
            None,
            Scoring(
                "unsandboxed", "a plain subprocess, chosen explicitly (--bt-scoring=subprocess)"
            ),
        )
    if mode != "sandbox":
        raise ValueError(f"scoring={mode!r}: choose one of {list(MODES)}")
    bwrap, found = detect()
    if bwrap is None:
        return Isolated(forbidden, None, Scoring("unsandboxed", f"a plain subprocess: {found}"))
    return Isolated(forbidden, bwrap, Scoring("sandboxed", found))
