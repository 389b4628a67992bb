"""Building a job environment once, safely, and recording who uses it.

One file lock per key (``<envs>/<key>.lock``, flock) serialises everything that touches one
environment: two jobs that ask for the same new environment at once build it once (the
second waits, then reuses), and ``tfdist env clean`` never removes one while a job is taking
it. The environment is built at its final path (a venv's scripts embed that path, so it
cannot be built elsewhere and renamed) and counts as present only once :data:`META` is
written, last and atomically; a failed build is removed before the lock is released, and
the debris of a killed one is removed by the next build under the same lock.

uv builds it (``uv venv`` + ``uv pip install``: seconds); without uv, ``python -m venv`` +
pip. ``TFDIST_ENV_TOOL=pip`` forces the fallback.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from tfdist.errors import SpecError
from tfdist.pyenv.plan import LAYER_PTH, Plan, error_line, install_args, layer_pth, plan_for

if TYPE_CHECKING:
    from tfdist.jobspec.model import JobSpec

#: Written last: an environment without it is unfinished.
META = "tfdist-env.json"
#: One JSON line per use: job, run, pid and its start time (who is using it now).
USES = "uses.jsonl"
LOCK_SUFFIX = ".lock"


def envs_root() -> Path:
    from tfdist.home import home

    return home().resolve() / "envs"


def find_uv() -> str | None:
    """uv from the ``uv`` package (tfdist's ``envs`` extra), else from PATH."""
    if os.environ.get("TFDIST_ENV_TOOL") == "pip":
        return None
    with contextlib.suppress(ImportError, FileNotFoundError):
        from uv import find_uv_bin

        return str(find_uv_bin())
    return shutil.which("uv")


@contextlib.contextmanager
def locked(path: Path, out: IO[str] | None = None, what: str = "") -> Iterator[None]:
    """Hold the flock on ``path``; say so when another process has it (a build can take
    minutes, and silence would look like a hang)."""
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if out is not None:
                print(f"tfdist: waiting for another tfdist using {what or path.stem}", file=out, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def site_packages(env: Path) -> Path:
    return env / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def ensure(job: JobSpec, out: IO[str] | None = None) -> Path | None:
    """The job's environment, built now if it is not cached; None when the job asks for none.

    Bad input (a missing requirements file, an unresolvable requirement, an unreachable
    index) is a one-line SpecError and leaves nothing in the cache."""
    if not job.python.wanted:
        return None
    out = out or sys.stderr
    plan = plan_for(job.python, job.workdir)
    root = envs_root()
    env = root / plan.key
    uv = find_uv()
    # Resolve before anything is written: bad input leaves not even a lock file behind.
    resolved = None if (env / META).is_file() else [resolve(plan, uv)]
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecError(
            f"python: cannot create {root} ({err.strerror}); set TFDIST_HOME to a writable directory"
        ) from None
    with locked(root / (plan.key + LOCK_SUFFIX), out, f"the Python environment {plan.key}"):
        if (env / META).is_file():
            print(f"tfdist: reusing the Python environment {plan.key}", file=out, flush=True)
        else:
            if env.exists():  # a build that was killed
                shutil.rmtree(env, ignore_errors=True)
            try:
                lock = resolved[0] if resolved else resolve(plan, uv)  # removed since we looked
                build(plan, env, job.name, out, uv, lock)
            except BaseException:
                shutil.rmtree(env, ignore_errors=True)
                raise
        record_use(env, job.name)
    return env


def _tool_env() -> dict[str, str]:
    env = dict(os.environ, PIP_PROGRESS_BAR="off", PIP_DISABLE_PIP_VERSION_CHECK="1", NO_COLOR="1")
    env.pop("PYTHONPATH", None)  # the installer must see the bare environment
    return env


def _run(argv: list[str], out: IO[str], seen: list[str]) -> int:
    """Run one build step, echoing its output as it comes (uv and pip print progress)."""
    env = _tool_env()
    try:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, env=env,
        )
    except OSError as err:
        seen.append(f"error: cannot run {argv[0]}: {err.strerror}")
        return 127
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line.rstrip())
        print(f"tfdist:   {line.rstrip()}", file=out, flush=True)
    return proc.wait()


