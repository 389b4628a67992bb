"""One task as a process group on this machine: the part every process backend shares.

The local backend, the Ray actor and the Spark agent all run a task's command the
same way, so they share this module. It is standard library only and imports nothing from
tfdist, because it is shipped by value to machines where tfdist is not installed.

What a :class:`TaskProcess` guarantees:

- the task runs in its own session, so it has its own process group and a Ctrl-C at the
  terminal reaches tfdist (which stops tasks in order), not the task;
- ``PR_SET_PDEATHSIG=SIGKILL``: the task dies if the thread that spawned it dies (set by
  util-linux's ``setpriv``, or by a preloaded library that reads :data:`PARENT_VAR`);
- a guardian process (:mod:`tfdist.node.guardian`) SIGKILLs the groups of every task
  still running if the owner itself is SIGKILLed;
- every process of the task carries the environment variable :data:`TOKEN_VAR`, so a
  process that left the group (``setsid``, a daemon) is still found and killed when its task
  ends (:func:`kill_marked`);
- output is read in chunks (no thread per line), split into lines; a chunk without a newline
  (a progress bar redrawn with ``\\r``) still counts as activity;
- the exit is reported as soon as the process is reaped, even if an escaped process still
  holds the output pipe.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # only for annotations: this module imports nothing of tfdist when it runs
    from tfdist.node.cgroups import TaskGroup
    from tfdist.node.guardian import Guardian

T = TypeVar("T")

PR_SET_PDEATHSIG = 1
#: Marks every process of one task: ``<job token>/<task name>``.
TOKEN_VAR = "TFDIST_PROC_TOKEN"
#: The spawning process's pid, for a preloaded library that sets PR_SET_PDEATHSIG in the task
#: itself (the local backend's ``loopback_bind.c``) instead of an exec of ``setpriv``.
PARENT_VAR = "TFDIST_PARENT_PID"
#: A line longer than this is cut (a task printing without newlines must not fill memory).
MAX_LINE = 64 * 1024
#: How often a task that prints without newlines counts as active.
ACTIVITY_INTERVAL = 1.0


def redraw_cut(partial: bytes) -> int:
    """Where to cut output that grew past :data:`MAX_LINE` without a newline: before its last
    redraw (the backspaces and carriage return a progress bar such as Keras's draws each state
    after), so no drawn state is cut in two and the rest stays for the next line; else at the
    end."""
    at = partial.rfind(b"\r")
    while at > 0 and partial[at - 1:at] == b"\x08":
        at -= 1
    return at if at > 0 else len(partial)


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGKILL when the spawning thread's process dies.

    The parent must have imported ctypes (:func:`spawn_options` does): an import that really
    loads in the forked child could wait forever on a lock another thread held at the fork.
    Not imported at the top: most starts never need it (~1 ms of every ``tfdist run``)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def find_setpriv() -> str | None:
    """util-linux's ``setpriv`` on this node, or None. A caller that starts many tasks looks
    it up once and passes it on (a PATH search is a dozen ``stat`` calls, 1,000 times over
    for a 1,000-task job); nothing here caches it, because this module is pickled by value
    for Ray and Spark and a cache would carry the driver's answer to another node."""
    return shutil.which("setpriv")


def spawn_options(
    command: Sequence[str], setpriv: str | None, preloaded: bool = False, executable: str | None = None,
) -> tuple[list[str], dict[str, object]]:
    """The argv and Popen options that give a task PR_SET_PDEATHSIG=SIGKILL.

    ``preloaded``: the task's environment preloads a library that sets it (see
    :data:`PARENT_VAR`), so the command runs as it is. Else util-linux's ``setpriv
    --pdeathsig KILL`` sets it and execs the command, which lets Python spawn with vfork (an
    exec more per task: ~0.9 ms of CPU here); a ``preexec_fn`` (the last resort) forces a
    full fork and runs Python in the child: measured here, 6-7 ms per spawn instead of ~2 ms.
    ``executable``: the command's program already found on PATH (an absolute path), execed
    directly with ``command[0]`` kept as the task's argv[0]; setpriv does its own search."""
    direct: dict[str, object] = {"executable": executable} if executable else {}
    if preloaded:
        return list(command), direct
    if setpriv:
        return [setpriv, "--pdeathsig", "KILL", "--", *command], {}
    import ctypes  # noqa: F401 - for die_with_parent, loaded here in the parent

    return list(command), {"preexec_fn": die_with_parent, **direct}


