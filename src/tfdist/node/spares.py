"""Warm spares: a standby process per task that has already imported TensorFlow (and the
training script's installed imports) and waits, so a restart skips that start-up.

A spare is started exactly as its task is (same environment, session, process group,
parent-death signal, netguard preload, guardian registration and process token; see
:class:`~tfdist.node.procs.TaskProcess`), running :mod:`tfdist.node.spare_program`.
When the task restarts, the backend takes its spare instead of spawning a process: the task's
callbacks are attached to the spare's output and exit (:class:`Sink`), and the task's argv,
working directory and environment are written to the spare's stdin; the spare becomes the
task with :mod:`runpy`. Only commands ``python SCRIPT ...`` and ``python -m MODULE ...`` can
be handed over (:func:`plan`); and only when the task's environment is the one the spare
was started with, but for ``TFDIST_RESTART_COUNT`` (variables a library reads while it is
imported would otherwise keep the spare's values); any other restart starts cold, and the
task's log says why.

Spares are (re)filled only once training runs, on progress reports: started with the job,
they would compete with the tasks' own start-up for the CPU (TensorFlow's import is ~4.5 s
of CPU). A task's spare is made no sooner than the job's own start-up time (its start to its
first report) after the task (re)started, so a parameter-server worker restarted alone while
the chief reports on gets its new spare once it is back, not while it rejoins. A spare
that dies while waiting is replaced at the next fill; its death is told at the next restart.
Spares are spawned by one long-lived thread, since the parent-death signal fires when the
*thread* that spawned a process ends.

Three holders use this one mechanism: the local backend (one pool for the job, filled on any
task's progress report), the agent of the Spark and YARN backends
(:mod:`tfdist.node.agent`) and the Ray actor (:mod:`tfdist.backends.ray.actor`):
one pool each, holding its own task's spare, filled when the driver relays that the job
reports progress. So this module is shipped to the nodes with them and imports only the
standard library, :mod:`tfdist.node.procs`, :mod:`tfdist.contract` and
:mod:`tfdist.states` (all shipped with it); where tfdist is not installed a spare runs the
program's source text (``python -c``, :func:`spare_command`).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import json
import os
import pkgutil
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdist import contract
from tfdist.node import leave_program
from tfdist.node.procs import TaskProcess, terminate_all
from tfdist.node.spare_program import READY
from tfdist.states import describe_exit

#: The program spares run (a file, so any job interpreter can run it by path).
PROGRAM = str(Path(__file__).with_name("spare_program.py"))
#: Always imported first: the cost a spare exists to take off a restart.
ALWAYS = ("tensorflow",)
#: Imported before TensorFlow when the script imports it (:func:`imports_of`).
RUNTIME = "tfdist.runtime"
#: A script larger than this is not read for its imports (it is the job's input: hostile).
MAX_SCRIPT_BYTES = 1 << 20
#: Variables that may differ between the spare's start and the handover.
PER_ATTEMPT = (contract.RESTART_COUNT,)



@dataclass(frozen=True)
class Handover:
    """How a spare runs a task's command: ``argv`` as the spare's ``sys.argv`` takes it
    (``[script, args...]`` or ``["-m", module, args...]``) and the script's directory;
    ``leave``: run it through :mod:`tfdist.node.leave_program` (its plan, with the program's
    file or text), or None."""

    argv: tuple[str, ...]
    script_dir: str
    leave: Mapping[str, Any] | None = None


def plan(command: Sequence[str], workdir: str) -> Handover | None:
    """The handover of ``command`` started in ``workdir``, or None when a spare cannot run it
    (not ``python SCRIPT`` or ``python -m MODULE``, or Python options a spare would not have)."""
    if len(command) < 2 or not leave_program.PYTHON.fullmatch(os.path.basename(command[0])):
        return None
    first = command[1]
    if first == "-m":
        return Handover(tuple(command[1:]), workdir) if len(command) > 2 and command[2] else None
    if first.startswith("-") or not first.endswith(".py"):
        return None
    script = first if os.path.isabs(first) else os.path.join(workdir, first)
    return Handover(tuple(command[1:]), os.path.dirname(os.path.normpath(script)))


def cold_roles(commands: Mapping[str, Sequence[str]], workdir: str) -> list[str]:
    """The roles (of ``role -> command``) whose tasks a spare cannot run: they restart cold."""
    return [role for role, command in commands.items() if plan(command, workdir) is None]


def cold_roles_warning(role: str) -> str:
    return (f"restart.warm_spares: roles.{role}.command is not 'python SCRIPT.py ...' or "
            "'python -m MODULE ...'; its tasks restart cold")


def spare_command(python: str, handover: Handover, imports: Sequence[str],
                  source: str | None = None) -> list[str]:
    """The argv of a spare: ``python PROGRAM SCRIPT_DIR MODULE...``, or with the program's
    ``source`` text as ``python -c SOURCE ...`` (on a node where tfdist is not installed)."""
    program = ["-c", source] if source is not None else [PROGRAM]
    return [python, *program, handover.script_dir, *imports]


def program_source() -> str:
    """The spare program's text, as an agent's spares run it (:func:`spare_command`); read
    through the package's loader, so it is found in the YARN agent's zip too."""
    data = pkgutil.get_data("tfdist.node", "spare_program.py")
    if data is None:
        raise OSError("tfdist.node.spare_program cannot be read")
    return data.decode()


def shipped(command: Sequence[str], workdir: str, program: bool = True) -> dict[str, object] | None:
    """What an agent (Spark, YARN) or actor (Ray) needs to hold a spare for a task running
    ``command`` from ``workdir``: the script's imports (read here, where tfdist runs) and,
    with ``program``, the spare program's text; None when a spare cannot run the command."""
    handover = plan(command, workdir)
    if handover is None:
        return None
    spare: dict[str, object] = {"imports": script_imports(handover, workdir)}
    if program:
        spare["program"] = program_source()
    return spare


