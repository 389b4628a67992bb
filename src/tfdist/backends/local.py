"""Tasks as processes on this machine.

Each task runs in its own session (so it has its own process group, and a Ctrl-C at the
terminal reaches tfdist, which then stops the tasks in order). Three layers make sure no
process outlives the job: stop() signals whole process groups (SIGTERM, grace, SIGKILL);
every task has PR_SET_PDEATHSIG=SIGKILL; and a guardian process kills the groups if tfdist
itself is SIGKILLed (see guardian.py).

Per task there are two threads: one reads its output line by line, one waits for its exit
and reports it at once, so the supervisor learns of an exit within milliseconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tfdist.backends.base import Backend, Exited, Output, Progress, Started, line_event
from tfdist.backends.gpus import assign_gpus, visible_gpus
from tfdist.backends.ports import PortHolder
from tfdist.cluster import Task, TaskId, needs_address, task_ids
from tfdist.errors import BackendError, SpecError
from tfdist.spec import JobSpec

_PR_SET_PDEATHSIG = 1
_GUARDIAN = Path(__file__).with_name("guardian.py")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def task_path(job_env: dict[str, str]) -> str:
    """PATH for tasks: tfdist's own Python environment first, as if it were activated,
    so ``command: [python, train.py]`` runs the interpreter that has tfdist and TensorFlow.
    A PATH in the job's env wins."""
    if "PATH" in job_env:
        return job_env["PATH"]
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def parse_line(task: str, attempt: int, raw: bytes) -> Output | Progress:
    """One raw line of task output: a progress report or plain output."""
    line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
    return line_event(task, attempt, time.time(), line)


class _Proc:
    def __init__(self, popen: subprocess.Popen[bytes], attempt: int) -> None:
        self.popen = popen
        self.attempt = attempt
        self.done = threading.Event()


class LocalBackend(Backend):
    """Run every task as a child process of tfdist."""

    name = "local"

    def __init__(self, job: JobSpec, run_dir: Path, host: str = "127.0.0.1") -> None:
        super().__init__(job, run_dir)
        self.host = host
        self._ports = PortHolder(host)
        self._procs: dict[str, _Proc] = {}
        self._lock = threading.Lock()
        self._gpus: dict[str, list[str]] = {}
        self._guardian: subprocess.Popen[str] | None = None

    # -- before anything starts ------------------------------------------------------

    def check(self) -> None:
        workdir = Path(self.job.workdir)
        if not workdir.is_dir():
            raise SpecError(f"workdir: {workdir} does not exist or is not a directory")
        for role in ("chief", "worker", "ps", "evaluator"):
            if not self.job.replicas(role):
                continue
            path = task_path({**self.job.env, **self.job.role(role).env})  # a role may set PATH
            program = self.job.command_for(role)[0]
            if "/" in program:
                found = (workdir / program).is_file() and os.access(workdir / program, os.X_OK)
            else:
                found = shutil.which(program, path=path) is not None
            if not found:
                raise SpecError(
                    f"roles.{role}.command: '{program}' was not found "
                    f"(looked in {'the workdir' if '/' in program else 'PATH'}); "
                    "check the command or install it"
                )
        wanted = [(t.name, self.job.role(t.role).resources.gpus) for t in task_ids(self.job)]
        self._gpus = assign_gpus(wanted, visible_gpus() if any(n for _, n in wanted) else [])

    def reserve(self, tasks: list[TaskId]) -> dict[str, str]:
        try:
            return {
                t.name: f"{self.host}:{self._ports.reserve()}" for t in tasks if needs_address(t)
            }
        except OSError as err:
            raise BackendError(f"could not reserve a port on {self.host}: {err}") from None

    # -- running ---------------------------------------------------------------------

    def _ensure_guardian(self) -> subprocess.Popen[str]:
        if self._guardian is None:
            self._guardian = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_GUARDIAN)],
                stdin=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        return self._guardian

    def _tell_guardian(self, message: str) -> None:
        guardian = self._guardian
        if guardian and guardian.stdin and guardian.poll() is None:
            with contextlib.suppress(OSError):
                guardian.stdin.write(message + "\n")
                guardian.stdin.flush()

    def start(self, task: Task, attempt: int) -> None:
        guardian = self._ensure_guardian()
        env = dict(os.environ)
        env["PATH"] = task_path(self.job.env)
        env["TF_GRPC_REUSE_PORT"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ",".join(self._gpus.get(task.name, []))
        env.update(task.env)
        try:
            popen = subprocess.Popen(
                task.command,
                cwd=self.job.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except OSError as err:
            # Report it like any other failed start: the policy decides what happens.
            self.events.put(Output(task.name, attempt, time.time(), f"tfdist: cannot start: {err}"))
            self.events.put(Exited(task.name, attempt, time.time(), 127, "cannot start"))
            return
        if guardian.poll() is None:
            self._tell_guardian(f"+{popen.pid}")
        proc = _Proc(popen, attempt)
        with self._lock:
            self._procs[task.name] = proc
        self.events.put(Started(task.name, attempt, time.time(), popen.pid, self.host))
        reader = threading.Thread(
            target=self._read, args=(task.name, proc), name=f"read-{task.name}", daemon=True
        )
        reader.start()
        threading.Thread(
            target=self._wait, args=(task.name, proc, reader), name=f"wait-{task.name}", daemon=True
        ).start()

    def _read(self, name: str, proc: _Proc) -> None:
        assert proc.popen.stdout is not None
        for raw in proc.popen.stdout:
            self.events.put(parse_line(name, proc.attempt, raw))

    def _wait(self, name: str, proc: _Proc, reader: threading.Thread) -> None:
        code = proc.popen.wait()
        ended = time.time()
        # Anything left in the task's process group dies with the task.
        with contextlib.suppress(OSError):
            os.killpg(proc.popen.pid, signal.SIGKILL)
        self._tell_guardian(f"-{proc.popen.pid}")
        reader.join(timeout=2.0)  # drain the last lines before reporting the exit
        self.events.put(Exited(name, proc.attempt, ended, code))
        proc.done.set()

    def stop(self, names: list[str], grace: float) -> None:
        with self._lock:
            procs = [self._procs[n] for n in names if n in self._procs]
        live = [p for p in procs if not p.done.is_set()]
        for proc in live:
            with contextlib.suppress(OSError):
                os.killpg(proc.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in live:
            proc.done.wait(timeout=max(0.0, deadline - time.monotonic()))
        for proc in live:
            if not proc.done.is_set():
                with contextlib.suppress(OSError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
        for proc in live:
            proc.done.wait(timeout=10)

    def pids(self) -> dict[str, int]:
        with self._lock:
            return {n: p.popen.pid for n, p in self._procs.items() if not p.done.is_set()}

    def close(self) -> None:
        with self._lock:
            names = list(self._procs)
        self.stop(names, 0)
        self._ports.close()
        if self._guardian is not None:
            self._tell_guardian("exit")
            with contextlib.suppress(OSError):
                if self._guardian.stdin:
                    self._guardian.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._guardian.wait(timeout=5)
            self._guardian = None
