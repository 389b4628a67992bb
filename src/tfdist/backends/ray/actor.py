"""The Ray actor that runs one task on its node (used by :mod:`tfdist.backends.ray.driver`).

Standard library only, and shipped to the cluster by value (cloudpickle) together with
:mod:`tfdist.backends.procs` and :mod:`tfdist.backends.guardian`, so the nodes need Ray and
the task's own packages but not tfdist. One actor per task:

- :meth:`TaskRunner.address` holds a free port with ``SO_REUSEPORT`` for the whole job (the
  task binds it too, with ``TF_GRPC_REUSE_PORT=1``) and reports the node's IP.
- :meth:`TaskRunner.start` runs the task's command as a :class:`procs.TaskProcess`, spawned
  from one long-lived thread (PR_SET_PDEATHSIG follows the spawning *thread*, and the
  actor's method threads are not ours to keep); a detached guardian kills the task's group
  if the actor itself dies.
- :meth:`TaskRunner.poll` is a long poll: it returns as soon as there are output lines or
  an exit, so the driver learns of an exit within one round trip.

The actor is threaded (``max_concurrency``): a blocked poll never delays a signal.
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

from tfdist.backends import guardian, procs

_MAX_BATCH = 500


class TaskRunner:
    """Hold a port and run attempts of one task on this node."""

    def __init__(self, name: str, token: str = "") -> None:
        self.name = name
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
        threading.Thread(target=self._spawner, name="spawner", daemon=True).start()

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

    def start(
        self, attempt: int, command: list[str], env: dict[str, str], cwd: str | None
    ) -> dict[str, Any]:
        """Start one attempt; returns {"pid", "time"} or {"error"}."""
        with self._cond:
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

        def on_exit(code: int, when: float) -> None:
            with self._cond:
                if self._attempt == attempt:
                    self._exit = (code, when)
                    self._cond.notify_all()

        try:
            proc = procs.TaskProcess(
                command, full, cwd or os.getcwd(), token=f"{self.token}/{attempt}",
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
        with self._cond:
            self._proc = proc
        return {"pid": proc.pid, "time": time.time()}

    def poll(self, attempt: int, timeout: float) -> dict[str, Any]:
        """Wait up to ``timeout`` s for output or the exit of ``attempt``; return what came."""
        deadline = time.monotonic() + timeout
        with self._cond:
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
        """Kill what still runs, release the port, let the guardian go."""
        proc = self._proc
        if proc is not None:
            proc.signal(signal.SIGKILL)
            proc.done.wait(timeout=5)
        procs.kill_marked(self.token)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._guardian.close()