def hold_port(port: int = 0) -> socket.socket:
    """Bind a port with ``SO_REUSEPORT`` and keep it: nothing else can bind it, but a task
    with ``TF_GRPC_REUSE_PORT=1`` can (TensorFlow sets the option on its listener). The
    socket never listens, so every connection goes to the task. The wildcard address is
    bound because TensorFlow binds it, and a held wildcard bind blocks every other
    non-reusing bind of the port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("0.0.0.0", port))
    except OSError:
        sock.close()
        raise
    return sock


class PortHolder:
    """Ports held with :func:`hold_port` until :meth:`close` (or the end of a ``with``)."""

    def __init__(self) -> None:
        self._sockets: list[socket.socket] = []

    def reserve(self, port: int = 0) -> int:
        sock = hold_port(port)
        self._sockets.append(sock)
        return int(sock.getsockname()[1])

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()

    def __enter__(self) -> PortHolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def task_environ(
    base: Mapping[str, str],
    task_env: Mapping[str, str],
    *,
    drop: tuple[str, ...] = (),
    host: Mapping[str, str | None] | None = None,
) -> dict[str, str]:
    """The environment a task starts with, built the same way by every process backend:

    1. ``base``, the environment of the process that starts the task (tfdist itself, the
       Ray actor, the Spark executor), without the variables whose names start with one of
       ``drop`` (what that process set for itself: a Spark worker's settings, or the
       ``TFDIST_`` variables of the job that started a Ray worker);
    2. ``host``: what the backend sets for this host (PATH with the right Python first,
       VIRTUAL_ENV); None removes a variable;
    3. ``TF_GRPC_REUSE_PORT=1`` (contract.GRPC_REUSE_PORT, written here because this module
       is shipped without tfdist): the backend holds the task's port (:func:`hold_port`)
       until TensorFlow binds it too;
    4. ``task_env``, the task's own (TF_CONFIG, TFDIST_*, the job's env), which wins.

    Pure, so the local backend builds 1-3 once per job and passes the result as ``base``."""
    env = {k: v for k, v in base.items() if not k.startswith(drop)} if drop else dict(base)
    for name, value in (host or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    env["TF_GRPC_REUSE_PORT"] = "1"
    env.update(task_env)
    return env


def python_first(path: str | None) -> str:
    """PATH with this interpreter's directory first, as if its environment were activated,
    so ``command: [python, train.py]`` runs the Python that has TensorFlow."""
    return os.pathsep.join([os.path.dirname(sys.executable), path or ""])


def kill_marked(token: str) -> int:
    """SIGKILL every process of this user whose environment carries ``TOKEN_VAR=token`` (or
    a token under it, ``token/...``); returns how many. Reads /proc (Linux).

    Every process's environment is read, so this costs ~20 us per process on the machine:
    raw reads and one ``find`` per process, not file objects and a split (4x slower; a
    shared machine with 2,000 processes made it 90 ms of every job's end)."""
    mine = f"\0{TOKEN_VAR}={token}".encode()
    killed = 0
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0
    me = os.getpid()
    for pid in pids:
        if pid != me and _carries(pid, mine):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def _carries(pid: int, entry: bytes) -> bool:
    """Does ``/proc/PID/environ`` hold ``entry`` (``\\0NAME=token``) as a whole variable, or
    with ``/...`` after the token?"""
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY)
    except OSError:
        return False
    try:
        chunks = [b"\0"]
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    except OSError:
        return False
    finally:
        os.close(fd)
    env = b"".join(chunks)
    at = env.find(entry)
    while at >= 0:
        end = at + len(entry)
        if end == len(env) or env[end] in (0, 0x2F):  # the token ends there, or "/" follows
            return True
        at = env.find(entry, end)
    return False


def _both(first: Callable[[], None], second: Callable[[], None]) -> Callable[[], None]:
    def both() -> None:
        first()
        second()

    return both


