"""The agent that runs one task on a node for the Spark and YARN backends (driven by
:mod:`tfdist.backends.agent.backend`).

Node code (see :mod:`tfdist.node`): shipped to Spark executors by value (cloudpickle) and to
YARN containers as a zip, so a node needs the task's own packages but not tfdist. One agent per
tfdist task (on Spark, all in one barrier
stage: gang, all start or none):

- it connects back to the driver's channel (:func:`serve` is the driver's side of the
  handshake), proves it knows the job's secret and checks that the driver knows it too
  (HMAC over fresh nonces both ways: the secret never travels on that connection);
- it holds a port with ``SO_REUSEPORT`` on its host (the port the driver asks for, or any)
  and reports ``host:port``; the driver builds TF_CONFIG from every agent's report;
- it runs its task's command (from the job spec shipped in the closure, never from the
  connection) as a :class:`procs.TaskProcess`, with the environment the driver sends for
  each attempt, and streams output lines and the exit back at once;
- it restarts on command, so a failed task never fails the barrier stage; when the driver
  says ``shutdown`` or the connection drops (tfdist died), it kills the task's process group
  and every process marked with the task's token, releases the port and returns;
- with ``restart.warm_spares`` (the task's ``spare``: the spare program's source and the
  script's imports) it holds a warm spare for its task (:mod:`tfdist.node.spares`, the
  local backend's mechanism): made once the driver relays that the job trains (``fill``), and
  a restart is handed to it instead of starting the command cold;
- both sides send a heartbeat every :data:`BEAT_SECONDS`, and a side that hears nothing for
  :data:`SILENCE_SECONDS` takes the other for gone: a host cut off from the network closes no
  connection (TCP without traffic waits for ever), so without this an agent on a cut host
  would look alive to the driver and keep its task running after the link came back.

Wire format: one JSON object per line, both ways.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from tfdist import contract
from tfdist.node import guardian, leave_program, procs, spares, staging, usage

#: A message longer than this ends the connection (output lines are cut at procs.MAX_LINE).
MAX_MESSAGE = 16 * 1024 * 1024
HANDSHAKE_SECONDS = 30.0
#: Each side of a connection sends ``beat`` this often, whatever else it sends.
BEAT_SECONDS = 5.0
#: Nothing heard for this long: the other side is taken for gone (a cut host, a dead driver).
#: Six beats, so a thread that a loaded machine holds up for seconds is not taken for dead.
SILENCE_SECONDS = 30.0


def proof(secret: str, side: str, nonce: str) -> str:
    """What ``side`` ("agent" or "driver") sends to show it knows ``secret``."""
    return hmac.new(secret.encode(), f"{side}:{nonce}".encode(), hashlib.sha256).hexdigest()


def send(sock: socket.socket, lock: threading.Lock, message: dict[str, Any]) -> bool:
    data = (json.dumps(message) + "\n").encode()
    with lock:
        try:
            sock.sendall(data)
        except OSError:
            return False
    return True


class LineReader:
    """Read JSON lines from a socket; ``None`` at end of connection, on garbage, or when
    nothing came within the timeout (then ``silent`` is True)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.silent = False

    def read(self, timeout: float | None = None, limit: int = MAX_MESSAGE) -> dict[str, Any] | None:
        """The next message; None too for one longer than ``limit`` bytes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buf:
            if len(self.buf) > limit:
                return None
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ready, _, _ = select.select([self.sock], [], [], left)
            except (OSError, ValueError):  # closed meanwhile by another thread
                return None
            if not ready:
                self.silent = True
                return None
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return None
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        try:
            got = json.loads(line)
        except ValueError:
            return None
        return got if isinstance(got, dict) else None


def beat_until(stop: threading.Event, sock: socket.socket, lock: threading.Lock, message: dict[str, Any],
               every: float) -> None:
    """Send ``message`` every ``every`` seconds until ``stop`` is set or a send fails."""
    while not stop.wait(every):
        if not send(sock, lock, message):
            return


def host_facing(address: tuple[str, int]) -> str:
    """This machine's IP on the route to ``address`` (what other hosts reach it by)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(address)
        return str(probe.getsockname()[0])


