"""Job management: record jobs in the store, submit detached jobs, stop, clean, read logs.

A detached job is ``python -m tfdist.cli run <run_dir>/job.yaml --run-dir <run_dir>`` started
in a new session (so closing the terminal does not reach it) with its output in
``<run_dir>/supervisor.log``. That process is the job's supervisor: it records itself (pid and
start time) in the store, and ``tfdist stop`` sends it SIGTERM, which stops every task
gracefully exactly like Ctrl-C on ``tfdist run``.

:func:`submit` is the Python API; it returns a :class:`JobHandle`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from tfdist.errors import SpecError, StoreError, TfdistError
from tfdist.store import FINAL, Store, process_start

SUPERVISOR_LOG = "supervisor.log"


# -- observers of a running supervisor ------------------------------------------------------


class Observers:
    """Several observers as one; an observer that raises is dropped with a warning."""

    def __init__(self, *observers: Any) -> None:
        self.observers = [o for o in observers if o is not None]
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Observers:
        """Enter the observers that are context managers (live display, TensorBoard)."""
        for obs in self.observers:
            if hasattr(obs, "__enter__"):
                self._stack.enter_context(obs)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _call(self, method: str, *args: Any) -> None:
        for obs in list(self.observers):
            try:
                getattr(obs, method)(*args)
            except Exception as err:  # an observer must never break the job
                self.observers.remove(obs)
                print(f"tfdist: warning: {type(obs).__name__} stopped: {err}", file=sys.stderr)

    def transition(self, sup: Any, status: Any, row: dict[str, Any]) -> None:
        self._call("transition", sup, status, row)

    def progress(self, sup: Any, status: Any, when: float, data: dict[str, Any]) -> None:
        self._call("progress", sup, status, when, data)

    def finished(self, sup: Any, result: Any) -> None:
        self._call("finished", sup, result)


def _task_row(status: Any) -> dict[str, Any]:
    return {
        "name": status.name,
        "role": status.role,
        "index": status.index,
        "state": status.state.value,
        "attempt": status.attempt,
        "restarts": status.restarts,
        "pid": status.pid,
        "host": status.host,
        "address": status.address,
        "exit_code": status.exit_code,
        "reason": status.reason,
        "started_at": status.started_at,
        "ended_at": status.ended_at,
    }


class JobRecorder:
    """Writes a running job to the store (an observer of the Supervisor)."""

    def __init__(self, store: Store, job_id: str) -> None:
        self.store = store
        self.job_id = job_id

    @classmethod
    def start(cls, job: Any, run_dir: Path, backend: str, store: Store | None = None) -> JobRecorder:
        """Record the job as running in this process (a submitted job keeps its id)."""
        store = store or Store()
        pid = os.getpid()
        job_id = store.create_job(
            run_dir.name,
            name=job.name,
            run_dir=str(run_dir),
            backend=backend,
            state="running",
            max_restarts=job.restart_budget,
        )
        store.job_running(job_id, pid, process_start(pid))
        return cls(store, job_id)

    def transition(self, sup: Any, status: Any, row: dict[str, Any]) -> None:
        self.store.task_transition(self.job_id, _task_row(status), row["time"], sup.restarts_used)

    def progress(self, sup: Any, status: Any, when: float, data: dict[str, Any]) -> None:
        self.store.task_progress(self.job_id, status.name, status.attempt, when, data)

    def finished(self, sup: Any, result: Any) -> None:
        cause = asdict(result.root_cause) if result.root_cause else None
        self.store.job_finished(
            self.job_id,
            state=result.state,
            exit_code=result.exit_code,
            restarts_used=result.restarts_used,
            root_cause=cause,
            metrics=result.metrics,
            ended_at=result.ended_at,
        )


    def aborted(self, err: BaseException) -> None:
        """The supervisor raised before it could finish (e.g. no port to reserve)."""
        with contextlib.suppress(StoreError):
            self.store.mark(self.job_id, "failed", f"{type(err).__name__}: {err}")


def recorder_for(job: Any, run_dir: Path, backend: str) -> JobRecorder | None:
    """A recorder, or None (with a one-line warning) when the store cannot be used: a broken
    store must not stop a foreground job from running."""
    try:
        return JobRecorder.start(job, run_dir, backend)
    except StoreError as err:
        print(f"tfdist: warning: this job is not recorded: {err}", file=sys.stderr)
        return None


# -- submitting ---------------------------------------------------------------------------


def _as_spec(spec: Any) -> Any:
    from tfdist import spec as spec_mod

    if isinstance(spec, spec_mod.JobSpec):
        return spec
    if isinstance(spec, dict):
        return spec_mod.from_dict(spec, "job")
    if isinstance(spec, str | Path):
        return spec_mod.load(spec)
    raise SpecError(f"submit() takes a JobSpec, a dict or a job file path, not {type(spec).__name__}")


def submit(
    spec: Any,
    *,
    backend: str = "local",
    runs_root: str | Path = "tfdist-runs",
    backend_options: dict[str, Any] | None = None,
    tensorboard: bool = False,
) -> JobHandle:
    """Start a job detached and return its handle at once.

    Bad input raises :class:`SpecError` before anything starts; a store that cannot be
    used raises :class:`StoreError` before anything starts.
    """
    from tfdist import api, backends

    job = _as_spec(spec)
    # The detached run reloads job.yaml from the run directory, where a relative workdir
    # would mean that directory; pin it to the caller's working directory now.
    job = job.model_copy(update={"workdir": str(Path(job.workdir).resolve())})
    options = dict(backend_options or {})
    pending = Path(runs_root).resolve() / "pending"
    checker = backends.create(backend, job, pending, **options)
    try:
        checker.check()  # bad input: exit 2 before anything is made
    finally:
        checker.close()  # e.g. the Ray backend's connection: the detached run makes its own
    store = Store()
    run_dir = api.new_run_dir(job, runs_root)
    try:
        (run_dir / "job.yaml").write_text(job.to_yaml())
        job_id = store.create_job(
            run_dir.name,
            name=job.name,
            run_dir=str(run_dir),
            backend=backend,
            state="submitted",
            detached=True,
            max_restarts=job.restart_budget,
        )
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    argv = [sys.executable, "-m", "tfdist.cli", "run", str(run_dir / "job.yaml"),
            "--backend", backend, "--runs-dir", str(Path(runs_root).resolve()),
            "--run-dir", str(run_dir), "--quiet"]
    if options.get("address"):
        argv += ["--ray-address", str(options["address"])]
    if tensorboard:
        argv.append("--tensorboard")
    with open(run_dir / SUPERVISOR_LOG, "ab") as out:
        popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
        )
    store.set_supervisor(job_id, popen.pid, process_start(popen.pid))
    store.close()
    return JobHandle(job_id, popen=popen)


# -- acting on recorded jobs ---------------------------------------------------------------


def _alive(job: dict[str, Any]) -> bool:
    from tfdist.store import supervisor_alive

    return supervisor_alive(job.get("supervisor_pid"), job.get("supervisor_start"))


def stop(store: Store, ref: str, grace: float = 30.0, *, echo: IO[str] | None = None) -> dict[str, Any]:
    """SIGTERM the job's supervisor (it stops its tasks gracefully), SIGKILL after ``grace``
    seconds. Returns the job as recorded afterwards."""
    import psutil

    job = store.job(ref)
    if job["state"] in FINAL or job["state"] == "lost":
        return job
    pid = job["supervisor_pid"]
    store.request_stop(job["id"])
    if not pid or not _alive(job):
        store.mark(job["id"], "stopped", "stopped before its supervisor started")
        return store.job(job["id"])
    try:
        proc = psutil.Process(pid)
        proc.send_signal(signal.SIGTERM)
    except psutil.Error:
        return store.job(job["id"])
    forced = False
    try:
        proc.wait(timeout=grace)
    except psutil.TimeoutExpired:
        if echo:
            echo.write(f"tfdist: {job['id']} did not stop within {grace:g}s; killing it\n")
        with contextlib.suppress(psutil.Error):
            proc.kill()  # the supervisor's guardian then kills every task's process group
            proc.wait(timeout=10)
        forced = True
    except psutil.Error:
        pass
    # A supervisor that handled SIGTERM recorded its own end before exiting; one killed
    # (or that died before it could handle the signal) did not, so record it here.
    after = store.job(job["id"])
    if after["recorded_state"] not in FINAL:
        store.mark(job["id"], "stopped", "killed by tfdist stop" if forced else "stopped")
        after = store.job(job["id"])
    return after


def describe(store: Store, ref: str, *, transitions: bool = False) -> dict[str, Any]:
    """A job with its tasks (and, with ``transitions``, every state transition and every
    task attempt: the restart history); tasks of a lost job that were not over are shown
    as ``lost`` too, since nobody watches them any more."""
    job = store.job(ref)
    job["tasks"] = store.tasks(job["id"])
    if job["state"] == "lost":
        for task in job["tasks"]:
            if task["state"] not in ("succeeded", "failed", "stopped"):
                task["state"] = "lost"
    if transitions:
        job["transitions"] = store.transitions(job["id"])
        job["attempts"] = store.attempts(job["id"])
    start = job["started_at"]
    job["duration"] = round((job["ended_at"] or time.time()) - start, 3) if start else None
    return job


def parse_age(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``45s`` or plain seconds -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = text.strip().lower()
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise SpecError(f"--older-than: cannot read '{text}'; give e.g. 7d, 12h, 30m") from None


def clean(store: Store, older_than: float, *, dry_run: bool = False) -> list[dict[str, Any]]:
    """Remove ended (or lost) jobs that ended more than ``older_than`` seconds ago: their
    run directories and their records. Returns the jobs removed."""
    now = time.time()
    removed = []
    for job in store.jobs():
        if job["state"] not in FINAL and job["state"] != "lost":
            continue
        ended = job["ended_at"] or job["started_at"] or job["submitted_at"] or now
        if now - ended < older_than:
            continue
        removed.append(job)
        if dry_run:
            continue
        run_dir = Path(job["run_dir"] or "")
        if job["run_dir"] and run_dir.is_dir() and (run_dir / "job.yaml").exists():
            shutil.rmtree(run_dir, ignore_errors=True)
        store.delete_job(job["id"])
    return removed


def log_files(job: dict[str, Any], task: str | None, tasks: list[str]) -> list[tuple[str, Path]]:
    """(label, path) of the logs to show: one task, or every task in order."""
    run_dir = Path(job["run_dir"])
    if task == "supervisor":
        return [("supervisor", run_dir / SUPERVISOR_LOG)]
    if task is not None:
        if tasks and task not in tasks:
            raise SpecError(f"job {job['id']} has no task '{task}'; its tasks are {', '.join(tasks)}")
        return [(task, run_dir / "logs" / f"{task}.log")]
    names = tasks or sorted(p.stem for p in (run_dir / "logs").glob("*.log"))
    return [(n, run_dir / "logs" / f"{n}.log") for n in names]


def tail_lines(path: Path, n: int | None) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    lines = text.splitlines()
    return lines if n is None else lines[-n:] if n > 0 else []


def follow(store: Store, job_id: str, files: list[tuple[str, Path]], out: IO[str],
           prefix: bool, tail: int | None, poll: float = 0.25) -> None:
    """Print the logs, then new lines as they come, until the job ends (or is lost)."""
    offsets: dict[Path, int] = {}
    for label, path in files:
        lines = tail_lines(path, tail)
        for line in lines:
            out.write(f"[{label}] {line}\n" if prefix else line + "\n")
        offsets[path] = path.stat().st_size if path.exists() else 0
    out.flush()
    partial: dict[Path, str] = {}
    while True:
        ended = store.job(job_id)["state"] not in ("submitted", "running")
        for label, path in files:
            try:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    handle.seek(offsets[path])
                    chunk = handle.read()
                    offsets[path] = handle.tell()
            except FileNotFoundError:
                continue
            text = partial.pop(path, "") + chunk
            *lines, rest = text.split("\n")
            if rest:
                partial[path] = rest
            for line in lines:
                out.write(f"[{label}] {line}\n" if prefix else line + "\n")
        out.flush()
        if ended:
            return
        time.sleep(poll)


# -- the Python handle ------------------------------------------------------------------------


class JobHandle:
    """A recorded job: ``status()``, ``logs()``, ``wait()``, ``stop()``."""

    def __init__(self, job_id: str, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.id = job_id
        self._popen = popen

    def __repr__(self) -> str:
        return f"JobHandle({self.id!r})"

    @contextlib.contextmanager
    def _store(self) -> Iterator[Store]:
        store = Store()
        try:
            yield store
        finally:
            store.close()

    def _reap(self) -> None:
        if self._popen is not None:
            self._popen.poll()  # a finished supervisor we started must not linger as a zombie

    def status(self) -> dict[str, Any]:
        """The job as recorded (``state`` is effective: ``lost`` if its supervisor died),
        with ``tasks``: each task's state, pid, host, address, restarts, exit code, progress."""
        self._reap()
        with self._store() as store:
            return describe(store, self.id)

    @property
    def state(self) -> str:
        return str(self.status()["state"])

    def logs(self, task: str | None = None, tail: int | None = None) -> str:
        """A task's log (every task's, prefixed with ``[task]``, when ``task`` is None)."""
        job = self.status()
        files = log_files(job, task, [t["name"] for t in job["tasks"]])
        lines: list[str] = []
        for label, path in files:
            for line in tail_lines(path, tail):
                lines.append(line if task else f"[{label}] {line}")
        return "\n".join(lines) + ("\n" if lines else "")

    def wait(self, timeout: float | None = None, poll: float = 0.2) -> dict[str, Any]:
        """Block until the job ends (or is lost); returns its final status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.status()
            if job["state"] not in ("submitted", "running"):
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {self.id} still {job['state']} after {timeout:g}s")
            time.sleep(poll)

    def stop(self, grace: float = 30.0) -> dict[str, Any]:
        with self._store() as store:
            stop(store, self.id, grace)
        self._reap()
        return self.status()


def handle(job_id: str) -> JobHandle:
    """A handle on a job already recorded (a unique id prefix is enough)."""
    with contextlib.closing(Store()) as store:
        return JobHandle(store.job(job_id)["id"])


__all__ = ["JobHandle", "JobRecorder", "Observers", "TfdistError", "handle", "submit"]