class TaskProcess:
    """One attempt of one task, started at once.

    ``on_lines(lines, time)`` gets complete output lines (decoded, without newline);
    ``on_active(time)`` is called at most once per :data:`ACTIVITY_INTERVAL` when output
    without a newline arrives; ``on_exit(code, time)`` is called once, after the last lines
    (``code`` is negative -N for death by signal N). Callbacks run on this task's reader
    thread. ``setpriv`` is :func:`find_setpriv`'s answer on this node; ``preloaded`` says that
    ``env`` preloads a library that sets the parent-death signal itself, ``executable`` where
    the program was found (both :func:`spawn_options`). ``stdin_pipe``: the task's stdin is
    a pipe the owner writes (:attr:`stdin`; a warm spare reads its task there), else
    /dev/null. ``cgroup``: the group (:mod:`tfdist.node.cgroups`) the child enters before
    its program runs, and that is closed (its OOM kills read, then removed) before
    ``on_exit``. Raises OSError when the command cannot be started, or cannot enter its group.
    """

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None,
        *,
        token: str,
        on_lines: Callable[[list[str], float], None],
        on_exit: Callable[[int, float], None],
        on_active: Callable[[float], None] | None = None,
        guardian: Guardian | None = None,
        spawn: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
        setpriv: str | None,
        preloaded: bool = False,
        executable: str | None = None,
        stdin_pipe: bool = False,
        cgroup: TaskGroup | None = None,
    ) -> None:
        self.token = token
        self.cgroup = cgroup
        self._on_lines, self._on_exit, self._on_active = on_lines, on_exit, on_active
        self._guardian = guardian
        self.done = threading.Event()
        self.exit_code: int | None = None
        self._partial = b""  # output after the last newline
        full = dict(env)
        full[TOKEN_VAR] = token
        if preloaded:
            full[PARENT_VAR] = str(os.getpid())
        else:  # one inherited from elsewhere must not reach a library in this task's tree
            full.pop(PARENT_VAR, None)
        argv, extra = spawn_options(command, setpriv, preloaded, executable)
        opened: Callable[[], None] | None = None
        if cgroup is not None:  # in the group before exec: nothing the program does escapes it
            enter, opened = cgroup.preexec()
            first = extra.get("preexec_fn")
            extra["preexec_fn"] = enter if first is None else _both(enter, first)  # type: ignore[arg-type]
        try:
            self.popen = spawn(
                argv, cwd=cwd, env=full, stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, **extra,
            )
        except subprocess.SubprocessError as err:  # the child failed before exec: its group refused it
            raise OSError(f"could not enter its cgroup ({err})") from None
        finally:
            if opened is not None:
                opened()
        self.pid = self.popen.pid
        self.stdin = self.popen.stdin
        if guardian is not None:
            guardian.tell(f"+{self.pid}")
        # One thread per task: it reads the output and learns of the exit from a pidfd
        # (Linux 5.3+); without pidfds a second thread waits and wakes it through a pipe.
        self._wake_w: int | None = None
        try:
            self._exit_fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self._exit_fd, self._wake_w = os.pipe()
            threading.Thread(target=self._reap_then_wake, name=f"wait-{token}", daemon=True).start()
        # Not threading.Thread: its start() waits until the new thread has run, a scheduler
        # round trip per task (~0.6 ms on a busy 2-core machine, 1,000 times over); this one
        # runs when it gets the interpreter, and _read reports whatever happens to it.
        _thread.start_new_thread(self._read, ())

    # -- the task's thread -------------------------------------------------------------------

    def _reap(self) -> None:
        code = self.popen.wait()
        self._ended = time.time()
        self.exit_code = code
        with contextlib.suppress(OSError):  # whatever is left in the group dies with the task
            os.killpg(self.pid, signal.SIGKILL)
        if self._guardian is not None:
            self._guardian.tell(f"-{self.pid}")

    def _reap_then_wake(self) -> None:
        self._reap()
        assert self._wake_w is not None
        os.write(self._wake_w, b"x")

    def _read(self) -> None:
        """The task's thread: output until EOF or the exit, then the exit. Whatever goes wrong
        here, the exit is still reported, or the supervisor would wait for it forever."""
        held = False
        try:
            held = self._pump()
        except Exception as err:  # noqa: BLE001 - reported as output, then the exit
            self._on_lines([f"tfdist: reading the output of {self.token} failed: {err!r}"], time.time())
            if self.exit_code is None:
                self._reap()
        self._finish(held)

    @staticmethod
    def _wait_readable(fds: list[int], timeout: float | None) -> list[int]:
        """poll(), not select(): select cannot watch a descriptor numbered 1024 or more, and a
        1,000-task job has thousands open."""
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        return [fd for fd, _ in poller.poll(None if timeout is None else int(timeout * 1000))]

    def _pump(self) -> bool:
        """Forward output; returns True when a process outside the group holds the pipe."""
        assert self.popen.stdout is not None
        fd = self.popen.stdout.fileno()
        last_active = 0.0
        exited_at: float | None = None  # monotonic time the exit was seen
        while True:
            if exited_at is None:
                ready = self._wait_readable([fd, self._exit_fd], None)
                if self._exit_fd in ready:
                    if self._wake_w is None:
                        self._reap()
                    exited_at = time.monotonic()
                    continue  # drain what is left, without blocking
            elif not self._wait_readable([fd], 0.05):
                return True  # reaped, group killed, yet no EOF: an escaped writer
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:  # EOF: every writer is gone
                if exited_at is None:
                    self._wait_readable([self._exit_fd], None)
                    if self._wake_w is None:
                        self._reap()
                return False
            now = time.time()
            pieces = (self._partial + chunk).split(b"\n")
            self._partial = pieces.pop()
            if len(self._partial) > MAX_LINE:
                cut = redraw_cut(self._partial)
                pieces.append(self._partial[:cut])
                self._partial = self._partial[cut:]
            if pieces:
                self._on_lines([p.decode("utf-8", "replace").rstrip("\r") for p in pieces], now)
            elif self._on_active is not None and now - last_active >= ACTIVITY_INTERVAL:
                last_active = now
                self._on_active(now)
            if exited_at is not None and time.monotonic() - exited_at > 0.5:
                return True  # an escaped process keeps writing after the task ended

    def _finish(self, held: bool) -> None:
        partial = self._partial
        if partial:
            self._on_lines([partial.decode("utf-8", "replace").rstrip("\r")], time.time())
        with contextlib.suppress(OSError):
            if self.popen.stdout is not None:
                self.popen.stdout.close()
            if self.popen.stdin is not None:
                self.popen.stdin.close()
        for end in (self._exit_fd, self._wake_w):
            if end is not None:
                with contextlib.suppress(OSError):
                    os.close(end)
        if held:
            kill_marked(self.token)
        if self.cgroup is not None:  # its OOM kills are read first, then it goes
            self.cgroup.close()
        assert self.exit_code is not None
        self._on_exit(self.exit_code, self._ended)
        self.done.set()

    # -- control -----------------------------------------------------------------------------

    def signal(self, signum: int) -> bool:
        """Signal the task's process group; False when it has ended already."""
        if self.done.is_set() or self.exit_code is not None:
            return False
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signum)
        return True