def task_path(path: str | None, python: str | None) -> str:
    """PATH for a task: the directory of the executors' Python (``spark.pyspark.python``,
    relative to the executor's directory as Spark reads it, e.g. ``./environment/bin/python``
    from ``spark.archives``) first, so ``command: [python, ...]`` runs the interpreter that
    has the job's packages. The worker's own ``sys.executable`` is no guide: Spark may start
    it through a resolved symlink, outside its virtual environment."""
    if python and os.sep in python:
        return os.pathsep.join([os.path.dirname(os.path.abspath(python)), path or ""])
    return procs.python_first(path)


class Agent:
    """One task on one executor, for as long as the driver keeps the connection."""

    def __init__(self, sock: socket.socket, task: dict[str, Any], token: str) -> None:
        self.sock = sock
        self.task = task
        self.token = token
        self.lock = threading.Lock()
        self.proc: procs.TaskProcess | None = None
        self.guardian = guardian.Guardian()
        self.setpriv = procs.find_setpriv()  # once per agent (this executor), not per attempt
        #: Where the task's staged inputs and outputs go on this node: the agent's own working
        #: directory (Spark's executor directory, YARN's container directory).
        self.home = os.getcwd()
        #: The task's warm spare (restart.warm_spares), made at its first start.
        self.spare = spares.HeldSpare(str(task.get("name", "")), "agent")
        #: The attempt now running and its process, for the usage samples (see sampled()).
        self.current: tuple[int, procs.TaskProcess] | None = None

    def start(self, attempt: int, env: dict[str, str], cwd: str) -> None:
        # Still running means not reaped: the exit the driver restarts on is reported after
        # the reap but before TaskProcess marks itself done, and a restart arriving in
        # between must not be refused (a loaded executor did, costing a second restart).
        if self.proc is not None and self.proc.exit_code is None:
            send(self.sock, self.lock, {"ev": "exit", "attempt": attempt, "code": 127, "time": time.time(),
                                        "error": "the previous attempt is still running"})
            return
        cwd = os.path.abspath(cwd)  # a spare changes into it from where it already is
        kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                if p and "pyspark" not in p and "py4j" not in p and "spark-core" not in p]
        full = procs.task_environ(os.environ, env, drop=("TFDIST_", "PYSPARK_", "SPARK_"), host={
            "PATH": task_path(os.environ.get("PATH"), self.task.get("python")),
            # the executor's own, without the zips pyspark adds for its workers
            "PYTHONPATH": os.pathsep.join(kept) or None,
        })

        def on_lines(lines: list[str], when: float) -> None:
            send(self.sock, self.lock, {"ev": "lines", "attempt": attempt, "time": when, "lines": lines})

        def on_active(when: float) -> None:
            send(self.sock, self.lock, {"ev": "active", "attempt": attempt, "time": when})

        prepared = self._prepare(attempt, full, on_lines)
        if prepared is None:
            return

        def on_exit(code: int, when: float) -> None:
            prepared.close()  # the last copy of the task's outputs, before its exit is told
            send(self.sock, self.lock, {"ev": "exit", "attempt": attempt, "code": code, "time": when})

        proc = self.spare.take(attempt, isinstance(self.task.get("spare"), dict), full, cwd, on_lines,
                               on_exit, on_active)
        try:
            self.proc = proc or procs.TaskProcess(
                leave_program.launch(self.task["command"], self.task.get("leave")), full, cwd,
                token=f"{self.token}/{attempt}",
                on_lines=on_lines, on_exit=on_exit, on_active=on_active, guardian=self.guardian,
                setpriv=self.setpriv,
            )
        except OSError as err:
            now = time.time()
            on_lines([f"tfdist: cannot start on {socket.gethostname()}: {err}"], now)
            on_exit(127, now)
            return
        prepared.start()
        self.current = (attempt, self.proc)
        send(self.sock, self.lock, {"ev": "started", "attempt": attempt, "pid": self.proc.pid,
                                    "time": time.time()})
        self._want_spare(attempt, full, cwd)

    def _prepare(self, attempt: int, env: dict[str, str],
                 on_lines: Callable[[list[str], float], None]) -> staging.Prepared | None:
        """Stage the task's inputs and fill its outputs on this node, under the agent's own
        directory (the executor's or container's, not a shared workdir), before it starts;
        None (its exit told) if its data cannot be had."""
        if contract.DATA_PLAN not in env:
            return staging.Prepared()
        try:
            prepared = staging.prepare(env, staging.task_root(self.home, str(self.task.get("name"))),
                                       lambda line: on_lines([line], time.time()))
        except (OSError, ValueError) as err:
            now = time.time()
            on_lines([f"tfdist: cannot stage {self.task.get('name')}'s data on {socket.gethostname()}: "
                      f"{err}"], now)
            send(self.sock, self.lock, {"ev": "exit", "attempt": attempt, "code": 127, "time": now,
                                        "error": "cannot stage data"})
            return None
        del env[contract.DATA_PLAN]
        env.update(prepared.env)
        return prepared

    def _want_spare(self, attempt: int, env: dict[str, str], cwd: str) -> None:
        """From now on keep a spare for the task, started as the task was (its environment,
        session, parent-death signal, guardian and the agent's token), if it wants one."""
        wanted = self.task.get("spare")
        if not isinstance(wanted, dict):
            return
        name = self.task["name"]

        def make(argv: list[str], env: Any, sink: spares.Sink) -> procs.TaskProcess:
            return procs.TaskProcess(argv, env, cwd, token=f"{self.token}/spare", on_lines=sink.lines,
                                     on_exit=sink.exit, on_active=sink.active, guardian=self.guardian,
                                     setpriv=self.setpriv, stdin_pipe=True)

        def ready(pid: int) -> None:
            send(self.sock, self.lock, {"ev": "lines", "attempt": attempt, "time": time.time(),
                                        "lines": [spares.ready_line(name, pid)]})

        self.spare.want(self.task["command"], cwd, env, wanted, make, ready, self.task.get("leave"))

    def to_sample(self) -> dict[str, tuple[int, int | None]]:
        """The task's process to sample while it runs (the limit is the driver's business:
        YARN's container and Spark's executor enforce their own)."""
        current = self.current
        if current is None or current[1].done.is_set():
            return {}
        return {str(current[0]): (current[1].pid, None)}

    def sampled(self, samples: Any) -> None:
        """Send the usage of the attempt sampled, as the agent's other messages go."""
        for attempt, s in samples.items():
            send(self.sock, self.lock, {"ev": "usage", "attempt": int(attempt), "time": s.time,
                                        "cpu": s.cpu, "rss": s.rss})

    def fill(self) -> None:
        """The job trains (the driver says so): make the task's spare if it is missing."""
        self.spare.fill()

    def signal(self, signum: int) -> None:
        if self.proc is not None:
            self.proc.signal(signum)

    def shutdown(self) -> None:
        self.spare.close()  # an idle spare first: none may take the task from here on
        if self.proc is not None:
            procs.terminate_all([self.proc], 0)
        procs.kill_marked(self.token)
        self.guardian.close()


