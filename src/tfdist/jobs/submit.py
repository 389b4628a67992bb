"""Submit a job detached: check it, record it, start its own supervisor in a new session.

A detached job is ``python -m tfdist.cli run <run_dir>/job.yaml --run-dir <run_dir>`` started
in a new session (so closing the terminal does not reach it) with its output in
``<run_dir>/supervisor.log``. That process is the job's supervisor: it records itself (pid and
start time) in the store, and ``tfdist stop`` sends it SIGTERM, which stops every task
gracefully exactly like Ctrl-C on ``tfdist run``.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tfdist import runs
from tfdist.backends.base import BackendOptions
from tfdist.errors import SpecError
from tfdist.jobs.handle import JobHandle
from tfdist.jobs.preflight import preflight
from tfdist.jobs.records import JobRecord
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


def spec_like(job: JobRecord, text: str, overrides: list[str] | None = None,
              notes: list[str] | None = None) -> JobSpec:
    """The spec to run again like ``job`` (``tfdist submit --like``, the page's Resubmit):
    its stored ``job.yaml`` (``text``, read by the caller) with ``overrides`` on top."""
    from tfdist.jobspec import load

    if not job.run_dir:
        raise SpecError(f"--like: job {job.id} has no run directory, so no stored spec to run again")
    return load.from_text(text, f"{job.id}/{runs.JOB_FILE}", Path(job.run_dir), overrides, notes)


def options_like(job: JobRecord) -> tuple[str, BackendOptions]:
    """The backend and options to run again like ``job``: its backend, its runs directory
    (the parent of its run directory). A Ray address or Spark master given on its command
    line is not stored: the job's own spec (``ray.address``, ``spark.master``) or the
    backend's default applies."""
    root = Path(job.run_dir).parent if job.run_dir else Path(runs.DEFAULT_RUNS)
    return job.backend or "local", BackendOptions(runs_root=root)


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
    options, checker = preflight(job, backend, options or BackendOptions(), detached=True)
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
            labels=job.labels,
        )
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    argv = [sys.executable, "-m", "tfdist.cli", "run", str(run_dir / runs.JOB_FILE),
            "--backend", backend, *options.to_argv(), "--run-dir", str(run_dir), "--quiet",
            "--notes"]
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