def ready_line(name: str, pid: int) -> str:
    """What a task's log says when its spare is ready (benchmarks read it)."""
    return f"tfdist: warm spare for {name} ready (pid {pid})"


def cold_line(name: str, why: str) -> str:
    """What a task's log says when a restart could not take a spare."""
    return f"tfdist: no warm spare for {name} ({why}); starting cold"


def imports_of(source: str) -> list[str]:
    """The top-level packages a script imports anywhere (absolute imports only), TensorFlow
    first; nothing for a script that does not parse. A script that imports ``tfdist.runtime``
    has it first of all: its import makes TensorFlow's cheaper (:mod:`tfdist.node.import_gc`),
    in the spare as in the script."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return list(ALWAYS)
    names = list(ALWAYS)
    runtime = False
    for node in ast.walk(tree):
        found: list[str] = []
        if isinstance(node, ast.Import):
            found = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        for name in found:
            runtime = runtime or name == RUNTIME or name.startswith(RUNTIME + ".")
            top = name.split(".")[0]
            if top.isidentifier() and top not in names:
                names.append(top)
    return [RUNTIME, *names] if runtime else names


def script_imports(handover: Handover, workdir: str) -> list[str]:
    """:func:`imports_of` the handover's script (read here: the one I/O of planning)."""
    if handover.argv[0] == "-m":
        return list(ALWAYS)
    path = Path(workdir, handover.argv[0])
    try:
        with open(path, "rb") as handle:
            source = handle.read(MAX_SCRIPT_BYTES + 1)
    except OSError:
        return list(ALWAYS)
    if len(source) > MAX_SCRIPT_BYTES:
        return list(ALWAYS)
    return imports_of(source.decode("utf-8", "replace"))


def same_environment(spare: Mapping[str, str], task: Mapping[str, str]) -> bool:
    """Can a spare started with ``spare`` become a task that wants ``task``?"""
    strip = {k: v for k, v in spare.items() if k not in PER_ATTEMPT}
    return strip == {k: v for k, v in task.items() if k not in PER_ATTEMPT}


Lines = Callable[[list[str], float], None]
Exit = Callable[[int, float], None]
Active = Callable[[float], None]