class Refused(ConnectionError):
    """The driver closed the connection instead of answering the claim: the task has a live
    agent already (or the driver does not know this job)."""


class Receiver:
    """What takes the driver's ``put`` messages (the yarn backend's shipped working directory)."""

    def put(self, message: dict[str, Any]) -> None:
        raise NotImplementedError


def run_agent(
    driver: tuple[str, int], secret: str, token: str, tasks: list[dict[str, Any]],
    partition: int, cwd: str, facts: dict[str, Any], receiver: Receiver | None = None,
    beat: float = BEAT_SECONDS, silence: float = SILENCE_SECONDS,
) -> dict[str, Any]:
    """The whole life of one agent; returns what it did (Spark collects it). ``receiver``
    takes ``put`` messages, which the driver sends before the first ``start`` (so they are
    handled, in order, before any task runs). It ends when the driver says so, when the
    connection drops, or when the driver is silent for ``silence`` seconds (this host cut
    off: the task must not outlive the cut)."""
    task = tasks[partition]
    sock = socket.create_connection(driver, timeout=HANDSHAKE_SECONDS)
    sock.settimeout(None)
    reader = LineReader(sock)
    held: socket.socket | None = None
    # This agent's own mark, under the task's: its shutdown kills what it started, never the
    # processes of another agent of the same task on this machine (a replacement container
    # whose claim the driver refused while the old agent's task still ran beside it killed
    # that task when the mark was the task's alone)
    agent = Agent(sock, task, f"{token}/{task['name']}/{secrets.token_hex(4)}")
    lock = agent.lock
    ended = "connection lost"
    beating = threading.Event()
    sampling: usage.SamplingThread | None = None
    try:
        hello = reader.read(HANDSHAKE_SECONDS)
        if not hello or "nonce" not in hello:
            raise ConnectionError("the driver did not greet")
        mine = secrets.token_hex(16)
        host = host_facing(driver)
        send(sock, lock, {"proof": proof(secret, "agent", str(hello["nonce"])), "nonce": mine,
                          "partition": partition, "task": task["name"], "host": host, **facts})
        reply = reader.read(HANDSHAKE_SECONDS)
        if not reply:
            raise Refused(f"the driver refused {task['name']} (it has a live agent already)")
        if not hmac.compare_digest(str(reply.get("proof", "")), proof(secret, "driver", mine)):
            raise ConnectionError("the driver did not prove it knows the job's secret")
        try:
            held = procs.hold_port(int(reply.get("port", 0)))
            send(sock, lock, {"held": int(held.getsockname()[1])})
        except OSError as err:
            send(sock, lock, {"error": f"cannot hold port {reply.get('port')} on {host}: {err}"})
            return {"task": task["name"], "ended": "port"}
        threading.Thread(target=beat_until, args=(beating, sock, lock, {"ev": "beat"}, beat),
                         name="agent-beat", daemon=True).start()
        sampling = usage.SamplingThread(agent.to_sample, agent.sampled).start()
        while True:
            msg = reader.read(silence)
            if msg is None:
                if reader.silent:
                    ended = f"the driver was silent for {silence:g}s"
                break
            op = msg.get("op")
            if op == "start":
                env = {str(k): str(v) for k, v in dict(msg.get("env", {})).items()}
                agent.start(int(msg["attempt"]), env, cwd)
            elif op == "signal":
                agent.signal(int(msg["signum"]))
            elif op == "fill":
                agent.fill()
            elif op == "put" and receiver is not None:
                receiver.put(msg)
            elif op == "shutdown":
                ended = "shutdown"
                break
    finally:
        beating.set()
        if sampling is not None:
            sampling.stop()
        agent.shutdown()
        if held is not None:
            held.close()
        with contextlib.suppress(OSError):
            sock.close()
    return {"task": task["name"], "ended": ended}