def resolve(plan: Plan, uv: str | None) -> str | None:
    """Resolve ``plan`` quietly before anything is made, so bad input (an unresolvable
    requirement, an unreachable index) is one line and leaves nothing behind. With uv the
    result is the lock the environment is installed from; pip resolves with ``--dry-run``."""
    if uv:
        stdin = "".join(f"{r}\n" for r in plan.requirements)
        if plan.requirements_file:
            stdin += f"-r {plan.requirements_file}\n"
        index = ["--index-url", plan.index_url] if plan.index_url else []
        argv = [uv, "pip", "compile", "--quiet", "--no-header", "--python", sys.executable, *index, "-"]
    else:
        stdin = ""
        argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                "--no-input", *install_args(plan)]
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=_tool_env())
    if done.returncode != 0:
        raise SpecError(
            "python.requirements: cannot build the job's environment: "
            + error_line((done.stdout + "\n" + done.stderr).splitlines())
        )
    return done.stdout if uv else None


def build(plan: Plan, env: Path, job_name: str, out: IO[str], uv: str | None, lock: str | None) -> None:
    """Build ``plan`` at ``env`` with ``uv`` (else venv + pip), from ``resolve``'s ``lock``;
    raise SpecError with the tool's one line when it fails."""
    tool = "uv" if uv else "pip"
    started = time.monotonic()
    print(
        f"tfdist: building the Python environment {plan.key} for job {job_name} "
        f"({plan.count} requirement(s), {tool}); this can take minutes",
        file=out, flush=True,
    )
    python = env / "bin" / "python"
    if uv:
        index = ["--index-url", plan.index_url] if plan.index_url else []
        steps = [
            [uv, "venv", "--quiet", "--python", sys.executable, str(env)],
            [uv, "pip", "install", "--compile-bytecode", "--python", str(python), *index,
             "-r", str(env / "requirements.lock")],
        ]
    else:
        steps = [
            [sys.executable, "-m", "venv", str(env)],
            [str(python), "-m", "pip", "install", "--no-input", *install_args(plan)],
        ]
    seen: list[str] = []
    for i, argv in enumerate(steps):
        if i == 1 and lock is not None:
            (env / "requirements.lock").write_text(lock)
        if _run(argv, out, seen) != 0:
            raise SpecError(f"python.requirements: cannot build the job's environment: {error_line(seen)}")
    (site_packages(env) / LAYER_PTH).write_text(layer_pth(plan.base_dirs))
    if lock is None:
        freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True)
        (env / "requirements.lock").write_text(freeze.stdout)
    seconds = time.monotonic() - started
    meta = {
        "key": plan.key, "requirements": list(plan.requirements),
        "requirements_file": str(plan.requirements_file) if plan.requirements_file else None,
        "index_url": plan.index_url, "tool": tool, "python": sys.version.split()[0],
        "base": list(plan.base_dirs), "built_at": time.time(), "build_seconds": round(seconds, 2),
        "built_for": job_name,
    }
    tmp = env / (META + ".tmp")
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, env / META)
    print(f"tfdist: built the Python environment {plan.key} in {seconds:.1f} s", file=out, flush=True)


def record_use(env: Path, job_name: str, run: str | None = None) -> None:
    """Append who uses ``env`` now (this process, with its start time so a reused pid does not
    count): ``env list`` shows it, ``env clean`` keeps an environment whose user still runs."""
    from tfdist.pids import start_time

    row = {"time": time.time(), "job": job_name, "run": run, "pid": os.getpid(),
           "start": start_time(os.getpid())}
    with contextlib.suppress(OSError), open(env / USES, "a") as handle:
        handle.write(json.dumps(row) + "\n")
