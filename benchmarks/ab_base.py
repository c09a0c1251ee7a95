"""The base of an A/B run (``make bench BASE=<commit>``): that commit's package in a virtualenv of its
own, built once per commit and reused.

Under the bench work dir (``BENCH_WORK_DIR``, default ``<tmp>/django-workflows-bench``),
``base-<commit>/`` holds:

- ``tree/``: a git worktree of the commit, detached;
- ``venv/``: ``python3 -m venv``, then ``pip install -e tree[all]`` constrained to the versions of this
  run's own environment (its ``pip freeze``), so that Django, django-q2 and the drivers are the same on
  both sides and the package is the only difference;
- ``ready``: written last, when both are complete: a second run finds it and builds nothing;
- ``driver/benchmarks/``: a copy of HEAD's ``benchmarks`` package, made again on every run.

The base is measured by HEAD's benchmark code, not its own: one driver measuring two packages is the
fair comparison, and an old commit's benchmarks may differ or lack a figure (``benchmarks/compat.py``
finds the internals they time). Its children run with ``driver/`` as their working directory and their
only ``PYTHONPATH``, so ``import django_workflows`` finds the base's install and never HEAD's tree, while
``benchmarks`` (and the worker subprocesses it starts from its own directory) is HEAD's copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import log

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(os.environ.get("BENCH_WORK_DIR") or Path(tempfile.gettempdir()) / "django-workflows-bench")


@dataclass(frozen=True)
class Side:
    """One side of the comparison: its label, its interpreter and where its children run from."""

    label: str
    commit: str
    python: str
    root: Path

    def env(self, env: dict) -> dict:
        return {**env, "PYTHONPATH": str(self.root)}


def head() -> Side:
    """This tree, as it is: ``+`` after its commit when it has uncommitted changes (as the history says)."""
    from benchmarks.history import commit_of

    return Side("HEAD", commit_of(ROOT), sys.executable, ROOT)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


# The packages the benchmark harness itself imports, installed into the base's virtualenv beside its package.
HARNESS = ("django-tasks", "django-tasks-db", "celery", "redis", "psycopg", "psycopg-binary")


def _constraints(path: Path) -> Path:
    """This environment's versions as pip constraints, without the package itself (installed editable)."""
    frozen = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True,
                            text=True, check=True).stdout.splitlines()
    pins = [line for line in frozen if "==" in line and not line.lower().startswith("django-durable-workflows")]
    path.write_text("\n".join(pins) + "\n")
    return path


def build(commit: str) -> Side:
    """The base's side, built under the work dir unless a previous run left it ready."""
    sha = _git("rev-parse", "--verify", f"{commit}^{{commit}}")
    home = WORK / f"base-{sha[:12]}"
    tree, venv, ready = home / "tree", home / "venv", home / "ready"
    python = venv / "bin" / "python"
    if ready.exists() and python.exists() and (tree / "pyproject.toml").exists():
        log(f"== base {sha[:9]}: reusing {home}")
    else:
        home.mkdir(parents=True, exist_ok=True)
        log(f"== base {sha[:9]}: a worktree and a virtualenv in {home} (once per commit)")
        if not (tree / "pyproject.toml").exists():
            shutil.rmtree(tree, ignore_errors=True)
            # -f -f: a worktree of this path registered by an earlier run whose files were removed since.
            _git("worktree", "add", "-f", "-f", "--detach", str(tree), sha)
        if not python.exists():
            subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "-c", str(_constraints(home / "constraints.txt")), "-e", f"{tree}[all]"], check=True)
        ready.write_text(sha + "\n")
    harness = home / "harness-ready"
    if not harness.exists():
        # What HEAD's benchmark harness loads whatever the base's extras were (django_tasks and its database
        # backend, the Celery and Redis clients, the PostgreSQL driver): a base from before them lacks them.
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "-c", str(_constraints(home / "constraints.txt")), *HARNESS], check=True)
        harness.write_text(sha + "\n")
    driver = home / "driver"
    shutil.rmtree(driver, ignore_errors=True)
    shutil.copytree(ROOT / "benchmarks", driver / "benchmarks",
                    ignore=shutil.ignore_patterns("__pycache__", "*.md", "*.png", "*.json", "quick", "profiles", "ab"))
    version = subprocess.run([str(python), "-c", "import django_workflows as p; print(p.__file__)"], cwd=driver,
                             env={**os.environ, "PYTHONPATH": str(driver)}, capture_output=True, text=True)
    if not version.stdout.strip().startswith(str(tree)):
        raise SystemExit(f"the base's interpreter does not import its own package: {version.stdout}{version.stderr}")
    return Side("base", sha[:9], str(python), driver)
