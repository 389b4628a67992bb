"""Tasks as processes on this machine.

Each task is a :class:`~tfdist.node.procs.TaskProcess`: its own session and process
group, killed if tfdist dies (PR_SET_PDEATHSIG, and a guardian process for its whole group;
the signal is set by the preloaded netguard library where it reaches the task's program,
else by an exec of ``setpriv``),
output read in chunks and pushed as events the moment it arrives, its exit reported as soon
as it is reaped. Ports are held with SO_REUSEPORT for the whole job (see procs.hold_port).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tfdist import contract
from tfdist.backends.base import (
    Active,
    Backend,
    BackendOptions,
    Exited,
    Output,
    Progress,
    Started,
    Usage,
    line_events,
)
from tfdist.backends.gpus import assign_gpus, visible_gpus
from tfdist.backends.netguard import NetGuard, preload_reaches, prepare
from tfdist.cluster import Task, TaskId, needs_address, task_ids
from tfdist.errors import BackendError, SpecError
from tfdist.jobspec.model import JobSpec
from tfdist.node import cgroups, leave_program, usage
from tfdist.node.guardian import Guardian
from tfdist.node.procs import (
    PortHolder,
    TaskProcess,
    find_setpriv,
    kill_marked,
    python_first,
    task_environ,
    terminate_all,
)
from tfdist.states import describe_memory_kill

if TYPE_CHECKING:  # imported when a job wants warm spares (ast, json, a thread): not on every start
    from tfdist.node.spares import Handover, Sink, SparePool
    from tfdist.node.staging import Prepared

#: Open files the supervisor holds per task: output pipe, pidfd, log file, held port.
FILES_PER_TASK = 4
#: Processes and threads per task counted against RLIMIT_NPROC: the task and its thread.
PROCS_PER_TASK = 2


def _nothing() -> None:
    """What keeping the outputs of a task without any is."""


def ensure_limits(tasks: int) -> None:
    """Raise the soft limits on open files and processes as far as the hard limits allow for
    ``tasks`` tasks; refuse (before anything starts) when even the hard limits are too low."""
    for name, limit, need, what in (
        ("ulimit -n", resource.RLIMIT_NOFILE, FILES_PER_TASK * tasks + 256, "open files"),
        ("ulimit -u", resource.RLIMIT_NPROC, PROCS_PER_TASK * tasks + 256, "processes and threads"),
    ):
        soft, hard = resource.getrlimit(limit)
        if soft == resource.RLIM_INFINITY or soft >= need:
            continue
        if hard != resource.RLIM_INFINITY and hard < need:
            raise SpecError(
                f"roles: {tasks} local tasks need about {need} {what} but this shell allows {hard} "
                f"({name}); raise the limit or run fewer tasks"
            )
        resource.setrlimit(limit, (need, hard))


def role_limits(job: JobSpec) -> dict[str, cgroups.Limits]:
    """The limits of each role that has tasks and asks for memory or CPUs."""
    found = {}
    for role in contract.ROLES:
        resources = job.role(role).resources
        limits = cgroups.Limits(resources.memory_bytes, resources.cpus)
        if job.replicas(role) and limits.wanted:
            found[role] = limits
    return found


def _field(limits: dict[str, cgroups.Limits], controller: str) -> str:
    """The first role's field that needs ``controller`` (what a refusal names)."""
    for role, wanted in limits.items():
        if controller in wanted.controllers():
            return f"roles.{role}.resources.{'memory' if controller == 'memory' else 'cpus'}"
    return "resources"


def _enter(group: cgroups.TaskGroup) -> None:
    """Start ``true`` in ``group`` as a task is started (it writes itself into the group
    between fork and exec); OSError when it cannot enter. Its exit status is not judged: a
    tiny limit may kill even ``true``, and that is the limit working."""
    enter, opened = group.preexec()
    try:
        subprocess.run([shutil.which("true") or sys.executable, "-c", ""], preexec_fn=enter, check=False,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=60)
    except subprocess.SubprocessError as err:
        procs = os.path.join(next(iter(group.dirs.values())), "cgroup.procs")
        raise OSError(errno.EPERM, f"a process could not enter it ({err})", procs) from None
    finally:
        opened()


