"""The Ray actor that runs one task on its node (used by :mod:`tfdist.backends.ray`).

Standard library only, and shipped to the cluster by value (cloudpickle), so the nodes need
Ray and the task's own packages but not tfdist. One actor per task:

- :meth:`TaskRunner.address` holds a free port with ``SO_REUSEPORT`` for the whole job (the
  task binds it too, with ``TF_GRPC_REUSE_PORT=1``) and reports the node's IP.
- :meth:`TaskRunner.start` runs the task's command as a subprocess in its own process group
  with ``PR_SET_PDEATHSIG=SIGKILL``, spawned from one long-lived thread (the death signal
  follows the spawning *thread*, and the actor's method threads are not ours to keep).
- :meth:`TaskRunner.poll` is a long poll: it returns as soon as there are output lines or
  an exit, so the driver learns of an exit within one round trip.
- A guardian process (the same source as ``guardian.py``, detached from the actor) kills
  the task's process group if the actor itself dies without stopping it.

The actor is threaded (``max_concurrency``): a blocked poll never delays a signal.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

_PR_SET_PDEATHSIG = 1
_MAX_BATCH = 500


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class TaskRunner:
    """Hold a port and run attempts of one task on this node."""

    def __init__(self, name: str, guardian_source: str | None = None) -> None:
        self.name = name
        self._guardian_source = guardian_source
        self._guardian: subprocess.Popen[str] | None = None
        self._sock: socket.socket | None = None
        self._cond = threading.Condition()
        self._lines: list[tuple[float, str]] = []
        self._attempt = -1
        self._exit: tuple[int, float] | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._spawns: queue.Queue[tuple[Any, ...]] = queue.Queue()
        threading.Thread(target=self._spawner, name="spawner", daemon=True).start()

    # -- before the job starts -------------------------------------------------------

    def address(self, port: int = 0) -> dict[str, Any]:
        """Bind (and keep) a port; return this node's IP, the port and some facts."""
        import ray  # the actor runs inside Ray

        if self._sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                sock.bind(("0.0.0.0", port))
            except OSError:
                sock.close()
                raise
            self._sock = sock
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
            args, reply = self._spawns.get()
            try:
                reply.put(subprocess.Popen(*args[:1], **args[1]))
            except BaseException as err:  # noqa: BLE001 - handed back to the caller
                reply.put(err)

    def _ensure_guardian(self) -> None:
        """Start the guardian once, detached: a launcher forks it and exits at once, so it is
        not a child of this worker (Ray SIGKILLs a dead worker's direct children, and the
        guardian must outlive the worker to kill the task groups when its stdin closes)."""
        if self._guardian_source and self._guardian is None:
            detached = "import os\nif os.fork():\n    os._exit(0)\nos.setsid()\n"
            launcher = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", detached + self._guardian_source],
                stdin=subprocess.PIPE,
                text=True,
            )
            launcher.wait()  # the guardian itself runs on, holding the pipe's read end
            self._guardian = launcher

    def _tell_guardian(self, message: str) -> None:
        guardian = self._guardian
        if guardian and guardian.stdin:
            with contextlib.suppress(OSError, ValueError):
                guardian.stdin.write(message + "\n")
                guardian.stdin.flush()

    def start(
        self, attempt: int, command: list[str], env: dict[str, str], cwd: str | None
    ) -> dict[str, Any]:
        """Start one attempt; returns {"pid", "time"} or {"error"}."""
        with self._cond:
            if self._popen is not None and self._exit is None:
                return {"error": f"attempt {self._attempt} is still running"}
            self._attempt, self._exit, self._lines = attempt, None, []
        full = dict(os.environ)
        for key in [k for k in full if k.startswith("TFDIST_")]:
            del full[key]
        if "PATH" not in env:  # this node's Python first, as if its environment were activated
            full["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), full.get("PATH", "")])
        full["TF_GRPC_REUSE_PORT"] = "1"
        full.update(env)
        self._ensure_guardian()
        reply: queue.Queue[Any] = queue.Queue()
        kwargs = {
            "cwd": cwd or os.getcwd(),
            "env": full,
            "stdin": subprocess.DEVNULL,
            "stdout": subprocess.PIPE,
            "stderr": subprocess.STDOUT,
            "start_new_session": True,
            "preexec_fn": _die_with_parent,
        }
        self._spawns.put(((command, kwargs), reply))
        popen = reply.get()
        if isinstance(popen, BaseException):
            now = time.time()
            with self._cond:
                self._lines.append((now, f"tfdist: cannot start on {socket.gethostname()}: {popen}"))
                self._exit = (127, now)
                self._cond.notify_all()
            return {"error": str(popen)}
        started = time.time()
        self._tell_guardian(f"+{popen.pid}")
        with self._cond:
            self._popen = popen
        reader = threading.Thread(target=self._read, args=(popen, attempt), daemon=True)
        reader.start()
        threading.Thread(target=self._wait, args=(popen, attempt, reader), daemon=True).start()
        return {"pid": popen.pid, "time": started}

    def _read(self, popen: subprocess.Popen[bytes], attempt: int) -> None:
        assert popen.stdout is not None
        for raw in popen.stdout:
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            with self._cond:
                if self._attempt != attempt:
                    return
                self._lines.append((time.time(), line))
                self._cond.notify_all()

    def _wait(self, popen: subprocess.Popen[bytes], attempt: int, reader: threading.Thread) -> None:
        code = popen.wait()
        ended = time.time()
        with contextlib.suppress(OSError):  # whatever is left in the group dies with the task
            os.killpg(popen.pid, signal.SIGKILL)
        self._tell_guardian(f"-{popen.pid}")
        reader.join(timeout=2.0)
        with self._cond:
            if self._attempt == attempt:
                self._exit = (code, ended)
                self._cond.notify_all()

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
            popen = self._popen if self._exit is None else None
        if popen is None:
            return False
        with contextlib.suppress(OSError):
            os.killpg(popen.pid, signum)
        return True

    def shutdown(self) -> None:
        """Kill what still runs, release the port, let the guardian go."""
        self.signal(signal.SIGKILL)
        if self._popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=5)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._guardian is not None:
            self._tell_guardian("exit")
            with contextlib.suppress(OSError):
                if self._guardian.stdin:
                    self._guardian.stdin.close()
            self._guardian = None