class Sink:
    """A spare's output and exit: dropped until the spare is READY (its import noise), then
    passed to the task it became (:meth:`attach`); an exit before that is the spare's death."""

    def __init__(self, on_death: Callable[[int], None],
                 on_ready: Callable[[], None] | None = None) -> None:
        self.ready = False
        self.pid: int | None = None
        self._on_death = on_death
        self.on_ready = on_ready
        self._target: tuple[Lines, Exit, Active] | None = None
        self._lock = threading.Lock()

    def attach(self, on_lines: Lines, on_exit: Exit, on_active: Active) -> None:
        with self._lock:
            self._target = (on_lines, on_exit, on_active)

    def lines(self, lines: list[str], when: float) -> None:
        if not self.ready:
            if READY not in lines:
                return
            self.ready = True
            lines = lines[lines.index(READY) + 1:]
            with self._lock:
                idle = self._target is None
            if idle and self.on_ready is not None:
                self.on_ready()
        with self._lock:
            target = self._target
        if target is not None and lines:
            target[0](lines, when)

    def exit(self, code: int, when: float) -> None:
        with self._lock:
            target = self._target
        if target is None:
            self._on_death(code)
        else:
            target[1](code, when)

    def active(self, when: float) -> None:
        with self._lock:
            target = self._target
        if target is not None and self.ready:
            target[2](when)


@dataclass
class _Spare:
    proc: TaskProcess
    sink: Sink
    env: Mapping[str, str]


#: Makes a spare's process for a task: (argv, env, sink) -> TaskProcess.
Maker = Callable[[list[str], Mapping[str, str], Sink], TaskProcess]
#: Told when a task's spare is ready: (its pid).
Ready = Callable[[int], None]


