"""The Python API in one place: :func:`run` a job in the foreground, :func:`submit` one
detached, and :func:`handle` a recorded job (``status()``, ``logs()``, ``wait()``, ``stop()``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tfdist import backends, runs
from tfdist.backends.base import BackendOptions
from tfdist.data import plan as data_plan
from tfdist.errors import warn
from tfdist.jobspec.model import JobSpec
from tfdist.states import JobState
from tfdist.supervisor.logs import TaskLogs
from tfdist.supervisor.loop import Supervisor
from tfdist.supervisor.observer import Deferred, Observer, Observers
from tfdist.supervisor.result import JobResult

if TYPE_CHECKING:
    from tfdist.jobs.handle import JobHandle, handle
    from tfdist.jobs.recorder import JobRecorder
    from tfdist.jobs.submit import submit

__all__ = ["BackendOptions", "JobHandle", "JobResult", "handle", "run", "submit"]

#: Imported on first use (PEP 562): ``run`` must not pay for the job store's readers.
_LAZY = {"JobHandle": "tfdist.jobs.handle", "handle": "tfdist.jobs.handle",
         "submit": "tfdist.jobs.submit"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _warn_cold_restarts(job: JobSpec, impl: backends.Backend) -> None:
    """Say at the start which restarts ``restart.warm_spares`` cannot make warm."""
    if not impl.keeps_spares:
        warn(f"restart.warm_spares: the {impl.name} backend keeps no warm spares; restarted tasks "
             "start cold")
        return
    from tfdist import contract
    from tfdist.node.spares import cold_roles, cold_roles_warning

    commands = {r: job.command_for(r) for r in contract.ROLES if job.replicas(r)}
    for role in cold_roles(commands, job.workdir):
        warn(cold_roles_warning(role))


def run(
    job: JobSpec,
    *,
    backend: str = "local",
    options: BackendOptions | None = None,
    run_dir: Path | None = None,
    quiet: bool = False,
    stream: IO[str] | None = None,
    observer: Observer | None = None,
    record: bool = True,
    notes: bool | None = None,
    verbose: bool = False,
) -> JobResult:
    """Run ``job`` in the foreground until it ends.

    Everything that can be checked (commands, the job's size, the store's settings, the runs
    root, then the backend's workdir, GPUs, cluster address) is checked first, by the same
    :func:`~tfdist.jobs.preflight.preflight` as ``submit``, before the run directory is made or
    any task starts, so bad input leaves nothing behind.
    ``notes`` prints tfdist's own lines (a task failed, restarting) even when ``quiet``;
    ``verbose`` echoes TensorFlow's start-up lines and Keras's progress bars too (folded away
    by default).
    ``record`` writes the job to the job store (``tfdist list``); ``observer`` is told of
    every transition and progress report (see :mod:`tfdist.supervisor.observer`). An
    observer that is a context manager (the live view, TensorBoard) is entered once the
    job's checks have passed and exited when it ends, so bad input starts none of them.
    """
    from tfdist.jobs.preflight import preflight

    options, impl = preflight(job, backend, options or BackendOptions(), record=record,
                              runs_root=not run_dir)
    plan = impl.data
    if job.restart.warm_spares:
        _warn_cold_restarts(job, impl)
    run_dir = runs.use_run_dir(run_dir) if run_dir else runs.new_run_dir(job.name, options.runs_root)
    impl.attach(run_dir)
    logs = TaskLogs(run_dir, quiet=quiet, stream=stream, notes=notes, fold=not verbose)
    if plan is not None:
        data_plan.write(plan, run_dir, logs.warn)

    def begin_record() -> JobRecorder | None:
        """``job.yaml`` and the job store's record, once the tasks are started."""
        try:
            (run_dir / runs.JOB_FILE).write_text(job.to_yaml())
        except OSError as err:  # a full disk must not stop a job that can run
            logs.warn(f"cannot write {runs.JOB_FILE} ({err.strerror or err})")
        if not record:
            return None
        from tfdist.jobs.recorder import recorder_for

        return recorder_for(job, run_dir, backend, plan)

    late: Deferred[JobRecorder] = Deferred(begin_record)
    try:
        with Observers(late, observer) as observers:
            result = Supervisor(job, impl, run_dir, logs=logs, observer=observers).run()
        recorder = late.made()
        if result.state is JobState.INTERRUPTED and recorder is not None and recorder.stop_requested():
            result.state = JobState.STOPPED  # `tfdist stop` (or the page): the store says so too
        return result
    except Exception as err:
        recorder = late.made()  # a job that failed before its first task started is recorded too
        if recorder is not None:
            recorder.aborted(err)  # recorded as failed, not left "running" (then "lost")
        raise
    finally:
        recorder = late.made()
        if recorder is not None:
            recorder.close()  # the record's last writes land (or it says what did not)
