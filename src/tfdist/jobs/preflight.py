"""The checks before a job starts, once, in one order, for ``run`` and ``submit`` alike.

Bad input is refused before a run directory is made, a record written or a task started
(one line, exit 2): the first failing check names its field. Both :func:`tfdist.api.run` and
:func:`tfdist.jobs.submit.submit` call :func:`preflight`, so the same bad input gets the same
message from either, whatever else is wrong with it. The order goes from what the job file
says to what the machine and the cluster say:

1. commands: every role has one (a TFJob container without a command runs its image's,
   unknown here);
2. the job: a submitted job is read back from ``job.yaml``, which cannot carry text that is
   not UTF-8; no argument or environment too big for the kernel's ``exec`` (E2BIG);
3. settings: ``TFDIST_STORE`` and ``TFDIST_STORE_TIMEOUT``, when the job is recorded;
4. the runs root, when no run directory was given: a directory that can be made and written,
   with room for the run directories below it;
5. the backend: built, then its own :meth:`~tfdist.backends.base.Backend.check` (programs,
   workdir, GPUs, the cluster's address);
6. the data: the inputs listed and the stores reached (a glob that matches nothing, fewer
   files than workers, a store that is down), and what of it the backend can do; the plan
   is handed to the backend (:attr:`~tfdist.backends.base.Backend.data`).

Then the backend's :meth:`~tfdist.backends.base.Backend.warnings` (what the job file cannot
settle, such as a parameter-server job on Kubernetes without a shared volume) go to stderr.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any

from tfdist import backends, exec_limits, runs
from tfdist.backends.base import Backend, BackendOptions
from tfdist.errors import SpecError, warn
from tfdist.jobspec.model import JobSpec


def not_utf8(value: Any, path: str = "") -> str | None:
    """The dotted field of the first name or text in ``value`` that is not UTF-8 (a lone
    surrogate: a command-line byte Python decoded with surrogateescape), or None."""
    if isinstance(value, str):
        return None if value.isascii() or not any("\ud800" <= c <= "\udfff" for c in value) else path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        where = f"{path}.{key}" if path else str(key)
        found = not_utf8(key, where) if isinstance(key, str) else None
        found = found or not_utf8(item, where)
        if found:
            return found
    return None


def preflight(job: JobSpec, backend: str, options: BackendOptions, *, record: bool = True,
              runs_root: bool = True, detached: bool = False) -> tuple[BackendOptions, Backend]:
    """Check ``job`` for ``backend`` (see the module's docstring for the order); raise
    :class:`~tfdist.errors.SpecError` (or StoreError for a store setting) at the first problem.

    ``record``: the job goes to the job store (its settings are checked); ``runs_root``: a
    new run directory will be made under ``options.runs_root`` (checked, and returned
    resolved in the options); ``detached``: the job is read back from ``job.yaml``. Returns
    the options and the checked backend, which the caller attaches and closes (a backend
    whose check failed is closed here)."""
    job.require_commands()
    if detached:
        where = not_utf8(job.to_dict())
        if where is not None:  # a byte from the command line: run can pass it on, job.yaml cannot
            raise SpecError(f"{where}: not UTF-8 text; a submitted job is read back from job.yaml, "
                            "which cannot carry it: give UTF-8 text, or use tfdist run")
    exec_limits.check_job(job, os.environ if backend == "local" else None)
    if record:
        from tfdist.jobs.faults import check_settings

        check_settings()
    if runs_root:
        options = dataclasses.replace(options, runs_root=runs.check_runs_root(options.runs_root))
    impl = backends.create(backend, job, options)
    try:
        impl.check()
        from tfdist.data import plan as data_plan  # a job without data imports none of it

        plan = data_plan.make(job)
        if plan is not None:
            impl.use_data(plan)
    except BaseException:
        with contextlib.suppress(Exception):  # the bad input is the message, not the close
            impl.close()  # e.g. the Ray backend's connection: nothing is left behind
        raise
    for note in impl.warnings():  # after every refusal: bad input stays one line
        warn(note)
    return options, impl
