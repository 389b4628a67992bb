"""A real Spark standalone cluster on 127.0.0.1 for tests and benchmarks: a master and
workers started from the pyspark installation with ``spark-class`` (no download, no mocks)."""

from __future__ import annotations

import contextlib
import ctypes  # noqa: F401 - die_with_parent runs in the forked child: loaded here, not there
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from tfdist.backends.yarn.plan import QUICK_JVM
from tfdist.node.procs import die_with_parent


def quick_jvm_environ(root: Path) -> dict[str, str]:
    """What the test suite gives every Spark JVM it starts (``tests/conftest.py``; benchmarks
    leave the JVMs' defaults) the options of a JVM that only coordinates,
    :data:`~tfdist.backends.yarn.plan.QUICK_JVM` (``--backend yarn``'s AM runs with them too).
    These JVMs coordinate, then mostly idle; C2's compiler threads and the parallel collector
    cost CPU that this project's 2-core machines need for the tasks (docs/developing.md has
    the figures). The environment sets them for the daemons
    (``SPARK_DAEMON_JAVA_OPTS``) and, through a ``SPARK_CONF_DIR`` written under ``root``,
    every driver, executor and YARN ApplicationMaster (a job's own ``spark.conf`` still wins)."""
    conf = root / "spark-conf"
    conf.mkdir(parents=True, exist_ok=True)
    keys = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions", "spark.yarn.am.extraJavaOptions")
    (conf / "spark-defaults.conf").write_text("".join(f"{key} {QUICK_JVM}\n" for key in keys))
    return {"SPARK_CONF_DIR": str(conf), "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free(port: int) -> bool:
    """Can ``port`` be bound on 127.0.0.1 now (a cluster at a documented address, 7077 or
    6379, is started there only when it can)?"""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def spark_home() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    return Path(pyspark.__file__).resolve().parent


def missing() -> str | None:
    """Why a Spark cluster cannot be started here (None when it can)."""
    if spark_home() is None:
        return "pyspark is not installed: pip install -e '.[spark]' (make setup installs it)"
    java = Path(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    if not java or not Path(java).exists():
        return "Spark needs Java 17+: install a JDK (e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    return None


class StandaloneCluster:
    """``spark://127.0.0.1:PORT`` with ``workers`` workers of ``cores`` cores each."""

    def __init__(self, workers: int = 2, cores: int = 2, port: int | None = None) -> None:
        home = spark_home()
        assert home is not None
        self.home: Path = home
        self.workers, self.cores = workers, cores
        self.dir = Path(tempfile.mkdtemp(prefix="tfdist-spark-"))
        self.port, self.ui_port = port or free_port(), free_port()
        self.master = f"spark://127.0.0.1:{self.port}"
        self.ui = f"http://127.0.0.1:{self.ui_port}"
        self.procs: list[subprocess.Popen] = []

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        env = dict(os.environ, SPARK_HOME=str(self.home), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_LOG_DIR=str(self.dir), SPARK_WORKER_DIR=str(self.dir / "work"),
                   SPARK_NO_DAEMONIZE="1")
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=die_with_parent)  # a killed test run leaves no cluster
        self.procs.append(proc)
        return proc

    def start(self, timeout: float = 90) -> StandaloneCluster:
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))
        for i in range(self.workers):
            self._spawn(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                        "--cores", str(self.cores), "--memory", "1g", "--webui-port", str(free_port()),
                        self.master)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                if len([w for w in self.status()["workers"] if w["state"] == "ALIVE"]) == self.workers:
                    return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the Spark cluster did not come up in {timeout}s; logs in {self.dir}")

    def status(self) -> dict:
        """The master's JSON status page (workers, active and completed applications)."""
        with urllib.request.urlopen(self.ui + "/json/", timeout=5) as r:
            return json.loads(r.read())

    def active_apps(self, wait: float = 20.0) -> list[str]:
        """Applications still running on the cluster (waits up to ``wait`` for them to end)."""
        deadline = time.monotonic() + wait
        while True:
            apps = [a["name"] for a in self.status().get("activeapps", [])]
            if not apps or time.monotonic() > deadline:
                return apps
            time.sleep(0.5)

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def agent_handshake(address: tuple[str, int], secret: str, *, partition: int = 0, host: str = "127.0.0.1",
                    held: int = 4242, report: dict | None = None) -> tuple[socket.socket, dict | None]:
    """An agent's half of the channel's handshake for task ``partition`` (as
    ``node_agent.run_agent`` does it), reporting ``host`` (and ``report``: where it runs)
    and, once admitted, the port it ``held``: (the socket, the driver's reply or None when
    refused)."""
    import threading

    from tfdist.node import agent as node_agent

    sock = socket.create_connection(address, timeout=5)
    reader = node_agent.LineReader(sock)
    hello = reader.read(5)
    assert hello and "nonce" in hello
    lock = threading.Lock()
    node_agent.send(sock, lock, {"proof": node_agent.proof(secret, "agent", hello["nonce"]), "nonce": "n1",
                                  "partition": partition, "host": host, **(report or {})})
    reply = reader.read(5)
    if reply is not None:
        assert reply["proof"] == node_agent.proof(secret, "driver", "n1")  # the driver proves it too
        node_agent.send(sock, lock, {"held": held})
    return sock, reply