def prepare_limits(limits: dict[str, cgroups.Limits], token: str) -> cgroups.JobGroups:
    """Everything the limits need, tried before any task starts: the hierarchy that has the
    controllers, leftovers of killed runs removed, and one group per role made with its
    limits and entered by a process started the way tasks are (:func:`_enter`), then
    removed again (the job's own groups are made as its tasks start). Refused with a
    SpecError naming the field: never a task without its limit."""
    wanted = list(dict.fromkeys(c for each in limits.values() for c in each.controllers()))
    try:
        layout = cgroups.detect(wanted)
    except cgroups.CgroupError as err:
        raise SpecError(f"{_field(limits, wanted[0])}: cannot be enforced here: {err}; "
                        "remove it to run without a limit") from None
    cgroups.sweep()
    groups = cgroups.JobGroups(layout, token)
    try:
        for role, each in limits.items():
            probe = groups.create(f"check-{role}", each)
            try:
                _enter(probe)
            finally:
                probe.close()
    except OSError as err:
        name = os.path.basename(err.filename or "")
        controller = next((c for c in ("cpu", "memory") if name.startswith(f"{c}.")), wanted[0])
        raise SpecError(
            f"{_field(limits, controller)}: cannot be enforced here: the kernel refused "
            f"{err.filename or 'a cgroup'} ({err.strerror or err}); run tfdist as root or in a cgroup "
            "delegated to this user, or remove the limit"
        ) from None
    finally:
        groups.close()
    return groups


def task_path(job_env: dict[str, str], python_env: Path | None = None) -> str:
    """PATH for tasks: the job's own Python environment (``python:``, see tfdist.pyenv)
    first, then tfdist's own, as if activated, so ``command: [python, train.py]`` runs an
    interpreter that has the job's packages, tfdist and TensorFlow. A PATH in the job's env wins."""
    if "PATH" in job_env:
        return job_env["PATH"]
    path = python_first(os.environ.get("PATH"))
    return os.pathsep.join([str(python_env / "bin"), path]) if python_env else path


class _ExitReport:
    """One attempt's exit as an event. Its process's cgroup (made before a cold start, or the
    taken spare's) says whether the kernel killed it for memory; that becomes the exit's
    reason, and so the job's root cause, instead of a bare SIGKILL."""

    def __init__(self, name: str, attempt: int, limits: cgroups.Limits | None) -> None:
        self.name, self.attempt, self.limits = name, attempt, limits
        self.group: cgroups.TaskGroup | None = None
        self._known = threading.Event()

    def know(self, group: cgroups.TaskGroup | None) -> None:
        self.group = group
        self._known.set()

    def exited(self, code: int, when: float) -> Exited:
        if self.limits is not None:
            self._known.wait(5.0)  # a taken spare's group is known a moment after take()
        group = self.group
        oom = group is not None and group.oom_kills > 0 and code != 0
        reason = describe_memory_kill(self.limits.memory) if oom and self.limits else None
        return Exited(self.name, self.attempt, when, code, reason)


def _memory_limit(report: _ExitReport) -> int | None:
    return report.limits.memory if report.limits is not None else None


