"""The Ray actor that runs one task on its node (used by :mod:`tfdist.backends.ray.driver`).

Standard library only, and shipped to the cluster by value (cloudpickle) together with
:mod:`tfdist.node.procs` and :mod:`tfdist.node.guardian`, so the nodes need Ray and
the task's own packages but not tfdist. One actor per task:

- :meth:`TaskRunner.address` holds a free port with ``SO_REUSEPORT`` for the whole job (the
  task binds it too, with ``TF_GRPC_REUSE_PORT=1``) and reports the node's IP.
- :meth:`TaskRunner.start` runs the task's command as a :class:`procs.TaskProcess`, spawned
  from one long-lived thread (PR_SET_PDEATHSIG follows the spawning *thread*, and the
  actor's method threads are not ours to keep); a detached guardian kills the task's group
  if the actor itself dies.
- :meth:`TaskRunner.poll` is a long poll: it returns as soon as there are output lines or
  an exit, so the driver learns of an exit within one round trip.

- With ``restart.warm_spares`` it holds its task's warm spare (:mod:`tfdist.node.spares`,
  shipped with it: the local backend's and the Spark/YARN agents' mechanism): made on
  :meth:`TaskRunner.fill`, which the driver calls once the job reports progress; a restart
  is handed to it instead of starting the command cold.

The actor is threaded (``max_concurrency``): a blocked poll never delays a signal.

A fence against a host cut off: the driver polls a running attempt at least every
``POLL_SECONDS``; when no poll (nor start) has come for :data:`SILENCE_SECONDS`, the driver
cannot reach this node, Ray will soon declare the node dead and re-place its bundle, and the
job restarts elsewhere. So the actor kills its attempt's process group itself, before the
link can come back: a task of the old attempt never meets the new attempt's tasks (their
addresses may be the very ones its TF_CONFIG names).
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import threading
import time
from typing import Any

from tfdist import contract
from tfdist.node import guardian, leave_program, procs, spares, staging

_MAX_BATCH = 500
#: The driver's long poll returns after this many seconds at most (driver.py asks for it).
POLL_SECONDS = 5.0
#: No word from the driver for this long while an attempt runs: fence it (kill its group).
SILENCE_SECONDS = 30.0


class TaskRunner:
    """Hold a port and run attempts of one task on this node."""

    def __init__(self, name: str, token: str = "", silence: float = SILENCE_SECONDS) -> None:
        self.name = name
        self.silence = silence
        self.token = token or name
        self._guardian = guardian.Guardian(detached=True)
        self._setpriv = procs.find_setpriv()  # once per actor (this node), not per attempt
        self._sock: socket.socket | None = None
        self._cond = threading.Condition()
        self._lines: list[tuple[float, str]] = []
        self._attempt = -1
        self._exit: tuple[int, float] | None = None
        self._proc: procs.TaskProcess | None = None
        self._spawns: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._spare = spares.HeldSpare(name, "actor")  # restart.warm_spares: at the first start
        self._heard = time.monotonic()  # the driver's last start or poll
        self._home = os.getcwd()  # where the task's staged inputs and outputs go on this node
        threading.Thread(target=self._spawner, name="spawner", daemon=True).start()
        threading.Thread(target=self._fence, name="fence", daemon=True).start()

    # -- before the job starts -------------------------------------------------------

    def address(self, port: int = 0) -> dict[str, Any]:
        """Bind (and keep) a port; return this node's IP, the port and some facts."""
        import ray  # the actor runs inside Ray

        if self._sock is None:
            self._sock = procs.hold_port(port)
        ctx = ray.get_runtime_context()
        return {
            "ip": ray.util.get_node_ip_address(),
            "port": int(self._sock.getsockname()[1]),
            "node_id": ctx.get_node_id(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "cwd": os.getcwd(),
        }

    # -- running ---------------------------------------------------------------------

    def _spawner(self) -> None:
        while True:
            args, kwargs, reply = self._spawns.get()
            try:
                reply.put(subprocess.Popen(*args, **kwargs))
            except BaseException as err:  # noqa: BLE001 - handed back to the caller
                reply.put(err)

    def _spawn(self, *args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        reply: queue.Queue[Any] = queue.Queue()
        self._spawns.put((args, kwargs, reply))
        got = reply.get()
        if isinstance(got, BaseException):
            raise got
        return got  # type: ignore[no-any-return]

    def _fence(self) -> None:
        """Kill the running attempt once the driver has been silent for ``silence`` seconds."""
        while True:
            time.sleep(1.0)
            with self._cond:
                proc = self._proc if self._exit is None else None
                quiet = time.monotonic() - self._heard
            if proc is None or quiet <= self.silence:
                continue
            with self._cond:
                self._lines.append((time.time(), f"tfdist: {self.name} killed on {socket.gethostname()}: "
                                    f"no word from the driver for {self.silence:g}s (this host cut off?)"))
            proc.signal(signal.SIGKILL)
            proc.done.wait(timeout=10)

    def start(
        self, attempt: int, command: list[str], env: dict[str, str], cwd: str | None,
        spare: dict[str, Any] | None = None, leave: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Start one attempt; returns {"pid", "time"} or {"error"}. ``spare``: what holding a
        warm spare takes (spares.shipped), or None; ``leave``: how a cold start leaves with
        its peers (leave_program.plan), or None."""
        with self._cond:
            self._heard = time.monotonic()
            if self._proc is not None and self._exit is None:
                return {"error": f"attempt {self._attempt} is still running"}
            self._attempt, self._exit, self._lines = attempt, None, []
        # this node's Python first on PATH, as if its environment were activated
        full = procs.task_environ(os.environ, env, drop=("TFDIST_",),
                                  host={"PATH": procs.python_first(os.environ.get("PATH"))})
        self._guardian.tell(f"@{self.token}")

        def on_lines(lines: list[str], when: float) -> None:
            with self._cond:
                if self._attempt == attempt:
                    self._lines.extend((when, line) for line in lines)
                    self._cond.notify_all()

        prepared = self._prepare(attempt, full, on_lines)
        if prepared is None:
            return {"error": "cannot stage data"}

        def on_exit(code: int, when: float) -> None:
            prepared.close()  # the last copy of the task's outputs, before its exit is told
            with self._cond:
                if self._attempt == attempt:
                    self._exit = (code, when)
                    self._cond.notify_all()

        cwd = os.path.abspath(cwd or os.getcwd())
        proc = self._spare.take(attempt, spare is not None, full, cwd, on_lines, on_exit, lambda when: None)
        try:
            proc = proc or procs.TaskProcess(
                leave_program.launch(command, leave), full, cwd, token=f"{self.token}/{attempt}",
                on_lines=on_lines, on_exit=on_exit, guardian=self._guardian, spawn=self._spawn,
                setpriv=self._setpriv,
            )
        except OSError as err:
            now = time.time()
            with self._cond:
                self._lines.append((now, f"tfdist: cannot start on {socket.gethostname()}: {err}"))
                self._exit = (127, now)
                self._cond.notify_all()
            return {"error": str(err)}
        prepared.start()
        with self._cond:
            self._proc = proc
        if spare is not None:
            self._want_spare(attempt, command, full, cwd, spare, on_lines, leave)
        return {"pid": proc.pid, "time": time.time()}

    def _prepare(self, attempt: int, env: dict[str, str],
                 on_lines: Any) -> staging.Prepared | None:
        """Stage the task's inputs and fill its outputs on this node before it starts (see
        tfdist.node.staging); None, its exit recorded, if its data cannot be had."""
        if contract.DATA_PLAN not in env:
            return staging.Prepared()
        try:
            prepared = staging.prepare(env, staging.task_root(self._home, self.name),
                                       lambda line: on_lines([line], time.time()))
        except (OSError, ValueError) as err:
            now = time.time()
            with self._cond:
                self._lines.append((now, f"tfdist: cannot stage {self.name}'s data on "
                                         f"{socket.gethostname()}: {err}"))
                self._exit = (127, now)
                self._cond.notify_all()
            return None
        del env[contract.DATA_PLAN]
        env.update(prepared.env)
        return prepared

    def _want_spare(self, attempt: int, command: list[str], env: dict[str, str], cwd: str,
                    spare: dict[str, Any], on_lines: Any, leave: dict[str, Any] | None = None) -> None:
        """From now on keep a spare for the task, started as the task was."""
        def make(argv: list[str], env: Any, sink: spares.Sink) -> procs.TaskProcess:
            return procs.TaskProcess(argv, env, cwd, token=f"{self.token}/spare", on_lines=sink.lines,
                                     on_exit=sink.exit, on_active=sink.active, guardian=self._guardian,
                                     setpriv=self._setpriv, stdin_pipe=True)

        self._spare.want(command, cwd, env, spare, make,
                         lambda pid: on_lines([spares.ready_line(self.name, pid)], time.time()), leave)

    def fill(self) -> None:
        """The job trains (the driver says so): make the task's spare if it is missing."""
        self._spare.fill()

    def poll(self, attempt: int, timeout: float) -> dict[str, Any]:
        """Wait up to ``timeout`` s for output or the exit of ``attempt``; return what came."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._heard = time.monotonic()
            while self._attempt == attempt and not self._lines and self._exit is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            if self._attempt != attempt:
                return {"lines": [], "exit": None, "gone": True}
            lines, self._lines = self._lines[:_MAX_BATCH], self._lines[_MAX_BATCH:]
            done = self._exit if not self._lines else None  # the exit only after the last line
            return {"lines": lines, "exit": done, "gone": False}

    def signal(self, signum: int) -> bool:
        """Signal the running attempt's process group; False when nothing is running."""
        with self._cond:
            proc = self._proc if self._exit is None else None
        return proc.signal(signum) if proc is not None else False

    def shutdown(self) -> None:
        """Kill what still runs (idle spares first), release the port, let the guardian go."""
        self._spare.close()
        proc = self._proc
        if proc is not None:
            proc.signal(signal.SIGKILL)
            proc.done.wait(timeout=5)
        procs.kill_marked(self.token)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._guardian.close()
