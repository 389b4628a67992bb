"""Submit a job detached: check it, record it, start its own supervisor in a new session.

A detached job is ``python -m tfdist.cli run <run_dir>/job.yaml --run-dir <run_dir>`` started
in a new session (so closing the terminal does not reach it) with its output in
``<run_dir>/supervisor.log``. That process is the job's supervisor: it records itself (pid and
start time) in the store, and ``tfdist stop`` sends it SIGTERM, which stops every task
gracefully exactly like Ctrl-C on ``tfdist run``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tfdist import backends, exec_limits, runs
from tfdist.backends.base import BackendOptions
from tfdist.data import plan as data_plan
from tfdist.errors import SpecError
from tfdist.jobs.faults import check_settings
from tfdist.jobs.handle import JobHandle
from tfdist.jobs.store import Store
from tfdist.jobspec.model import JobSpec
from tfdist.pids import start_time
from tfdist.states import JobState


def as_spec(spec: JobSpec | dict[str, Any] | str | Path) -> JobSpec:
    """A JobSpec from a spec, a dict or a job file path."""
    from tfdist.jobspec import load

    if isinstance(spec, JobSpec):
        return spec
    if isinstance(spec, dict):
        return load.from_dict(spec, "job")
    if isinstance(spec, str | Path):
        return load.from_file(spec)
    raise SpecError(f"submit() takes a JobSpec, a dict or a job file path, not {type(spec).__name__}")


def _not_utf8(value: Any, path: str) -> str | None:
    """The dotted field of the first name or text in ``value`` that is not UTF-8 (a lone
    surrogate: a command-line byte Python decoded with surrogateescape), or None."""
    if isinstance(value, str):
        return None if value.isascii() or not any("\ud800" <= c <= "\udfff" for c in value) else path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        where = f"{path}.{key}" if path else str(key)
        found = _not_utf8(key, where) if isinstance(key, str) else None
        found = found or _not_utf8(item, where)
        if found:
            return found
    return None


def submit(
    spec: JobSpec | dict[str, Any] | str | Path,
    *,
    backend: str = "local",
    options: BackendOptions | None = None,
    tensorboard: bool = False,
) -> JobHandle:
    """Start a job detached and return its handle at once.

    Bad input raises :class:`SpecError` before anything starts; a store that cannot be
    used raises :class:`StoreError` before anything starts.
    """
    job = as_spec(spec)
    # The detached run reloads job.yaml from the run directory, where a relative workdir
    # would mean that directory; pin it to the caller's working directory now.
    job = dataclasses.replace(job, workdir=str(Path(job.workdir).resolve()))
    options = options or BackendOptions()
    check_settings()  # a bad TFDIST_STORE(_TIMEOUT) is bad input: refused before anything
    options = dataclasses.replace(options, runs_root=runs.check_runs_root(options.runs_root))
    job.require_commands()  # a TFJob container without command: the image's, unknown here
    where = _not_utf8(job.to_dict(), "")
    if where is not None:  # a byte from the command line: run can pass it on, job.yaml cannot
        raise SpecError(f"{where}: not UTF-8 text; a submitted job is read back from job.yaml, which "
                        "cannot carry it: give UTF-8 text, or use tfdist run")
    exec_limits.check_job(job, os.environ if backend == "local" else None)  # E2BIG at start
    checker = backends.create(backend, job, options)
    try:
        checker.check()  # bad input: exit 2 before anything is made
        plan = data_plan.make(job)  # a glob that matches nothing, a store that is down: the same
        if plan is not None:
            checker.check_data(plan)
    finally:
        checker.close()  # e.g. the Ray backend's connection: the detached run makes its own
    store = Store()
    run_dir = runs.new_run_dir(job.name, options.runs_root)
    try:
        (run_dir / runs.JOB_FILE).write_text(job.to_yaml())
        job_id = store.create_job(
            run_dir.name,
            name=job.name,
            run_dir=str(run_dir),
            backend=backend,
            state=JobState.SUBMITTED,
            detached=True,
            max_restarts=job.restart_budget,
        )
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    argv = [sys.executable, "-m", "tfdist.cli", "run", str(run_dir / runs.JOB_FILE),
            "--backend", backend, *options.to_argv(), "--run-dir", str(run_dir), "--quiet"]
    if tensorboard:
        argv.append("--tensorboard")
    with open(run_dir / runs.SUPERVISOR_LOG, "ab") as out:
        popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
        )
    store.set_supervisor(job_id, popen.pid, start_time(popen.pid))
    store.close()
    return JobHandle(job_id, popen=popen)