class SparePool:
    """One spare per task of a job, spawned on a thread of its own (see the module's docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spares: dict[str, _Spare] = {}
        self._wanted: dict[str, tuple[list[str], Mapping[str, str], Maker, Ready | None]] = {}
        self._queued: set[str] = set()
        self._started: dict[str, float] = {}  # task -> when it last (re)started (monotonic)
        self._startup: float | None = None  # the job's start to its first report
        self._why: dict[str, str] = {}  # task -> why it has no spare (a death, a failed start)
        self._closed = False
        self._todo: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._spawner, name="tfdist-spares", daemon=True)
        self._thread.start()

    def want(self, name: str, argv: list[str], env: Mapping[str, str], make: Maker,
             on_ready: Ready | None = None) -> None:
        """Keep a spare for task ``name`` from now on: ``argv`` runs the spare program;
        ``on_ready(pid)`` is told when it has imported what it imports."""
        with self._lock:
            self._wanted[name] = (argv, dict(env), make, on_ready)
            self._started[name] = time.monotonic()

    def fill(self) -> list[str]:
        """Spawn the spares that are missing (cheap when none is: called on every report).
        Returns the tasks whose spares it queued: the decision is made here, synchronously
        (a spare is due one start-up's time after its task (re)started), the spawning on
        the pool's thread."""
        now = time.monotonic()
        with self._lock:
            if self._closed or not self._started:
                return []
            if self._startup is None:  # the first report: every task started so far is running
                self._startup = now - min(self._started.values())
                due = now
            else:
                due = now - self._startup
            missing = [n for n in self._wanted if n not in self._spares and n not in self._queued
                       and self._started[n] <= due]
            self._queued.update(missing)
        for name in missing:
            self._todo.put(name)
        return missing

    def _spawner(self) -> None:
        while (name := self._todo.get()) is not None:
            with self._lock:
                self._queued.discard(name)
                wanted = self._wanted.get(name)
                if self._closed or wanted is None or name in self._spares:
                    continue
            argv, env, make, on_ready = wanted
            sink = Sink(self._death_of(name))
            sink.on_ready = self._ready_of(sink, on_ready)
            try:
                proc = make(argv, env, sink)
                sink.pid = proc.pid
            except Exception as err:  # noqa: BLE001 - a spare that cannot start is a cold restart
                with self._lock:
                    self._why[name] = f"its spare could not start: {err}"
                continue
            with self._lock:
                if self._closed:
                    terminate_all([proc], 0)
                    return
                self._spares[name] = _Spare(proc, sink, env)
                self._why.pop(name, None)

    @staticmethod
    def _ready_of(sink: Sink, on_ready: Ready | None) -> Callable[[], None] | None:
        return (lambda: on_ready(sink.pid or 0)) if on_ready is not None else None

    def _death_of(self, name: str) -> Callable[[int], None]:
        return lambda code: self._died(name, code)

    def _died(self, name: str, code: int) -> None:
        with self._lock:
            spare = self._spares.get(name)
            if spare is not None and spare.proc.exit_code is not None:
                del self._spares[name]
                if not self._closed:
                    self._why[name] = f"its spare exited ({describe_exit(code)})"

    def take(self, name: str, env: Mapping[str, str], on_lines: Lines, on_exit: Exit,
             on_active: Active, handover: Handover, cwd: str) -> tuple[TaskProcess | None, str]:
        """The spare of ``name``, become the task (``handover`` run in ``cwd`` with ``env``),
        or None and why not (the caller starts the task cold and says so)."""
        with self._lock:
            spare = self._spares.pop(name, None)
            why = self._why.pop(name, "no spare was ready yet")
        if spare is None:
            return None, why
        if spare.proc.exit_code is not None or spare.proc.done.is_set():
            return None, "its spare had exited"
        if not same_environment(spare.env, env):
            terminate_all([spare.proc], 0)
            return None, "the task's environment changed since its spare started"
        spare.sink.attach(on_lines, on_exit, on_active)
        told: dict[str, Any] = {"argv": list(handover.argv), "cwd": cwd, "env": dict(env)}
        if handover.leave:
            told["leave"] = leave_program.complete(handover.leave)
        message = json.dumps(told) + "\n"
        try:
            assert spare.proc.stdin is not None
            spare.proc.stdin.write(message.encode())
            spare.proc.stdin.close()
        except (OSError, ValueError, AssertionError) as err:
            terminate_all([spare.proc], 0)
            return None, f"its spare could not be told its task ({err})"
        return spare.proc, ""

    def close(self) -> None:
        """Stop every idle spare and the spawner (spares become nothing once the job ends)."""
        with self._lock:
            self._closed = True
            idle = [s.proc for s in self._spares.values()]
            self._spares.clear()
        self._todo.put(None)
        for proc in idle:
            with contextlib.suppress(OSError, ValueError):
                if proc.stdin is not None:
                    proc.stdin.close()
        terminate_all(idle, 0)
        self._thread.join(timeout=10)

    def idle(self) -> dict[str, int]:
        """Task -> pid of each spare waiting now (for tests and benchmarks)."""
        with self._lock:
            return {n: s.proc.pid for n, s in self._spares.items()}

    def ready(self) -> list[str]:
        with self._lock:
            return [n for n, s in self._spares.items() if s.sink.ready]


class HeldSpare:
    """The warm spare of one task, held on the node where the task runs by the Spark/YARN
    agent or the Ray actor that runs it (the local backend keeps one pool for all its tasks).
    The handover is planned at the task's first start; a command that cannot be handed over
    never gets a spare."""

    def __init__(self, name: str, holder: str) -> None:
        self.name = name
        self.holder = holder  #: "agent" or "actor", for the cold-start line of a new holder
        self._handover: Handover | None = None
        self._pool: SparePool | None = None

    @property
    def pool(self) -> SparePool | None:
        """The pool that keeps the spare, once the task's first start planned one."""
        return self._pool

    def want(self, command: Sequence[str], cwd: str, env: Mapping[str, str], shipped: Mapping[str, Any],
             make: Maker, on_ready: Ready, leave: Mapping[str, Any] | None = None) -> None:
        """From now on keep a spare, made by ``make`` as the task was; ``shipped`` is what the
        driver sent for it (the script's imports, the spare program's source or nothing: then
        this copy's); ``leave``: the task's leave_program plan, or None."""
        if self._handover is None:
            self._handover = plan(command, cwd)
            if self._handover is None:
                return
            self._handover = dataclasses.replace(self._handover, leave=leave)
            self._pool = SparePool()
        assert self._pool is not None
        argv = spare_command(command[0], self._handover, shipped.get("imports", []),
                             shipped.get("program") or program_source())
        self._pool.want(self.name, argv, env, make, on_ready)

    def take(self, attempt: int, wanted: bool, env: Mapping[str, str], cwd: str, on_lines: Lines,
             on_exit: Exit, on_active: Active) -> TaskProcess | None:
        """At a restart (``attempt`` > 0) of a task that ``wanted`` a spare: the spare, become
        the task; or None, having told ``on_lines`` why the task starts cold."""
        if attempt == 0:
            return None
        proc, why = None, ""
        if self._pool is not None and self._handover is not None:
            proc, why = self._pool.take(self.name, env, on_lines, on_exit, on_active, self._handover, cwd)
        elif wanted:  # a new stage, container or actor
            why = f"its {self.holder} is new: the old {self.holder}'s spare ended with it"
        if why:
            on_lines([cold_line(self.name, why)], time.time())
        return proc

    def fill(self) -> None:
        """The job trains: make the spare if it is missing."""
        if self._pool is not None:
            self._pool.fill()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
