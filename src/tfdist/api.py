"""The Python API: run a job spec on a backend and get a :class:`JobResult`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO, Any

from tfdist import backends
from tfdist.spec import JobSpec
from tfdist.supervisor.logs import TaskLogs
from tfdist.supervisor.loop import JobResult, Supervisor

DEFAULT_RUNS = "tfdist-runs"


def new_run_dir(job: JobSpec, root: str | Path = DEFAULT_RUNS) -> Path:
    """``<root>/<job>-<YYYYmmdd-HHMMSS>[-N]``: unique, sortable, readable."""
    base = Path(root).resolve() / f"{job.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    candidate, n = base, 1
    while True:
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            n += 1
            candidate = base.with_name(f"{base.name}-{n}")


def run(
    job: JobSpec,
    *,
    backend: str = "local",
    runs_root: str | Path = DEFAULT_RUNS,
    run_dir: Path | None = None,
    quiet: bool = False,
    stream: IO[str] | None = None,
    backend_options: dict[str, Any] | None = None,
    observer: Any = None,
    record: bool = True,
) -> JobResult:
    """Run ``job`` in the foreground until it ends.

    Everything the backend can check (commands, workdir, GPUs, cluster address) is checked
    before the run directory is made or any task starts, so bad input leaves nothing behind.
    ``record`` writes the job to the job store (``tfdist list``); ``observer`` is told of
    every transition and progress report (see :class:`tfdist.jobs.Observers`).
    """
    pending_dir = run_dir or Path(runs_root).resolve() / "pending"
    impl = backends.create(backend, job, pending_dir, **(backend_options or {}))
    impl.check()
    if run_dir is None:
        run_dir = new_run_dir(job, runs_root)
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
    impl.run_dir = run_dir
    (run_dir / "job.yaml").write_text(job.to_yaml())
    logs = TaskLogs(run_dir, quiet=quiet, stream=stream)
    recorder = None
    if record:
        from tfdist.jobs import Observers, recorder_for

        recorder = recorder_for(job, run_dir, backend)
        observer = Observers(recorder, observer)
    try:
        return Supervisor(job, impl, run_dir, logs=logs, observer=observer).run()
    except Exception as err:
        if recorder is not None:
            recorder.aborted(err)  # recorded as failed, not left "running" (then "lost")
        raise