class LocalBackend(Backend):
    """Run every task as a child process of tfdist."""

    name = "local"
    keeps_spares = True
    stages_data = True

    def __init__(self, job: JobSpec, options: BackendOptions | None = None) -> None:
        super().__init__(job, options)
        self.host = "127.0.0.1"
        self._ports = PortHolder()
        self._procs: dict[str, TaskProcess] = {}
        self._lock = threading.Lock()
        self._gpus: dict[str, list[str]] = {}
        self._guardian = Guardian()
        self._setpriv = find_setpriv()  # once: every task of the job is started here
        #: Every process of this job carries it (procs.TOKEN_VAR), escaped ones included.
        self.token = f"{job.name}-{os.urandom(6).hex()}"  # not secrets: it loads OpenSSL
        self._guarding = False
        self._env: dict[str, str] | None = None
        self._netguard: NetGuard | None = None
        self._python: Path | None = None  # the job's own environment, built by check()
        self._plans: dict[tuple[str, str], tuple[str | None, bool]] = {}  # see _spawn_plan
        self._spares: SparePool | None = None  # restart.warm_spares: made at the first start
        self._imports: dict[str, list[str]] = {}  # a script -> what its spares import first
        self._limits: dict[str, cgroups.Limits] = {}  # by role: resources enforced with cgroups
        self._groups: cgroups.JobGroups | None = None
        #: Each task's attempt and memory limit, for its usage samples (see _sample).
        self._watched: dict[str, tuple[int, _ExitReport]] = {}
        self._sampling: usage.SamplingThread | None = None
        self._interval = usage.INTERVAL

    # -- before anything starts ------------------------------------------------------

    def check(self) -> None:
        workdir = Path(self.job.workdir)
        if not workdir.is_dir():
            raise SpecError(f"workdir: {workdir} does not exist or is not a directory")
        if self.job.python.wanted:  # its own environment: built before any task (bad requirements: exit 2)
            from tfdist.pyenv.build import ensure  # uv/pip, locks, hashes: not for a job that wants none

            self._python = ensure(self.job)
        for role in contract.ROLES:
            if not self.job.replicas(role):
                continue
            path = task_path({**self.job.env, **self.job.role(role).env}, self._python)  # a role may set PATH
            program = self.job.command_for(role)[0]
            if "/" in program:
                found = os.path.isfile(workdir / program) and os.access(workdir / program, os.X_OK)
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
        ensure_limits(len(wanted))
        try:
            self._interval = usage.interval(os.environ)
        except ValueError as err:
            raise SpecError(str(err)) from None
        self._limits = role_limits(self.job)
        if self._limits:
            self._groups = prepare_limits(self._limits, self.token)
        self._guard()

    def _guard(self) -> NetGuard:
        """Keep task ports on loopback (see netguard.py); warn once, at start, if they cannot be."""
        if self._netguard is None:
            self._netguard = prepare(self.job.env, host=self.host)
            if self._netguard.warning:
                print(self._netguard.warning, file=sys.stderr, flush=True)
        return self._netguard

    def attach(self, run_dir: Path) -> None:
        super().attach(run_dir)
        if self._python:
            from tfdist.pyenv.build import record_use

            record_use(self._python, self.job.name, run_dir.name)

    def reserve(self, tasks: list[TaskId]) -> dict[str, str]:
        try:
            return {t.name: f"{self.host}:{self._ports.reserve()}" for t in tasks if needs_address(t)}
        except OSError as err:
            raise BackendError(f"could not reserve a port on {self.host}: {err}") from None

    # -- running ---------------------------------------------------------------------

    def _base_env(self) -> dict[str, str]:
        """What every task's environment starts from, built once per job (a 1,000-task job
        would otherwise copy and decode tfdist's whole environment 1,000 times)."""
        if self._env is None:
            host = {"PATH": task_path(self.job.env, self._python)}
            if self._python:
                host["VIRTUAL_ENV"] = str(self._python)
            self._env = task_environ(os.environ, {}, host=host)
        return self._env

    def _spawn_plan(self, program: str, env: dict[str, str]) -> tuple[str | None, bool]:
        """Where ``program`` is (an absolute path, or None: the exec searches PATH) and whether
        the netguard library in ``env`` reaches it, so it sets the task's parent-death signal
        and no ``setpriv`` exec is needed. Looked up once per program and PATH (a role's tasks
        share both), not per task: a PATH search in the spawned child is one failed exec per
        directory before the right one, all while tfdist waits for the child (vfork)."""
        key = (program, env.get("PATH", ""))
        plan = self._plans.get(key)
        library = self._guard().library
        if plan is None:
            found = (os.path.join(self.job.workdir, program) if "/" in program
                     else shutil.which(program, path=key[1]))
            path = found if found and os.path.isabs(found) else None
            plan = self._plans[key] = (path, bool(path and library and preload_reaches(path, library)))
        path, reaches = plan
        return path, reaches and library in env.get("LD_PRELOAD", "").split(":")

    def _prepare_data(self, task: Task, attempt: int, env: dict[str, str]) -> Prepared | None:
        """Stage ``task``'s inputs and fill its outputs (see tfdist.node.staging) under the run
        directory, before its process starts; the task's log gets the progress lines. None
        (and the task reported as failed to start) if its data cannot be had. Done here, in
        the supervisor's thread: the local backend stages its tasks one after another."""
        from tfdist.node.staging import prepare

        def emit(line: str) -> None:
            for event in line_events(task.name, attempt, time.time(), line):
                self.events.put(event)

        try:
            prepared = prepare(env, str(self.run_dir / "data" / task.name), emit)
        except (OSError, ValueError) as err:
            emit(f"tfdist: cannot stage {task.name}'s data: {err}")
            self.events.put(Exited(task.name, attempt, time.time(), 127, "cannot stage data"))
            return None
        env.pop(contract.DATA_PLAN)
        env.update(prepared.env)
        return prepared

    def _task_env(self, task: Task, attempt: int) -> tuple[dict[str, str], Callable[[], None],
                                                            Callable[[], None]] | None:
        """The task's environment, and what starts and ends the keeping of its outputs (no-ops
        for a task without data: the data modules are not even imported then); None: its
        data cannot be had."""
        gpus = ",".join(self._gpus.get(task.name, []))
        env = task_environ(self._base_env(), {"CUDA_VISIBLE_DEVICES": gpus, **task.env,
                                               **self.data_env(task.name)})
        if contract.DATA_PLAN not in env:
            return env, _nothing, _nothing
        prepared = self._prepare_data(task, attempt, env)
        return None if prepared is None else (env, prepared.start, prepared.close)

    def start(self, task: Task, attempt: int) -> None:
        made = self._task_env(task, attempt)
        if made is None:
            return
        env, keep_outputs, last_outputs = made
        env.update(self._guard().task_env(task.address, env))
        executable, preloaded = self._spawn_plan(task.command[0], env) if task.command else (None, False)
        name = task.name
        self._tell_guardian()
        report = _ExitReport(name, attempt, self._limits.get(task.role))

        spares = self._spares
        if spares is None and self.job.restart.warm_spares:
            from tfdist.node.spares import SparePool

            spares = self._spares = SparePool()

        def on_lines(lines: list[str], when: float) -> None:
            events = [event for line in lines for event in line_events(name, attempt, when, line)]
            for event in events:
                self.events.put(event)
            if spares is not None and any(isinstance(e, Progress) for e in events):
                spares.fill()  # training runs: spares no longer slow it

        def on_exit(code: int, when: float) -> None:
            last_outputs()  # the last copy of its outputs, before the exit is known
            self.events.put(report.exited(code, when))

        def on_active(when: float) -> None:
            self.events.put(Active(name, attempt, when))

        handover = self._handover(task) if spares is not None else None
        proc: TaskProcess | None = None
        if spares is not None and handover is not None and attempt > 0:
            proc, why = spares.take(name, env, on_lines, on_exit, on_active, handover,
                                    self.job.workdir)
            if proc is None:
                from tfdist.node.spares import cold_line

                self.events.put(Output(name, attempt, time.time(), cold_line(name, why)))
            else:
                report.know(proc.cgroup)
        if proc is None:
            proc = self._start_cold(task, attempt, env, (on_lines, on_exit, on_active), report,
                                    executable, preloaded)
            if proc is None:
                return
        keep_outputs()
        with self._lock:
            self._procs[name] = proc
            self._watched[name] = (attempt, report)
        self.events.put(Started(name, attempt, time.time(), proc.pid, self.host))
        if self._sampling is None and self._interval > 0:
            self._sampling = usage.SamplingThread(self._running, self._sampled, self._interval).start()
        if spares is not None and handover is not None:
            self._want_spare(spares, task, attempt, env, handover, executable, preloaded)

    def _handover(self, task: Task) -> Handover | None:
        """How a spare runs ``task`` (spares.plan), leaving with its peers as a cold start
        would (leave_program); None when a spare cannot run its command."""
        from tfdist.node.spares import plan

        handover = plan(task.command, self.job.workdir)
        if handover is None:
            return None
        return dataclasses.replace(handover, leave=leave_program.plan(
            task.command, self.job.strategy, task.role, self.job.drain_seconds))

    def _running(self) -> dict[str, tuple[int, int | None]]:
        """The tasks to sample: each running process's pid and memory limit."""
        with self._lock:
            return {n: (p.pid, _memory_limit(self._watched[n][1])) for n, p in self._procs.items()
                    if not p.done.is_set() and n in self._watched}

    def _sampled(self, samples: Mapping[str, usage.UsageSample]) -> None:
        with self._lock:
            watched = {n: self._watched[n] for n in samples if n in self._watched}
        for name, s in samples.items():
            if name in watched:
                attempt, report = watched[name]
                group = report.group if s.limit is not None else None
                self.events.put(Usage(name, attempt, s.time, s.cpu, s.rss, s.limit,
                                      group.memory_used() if group is not None else None))

    def _tell_guardian(self) -> None:
        """The guardian starts with the first task and learns the token and the job's cgroup
        directories: what it kills and removes if tfdist is SIGKILLed."""
        if not self._guarding:
            self._guardian.tell(f"@{self.token}")
            for directory in self._groups.dirs.values() if self._groups else ():
                self._guardian.tell(f"%{directory}")
            self._guarding = True

    def _start_cold(self, task: Task, attempt: int, env: dict[str, str],
                    callbacks: tuple[Callable[[list[str], float], None], Callable[[int, float], None],
                                     Callable[[float], None]],
                    report: _ExitReport, executable: str | None, preloaded: bool) -> TaskProcess | None:
        """Start the task's own process (in a new group with its role's limits, if any); a
        start that fails is reported like any other failed start (the policy decides)."""
        on_lines, on_exit, on_active = callbacks
        group = None
        try:
            if report.limits is not None:
                group = self._group(task.name, report.limits)
            report.know(group)
            # MultiWorkerMirrored chief/worker scripts leave together (node/leave_program.py)
            leave = leave_program.plan(task.command, self.job.strategy, task.role, self.job.drain_seconds)
            return TaskProcess(
                leave_program.launch(task.command, leave), env, self.job.workdir,
                token=f"{self.token}/{task.name}",
                on_lines=on_lines, on_exit=on_exit, on_active=on_active,
                guardian=self._guardian, setpriv=self._setpriv, preloaded=preloaded,
                executable=executable, cgroup=group,
            )
        except OSError as err:
            if group is not None:
                group.close()
            self.events.put(Output(task.name, attempt, time.time(), f"tfdist: cannot start: {err}"))
            self.events.put(Exited(task.name, attempt, time.time(), 127, "cannot start"))
            return None

    def _want_spare(self, spares: SparePool, task: Task, attempt: int, env: dict[str, str],
                    handover: Handover, executable: str | None, preloaded: bool) -> None:
        """From now on keep a spare for ``task``, started the way the task itself was."""
        from tfdist.node.spares import ready_line, script_imports, spare_command

        key = task.command[1]
        imports = self._imports.get(key)
        if imports is None:
            imports = self._imports[key] = script_imports(handover, self.job.workdir)
        argv = spare_command(task.command[0], handover, imports)
        token = f"{self.token}/{task.name}"
        workdir = self.job.workdir

        limits = self._limits.get(task.role)

        def make(argv: list[str], env: Mapping[str, str], sink: Sink) -> TaskProcess:
            group = self._group(task.name, limits) if limits is not None else None  # its task's limits
            try:
                return TaskProcess(argv, env, workdir, token=token, on_lines=sink.lines,
                                   on_exit=sink.exit, on_active=sink.active, guardian=self._guardian,
                                   setpriv=self._setpriv, preloaded=preloaded, executable=executable,
                                   stdin_pipe=True, cgroup=group)
            except OSError:
                if group is not None:
                    group.close()
                raise

        def ready(pid: int) -> None:
            self.events.put(Output(task.name, attempt, time.time(), ready_line(task.name, pid)))

        spares.want(task.name, argv, env, make, ready)

    def _group(self, name: str, limits: cgroups.Limits) -> cgroups.TaskGroup:
        """A new group with ``limits`` for one process of task ``name``; OSError when refused."""
        assert self._groups is not None, "check() prepares the groups of a job with limits"
        try:
            return self._groups.create(name, limits)
        except OSError as err:
            raise OSError(f"its cgroup was refused: {err}") from None

    def stop(self, names: list[str], grace: float) -> None:
        with self._lock:
            procs = [self._procs[n] for n in names if n in self._procs]
        terminate_all(procs, grace)

    def close(self) -> None:
        if self._sampling is not None:
            self._sampling.stop()
        if self._spares is not None:
            self._spares.close()
        with self._lock:
            names = list(self._procs)
        self.stop(names, 0)
        kill_marked(self.token)  # what left its group without holding the output pipe
        if self._groups is not None:
            self._groups.close()
        self._ports.close()
        self._guardian.close()