def stop_in_order(
    tasks: Sequence[T],
    send: Callable[[Sequence[T], int], object],
    done: Callable[[T], threading.Event],
    grace: float,
    last_wait: float = 10.0,
) -> list[T]:
    """Stop several tasks together, wherever they run: ``send(tasks, SIGTERM)``, one shared
    monotonic deadline ``grace`` seconds away, ``send(rest, SIGKILL)`` to those not ended
    by then, and up to ``last_wait`` seconds more. Returns the tasks that never reported
    their end. Every process backend stops tasks this way (local, Ray, Spark)."""
    live = [t for t in tasks if not done(t).is_set()]
    if not live:
        return []
    send(live, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for task in live:
        done(task).wait(timeout=max(0.0, deadline - time.monotonic()))
    stubborn = [t for t in live if not done(t).is_set()]
    if stubborn:
        send(stubborn, signal.SIGKILL)
    end = time.monotonic() + last_wait
    return [t for t in live if not done(t).wait(timeout=max(0.0, end - time.monotonic()))]


def terminate_all(procs: Sequence[TaskProcess], grace: float) -> None:
    """Stop several local task processes together (see :func:`stop_in_order`)."""

    def send(group: Sequence[TaskProcess], signum: int) -> None:
        for proc in group:
            proc.signal(signum)

    stop_in_order(procs, send, lambda p: p.done, grace)