def executor_id(env: Any, ancestors: list[list[str]]) -> str:
    """The executor's id, as Spark's driver knows it (what ``killAndReplaceExecutor`` takes):
    from its log URL on a standalone cluster; on YARN, whose log URLs name the container only,
    from the ``--executor-id`` its JVM was started with (the JVM is an ancestor of this
    pyspark worker: ``ancestors`` are their command lines, nearest first); else its container,
    or ``driver`` in local mode."""
    url = str(env.get("SPARK_LOG_URL_STDERR", ""))
    _, found, rest = url.partition("executorId=")
    if found:
        return rest.split("&")[0]
    for argv in ancestors:
        if "--executor-id" in argv[:-1]:
            return argv[argv.index("--executor-id") + 1]
    return str(env.get("CONTAINER_ID") or "driver")


def ancestors_argv(limit: int = 6) -> list[list[str]]:
    """The command lines of this process's parents, nearest first (Linux /proc; empty elsewhere)."""
    found, pid = [], os.getppid()
    for _ in range(limit):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline, open(f"/proc/{pid}/stat") as info:
                found.append(cmdline.read().decode(errors="replace").split("\0"))
                stat = info.read()
        except OSError:
            break
        pid = int(stat.rpartition(")")[2].split()[1])  # the field after the state: the parent
        if pid <= 1:
            break
    return found


def yarn_container(env: Any) -> dict[str, str]:
    """On YARN: the executor's container, its NodeManager's web address (where its logs are)
    and the RM's id of that node (``NM_HOST:NM_PORT``: how a lost node is told)."""
    if not env.get("CONTAINER_ID"):
        return {}
    return {"container": str(env["CONTAINER_ID"]),
            "node_http": f"{env.get('NM_HOST', '')}:{env.get('NM_HTTP_PORT', '')}",
            "node": f"{env.get('NM_HOST', '')}:{env.get('NM_PORT', '')}"}
