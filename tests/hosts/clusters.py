"""Spark standalone and Ray clusters whose daemons run on hosts of the test bed, and
``tfdist`` run on a host as the driver. Each daemon binds its host's own address; the
test process reaches them only through the bed (``bed.get``, ``bed.run``), never from the
root namespace."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from tests.backends.spark.spark_cluster import spark_home
from tests.backends.yarn.yarn_cluster import RmApps
from tests.conftest import ROOT, TFDIST
from tests.hosts.testbed import Host, HostBed


class Daemons:
    """A cluster's daemons, each started on a host of the bed (its log on that host's
    workdir); :meth:`stop` ends them, then everything else on their hosts."""

    #: Each host's directory the cluster keeps its state in (removed by :meth:`stop`).
    STATE = ""
    GRACE = 15.0  #: seconds a daemon has to end after SIGTERM

    def __init__(self, bed: HostBed, hosts: list[Host]) -> None:
        self.bed, self.hosts = bed, hosts
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, host: Host, key: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        """Start ``argv`` on ``host`` as the daemon ``key``, output to ``log``."""
        from tfdist.node.procs import die_with_parent

        log.parent.mkdir(exist_ok=True)
        with open(log, "ab") as out:
            self.procs[key] = self.bed.run(host, argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)

    def stop(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=self.GRACE)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for host in set(self.hosts):
            self.bed.crash(host)  # what the daemons started (executors, workers, tasks) goes too
            shutil.rmtree(host.workdir / self.STATE, ignore_errors=True)


class SparkOnHosts(Daemons):
    """A standalone master on ``master`` and one worker of ``cores`` cores on each of
    ``workers``; logs and each worker's directory on its own host's workdir."""

    PORT, UI = 7077, 8080
    STATE = "spark-work"

    def __init__(self, bed: HostBed, master: Host, workers: list[Host], cores: int = 2) -> None:
        super().__init__(bed, [master, *workers])
        home = spark_home()
        assert home is not None
        self.home, self.master_host, self.worker_hosts, self.cores = home, master, workers, cores
        self.master = f"spark://{master.address}:{self.PORT}"
        self.ui = f"http://{master.address}:{self.UI}"
        #: Workers the master still lists for a host whose worker was started again: a
        #: crashed host's old worker stays ALIVE there until its heartbeats time out (60 s),
        #: and counting it let a test start before the new one could take executors.
        self._stale: set[str] = set()

    def _spawn(self, host: Host, name: str, *args: str) -> None:
        logs = host.workdir / "spark-logs"
        env = dict(os.environ, SPARK_HOME=str(self.home), SPARK_LOCAL_IP=host.address,
                   SPARK_LOCAL_HOSTNAME=host.name, SPARK_LOG_DIR=str(logs),
                   SPARK_WORKER_DIR=str(host.workdir / self.STATE), SPARK_NO_DAEMONIZE="1")
        self.spawn(host, name, [str(self.home / "bin" / "spark-class"), *args], env, logs / f"{name}.log")

    def start_worker(self, host: Host) -> None:
        with contextlib.suppress(OSError, ValueError, KeyError):
            self._stale |= {str(w["id"]) for w in self.status()["workers"] if w["host"] in (host.name, host.address)}
        self._spawn(host, f"worker-{host.name}", "org.apache.spark.deploy.worker.Worker", "--host", host.address,
                    "--cores", str(self.cores), "--memory", "1g", "--webui-port", "8081", self.master)

    def start(self, timeout: float = 300) -> SparkOnHosts:
        self._spawn(self.master_host, "master", "org.apache.spark.deploy.master.Master", "--host",
                    self.master_host.address, "--port", str(self.PORT), "--webui-port", str(self.UI))
        for host in self.worker_hosts:
            self.start_worker(host)
        self.wait_workers(len(self.worker_hosts), timeout)
        return self

    def status(self) -> dict[str, Any]:
        """The master's JSON status page, fetched from the master's own host."""
        return self.bed.get_json(self.master_host, self.ui + "/json/")  # type: ignore[no-any-return]

    def alive_workers(self) -> list[str]:
        with contextlib.suppress(OSError, ValueError):
            return sorted(w["host"] for w in self.status()["workers"]
                          if w["state"] == "ALIVE" and str(w["id"]) not in self._stale)
        return []

    def wait_workers(self, n: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while len(self.alive_workers()) != n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{n} Spark workers did not register in {timeout}s; logs under each "
                                   "host's workdir/spark-logs")
            time.sleep(0.5)

    def active_apps(self, wait: float = 20.0) -> list[str]:
        deadline = time.monotonic() + wait
        while True:
            apps = [a["name"] for a in self.status().get("activeapps", [])]
            if not apps or time.monotonic() > deadline:
                return apps
            time.sleep(0.5)

    def args(self) -> list[str]:
        return ["--backend", "spark", "--spark-master", self.master, "--set", f"spark.master_ui={self.ui}"]


#: What a task of the tests' jobs prints first (``python show.py && ...``): what it got where it runs.
SHOW = """
import json, os, socket
print("ENV " + json.dumps({"TF_CONFIG": os.environ["TF_CONFIG"], "EXTRA": os.environ.get("EXTRA"),
      "cwd": os.getcwd(), "hostname": socket.gethostname(), "data": open("data.txt").read()}), flush=True)
"""


def digits_project(host: Host) -> Path:
    """The digits examples copied to ``host``'s own disk (the driver's), with ``show.py`` and a
    ``data.txt`` saying where it was shipped from."""
    proj = host.workdir / "digits"
    shutil.rmtree(proj, ignore_errors=True)
    shutil.copytree(ROOT / "examples" / "digits", proj, ignore=shutil.ignore_patterns("__pycache__"))
    (proj / "show.py").write_text(SHOW)
    (proj / "data.txt").write_text(f"shipped from {host.name}")
    return proj


def logs(result: dict[str, Any]) -> dict[str, str]:
    """Each task's log of a finished run, by task name."""
    return {p.stem: p.read_text() for p in (Path(result["run_dir"]) / "logs").glob("*.log")}


def shown_where_run(bed: HostBed, result: dict[str, Any], shipped_from: str, state: str,
                    ) -> dict[str, list[dict[str, Any]]]:
    """What every attempt of every task printed first (:data:`SHOW`; a task's log keeps each
    attempt's lines), checked: its TF_CONFIG entry the address of the host it ran on (h1 or
    h2), the job's env (EXTRA=per-job) and the workdir shipped from ``shipped_from``'s disk,
    unpacked under that host's ``state`` directory. Each task's lines, by task, in order."""
    shown: dict[str, list[dict[str, Any]]] = {}
    for task, text in logs(result).items():
        role, index = task.rsplit("-", 1)
        shown[task] = [json.loads(ln[4:]) for ln in text.splitlines() if ln.startswith("ENV ")]
        for env in shown[task]:
            own = json.loads(env["TF_CONFIG"])["cluster"][role][int(index)].split(":")[0]
            assert own == bed.host(env["hostname"]).address and env["hostname"] in ("h1", "h2"), env
            assert env["EXTRA"] == "per-job" and env["data"] == f"shipped from {shipped_from}", env
            assert env["cwd"].startswith(str(bed.host(env["hostname"]).workdir / state)), env
    return shown


def placement(result: dict[str, Any], backend: str) -> dict[str, dict[str, Any]]:
    """Where each task ran (``BACKEND_placement.json``): host name, address, container..."""
    return dict(json.loads((Path(result["run_dir"]) / f"{backend}_placement.json").read_text())["tasks"])


def job_processes(name: str) -> list[int]:
    """Processes (on any host: one process table) that carry the job's task token."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("TFDIST_PROC_TOKEN", "").startswith(f"{name}-"):
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found


def run_tfdist(bed: HostBed, host: Host, args: list[str], cwd: Path, env: dict[str, str] | None = None
               ) -> subprocess.Popen[str]:
    """``tfdist ARGS`` started on ``host`` (its own network stack and hostname), in ``cwd``
    on that host's disk: a relative ``PYTHONPATH`` (``PYTHONPATH=src pytest``) is made
    absolute first, else the tfdist found there would be another checkout's (or none)."""
    full = dict(os.environ, **(env or {}))
    if full.get("PYTHONPATH"):
        full["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in full["PYTHONPATH"].split(os.pathsep) if p)
    return bed.run(host, [*TFDIST, *args], cwd=cwd, env=full, stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, dict[str, Any], str]:
    """Wait for a ``tfdist run --json`` to end: (exit code, its summary, what else it printed:
    the plain lines and notes before the summary, then stderr)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    start = 0 if out.startswith("{") else out.rfind("\n{\n") + 1  # after the plain lines, if not --quiet
    try:
        return proc.returncode, json.loads(out[start:]), out[:start] + err
    except ValueError:
        raise AssertionError(f"no JSON summary (rc={proc.returncode}): {out[-2000:]} {err[-3000:]}") from None


NODES_UP = """
import sys, time
import ray
deadline = time.monotonic() + float(sys.argv[3])
while True:  # the head may not answer yet
    try:
        ray.init(address=sys.argv[1], logging_level="ERROR")
        break
    except Exception:
        if time.monotonic() > deadline:
            raise
        time.sleep(2)
while time.monotonic() < deadline:
    alive = [n for n in ray.nodes() if n["Alive"]]
    if len(alive) >= int(sys.argv[2]):
        print(len(alive), flush=True)
        break
    time.sleep(0.5)
"""


class RayOnHosts(Daemons):
    """A Ray head on ``head`` (no CPUs: tasks go to the nodes) and a node of ``cpus`` CPUs
    on each of ``nodes``; every node's temporary directory on its own host's workdir (the
    bed removes it, so no session directory is left under /tmp/ray)."""

    PORT = 6379
    STATE = "ray"
    #: Nothing of a node's own shutdown is checked, and the bed kills what is left on each
    #: host after it: a `ray start --block` that had not ended 20 s after SIGTERM made the
    #: module's teardown take 31 s in CI.
    GRACE = 3.0

    def __init__(self, bed: HostBed, head: Host, nodes: list[Host], cpus: int = 2) -> None:
        super().__init__(bed, [head, *nodes])
        self.head, self.nodes, self.cpus = head, nodes, cpus
        self.address = f"{head.address}:{self.PORT}"
        self._log_from: dict[str, int] = {}  # where each host's latest start begins in its log

    def _ray(self, host: Host, *args: str) -> None:
        temp = host.workdir / self.STATE
        temp.mkdir(exist_ok=True)
        log = host.workdir / "ray-start.log"
        self._log_from[host.name] = log.stat().st_size if log.exists() else 0
        ray = str(Path(sys.executable).parent / "ray")
        self.spawn(host, host.name, [ray, "start", "--block", "--disable-usage-stats",
                                     f"--node-ip-address={host.address}", f"--temp-dir={temp}",
                                     "--object-store-memory=80000000", *args],
                   dict(os.environ, RAY_USAGE_STATS_ENABLED="0"), log)

    def start_node(self, host: Host) -> None:
        self._ray(host, f"--address={self.address}", f"--num-cpus={self.cpus}")

    def stop_node(self, host: Host) -> None:
        """Whatever runs on the host ends (its node, if any is left, with it)."""
        self.bed.crash(host)
        proc = self.procs.pop(host.name, None)
        if proc is not None:
            proc.wait()

    def wait_ended(self, host: Host, timeout: float = 120) -> bool:
        """Wait until the host's ``ray start`` has ended (a node healed after the GCS declared
        it dead exits by itself: "marked as dead by the GCS"); False if it still runs."""
        proc = self.procs.get(host.name)
        with contextlib.suppress(subprocess.TimeoutExpired):
            if proc is not None:
                proc.wait(timeout=timeout)
        return proc is None or proc.poll() is not None

    def _start_head(self) -> None:
        self._ray(self.head, "--head", f"--port={self.PORT}", "--num-cpus=0", "--include-dashboard=false")

    def start(self, timeout: float = 420) -> RayOnHosts:
        self._start_head()
        for host in self.nodes:
            self.start_node(host)
        self.wait_nodes(1 + len(self.nodes), timeout)
        return self

    def wait_nodes(self, n: int, timeout: float = 180) -> None:
        """Wait until every node's ``ray start`` (the head's too) says it started, then (from
        the head's host) until ``n`` nodes are alive. A ``ray start`` that gave up is started
        again: it allows its raylet 30 s to register (fixed in Ray), which a loaded 2-core
        machine exceeded ("The current node timed out during startup"), for the head or a
        node: on main both Ray host tests failed, with a cluster of the head alone or none."""
        deadline = time.monotonic() + timeout
        hosts = [self.head, *self.nodes]
        while not all(self._started(h) for h in hosts if h.name in self.procs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"Ray nodes did not start in {timeout}s: see each host's ray-start.log")
            head = self.procs.get(self.head.name)
            again = hosts if head is not None and head.poll() is not None else [  # a new head: all anew
                h for h in self.nodes if (p := self.procs.get(h.name)) is not None and p.poll() is not None]
            for host in again:
                self.bed.crash(host)  # what the failed start left
                if host is self.head:
                    self._start_head()
                else:
                    self.start_node(host)
            time.sleep(2)
        left = max(30.0, deadline - time.monotonic())
        probe = self.bed.run(self.head, [sys.executable, "-c", NODES_UP, self.address, str(n), str(left)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = probe.communicate(timeout=left + 60)
        counted = [int(w) for w in out.split() if w.isdigit()]
        if not counted or counted[-1] < n:
            raise RuntimeError(f"{n} Ray nodes were not up in {timeout}s: {err[-2000:]}")

    def restore(self, timeout: float = 240) -> None:
        """Every node up again after a test took one away (its ``ray start`` ended, or was
        started again and has not said so yet); nothing to wait for, not even the probe of
        :meth:`wait_nodes`, while each host's latest ``ray start`` runs and said it started."""
        if not all(self._started(h) for h in (self.head, *self.nodes)):
            self.wait_nodes(1 + len(self.nodes), timeout)

    def _started(self, host: Host) -> bool:
        """The host's latest ``ray start`` runs and has said "Ray runtime started"."""
        proc = self.procs.get(host.name)
        log = host.workdir / "ray-start.log"
        return (proc is not None and proc.poll() is None and log.exists()
                and b"Ray runtime started" in log.read_bytes()[self._log_from.get(host.name, 0):])

    def args(self) -> list[str]:
        return ["--backend", "ray", "--ray-address", self.address]


class YarnOnHosts(RmApps, Daemons):
    """A YARN ResourceManager on ``rm`` and one NodeManager of ``vcores`` vcores on each of
    ``nodes``, at Hadoop's default ports on each host's own address, from the jars and the
    configuration writer of ``make yarn-up`` (yarn/yarn.sh ``conf`` and ``daemon``). Each
    daemon's configuration, local and log dirs live on its own host's workdir; the client
    configuration (``HADOOP_CONF_DIR``) a driver uses is written to that driver's host by
    :meth:`client_conf`."""

    STATE = "yarn"
    GRACE = 5.0  # a NodeManager may ignore SIGTERM for long (yarn.sh gives it 5 s too)
    WEB = 8088

    def __init__(self, bed: HostBed, rm: Host, nodes: list[Host], vcores: int = 6) -> None:
        super().__init__(bed, [rm, *nodes])
        self.rm, self.nodes, self.vcores = rm, nodes, vcores
        self.url = f"http://{rm.address}:{self.WEB}"
        self._clients: list[Path] = []

    def _conf(self, where: Path, *args: str) -> None:
        env = dict(os.environ, TFDIST_YARN_NM_VCORES=str(self.vcores))
        subprocess.run([str(YARN_SH), "conf", str(where), self.rm.address, *args], env=env, check=True,
                       stdout=subprocess.DEVNULL)

    def start_node(self, host: Host) -> None:
        state = host.workdir / self.STATE
        self._conf(state / "conf", host.address, str(state / "nm"))
        self.spawn(host, f"nm-{host.name}", [str(YARN_SH), "daemon", str(state / "conf"), "nodemanager"],
                   dict(os.environ), state / "logs" / "nodemanager.log")

    def start(self, timeout: float = 300) -> YarnOnHosts:
        subprocess.run([str(YARN_SH), "fetch"], check=True)  # a no-op once the jars are cached
        state = self.rm.workdir / self.STATE
        self._conf(state / "conf")
        self.spawn(self.rm, "rm", [str(YARN_SH), "daemon", str(state / "conf"), "resourcemanager"],
                   dict(os.environ), state / "logs" / "resourcemanager.log")
        for host in self.nodes:
            self.start_node(host)
        self.wait_nodes(len(self.nodes), timeout)
        return self

    def client_conf(self, host: Host) -> Path:
        """A client configuration (``HADOOP_CONF_DIR``) on ``host``'s own disk."""
        where = host.workdir / "hadoop-conf"
        self._conf(where)
        self._clients.append(where)
        return where

    def get(self, path: str) -> Any:
        """The RM's REST API, asked from the RM's own host."""
        return self.bed.get_json(self.rm, self.url + path)

    def nodes_in(self, *states: str) -> list[dict[str, Any]]:
        got = self.get("/ws/v1/cluster/nodes?states=" + ",".join(states)).get("nodes") or {}
        return list(got.get("node") or [])

    def wait_nodes(self, n: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError, ValueError):
                if len(self.nodes_in("RUNNING")) >= n:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{n} NodeManagers did not register in {timeout}s; logs under each "
                                   "host's workdir/yarn/logs")
            died = [k for k, p in self.procs.items() if p.poll() is not None]
            if died:
                raise RuntimeError(f"YARN daemon {died[0]} exited; see its host's workdir/yarn/logs")
            time.sleep(0.5)


    def stop(self) -> None:
        super().stop()
        for where in self._clients:
            shutil.rmtree(where, ignore_errors=True)


YARN_SH = Path(__file__).resolve().parents[2] / "yarn" / "yarn.sh"


class HdfsOnHosts(Daemons):
    """A NameNode on ``namenode`` and a DataNode on each of ``datanodes`` (the same release as
    the YARN test cluster's, through ``yarn/yarn.sh hdfs-conf`` and ``daemon``), at Hadoop's
    default ports on each host's address: ``hdfs://NAMENODE:8020``, WebHDFS at port 9870.
    Each daemon's configuration, namespace or blocks and logs are on its own host's disk,
    under ``hdfs/nn`` and ``hdfs/dn``, so a DataNode may share the NameNode's host."""

    STATE = "hdfs"
    GRACE = 5.0  # yarn.sh gives a DataNode 5 s too

    def __init__(self, bed: HostBed, namenode: Host, datanodes: list[Host]) -> None:
        super().__init__(bed, [namenode, *datanodes])
        self.namenode, self.datanodes = namenode, datanodes
        self.url = f"hdfs://{namenode.address}:8020"
        self.http = f"http://{namenode.address}:9870"

    def _daemon(self, host: Host, key: str, state: Path, conf_args: list[str], role: str) -> None:
        subprocess.run([str(YARN_SH), "hdfs-conf", str(state / "conf"), self.namenode.address, *conf_args],
                       check=True, stdout=subprocess.DEVNULL)
        self.spawn(host, key, [str(YARN_SH), "daemon", str(state / "conf"), role], dict(os.environ),
                   state / "logs" / f"{role}.log")

    def start(self, timeout: float = 300) -> HdfsOnHosts:
        subprocess.run([str(YARN_SH), "fetch"], check=True)  # a no-op once the jars are cached
        self._daemon(self.namenode, "namenode", self.namenode.workdir / self.STATE / "nn", [], "namenode")
        for host in self.datanodes:
            state = host.workdir / self.STATE / "dn"
            self._daemon(host, f"dn-{host.name}", state, [host.address, str(state / "data")], "datanode")
        self.wait_ready(len(self.datanodes), timeout)
        return self

    def wait_ready(self, n: int, timeout: float = 300) -> None:
        """Until the NameNode (asked from its own host) is out of safe mode with ``n`` live
        DataNodes."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
                bean = self.bed.get_json(self.namenode, self.http + "/jmx?qry=Hadoop:service=NameNode,"
                                         "name=FSNamesystemState")["beans"][0]
                if bean.get("NumLiveDataNodes", 0) >= n and bean.get("FSState") == "Operational":
                    info = self.bed.get_json(self.namenode, self.http + "/jmx?qry=Hadoop:service=NameNode,"
                                             "name=NameNodeInfo")["beans"][0]
                    if not info.get("Safemode"):
                        return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the NameNode and {n} DataNodes were not ready in {timeout}s; logs under "
                                   "each host's workdir/hdfs/*/logs")
            died = [k for k, p in self.procs.items() if p.poll() is not None]
            if died:
                raise RuntimeError(f"HDFS daemon {died[0]} exited; see its host's workdir/hdfs/*/logs")
            time.sleep(0.5)


class Watched:
    """A ``tfdist run --json`` whose output lines are read as they come, each with the
    monotonic time it arrived (to time what tfdist says against a fault)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        import threading

        self.proc = proc
        self.lines: list[tuple[float, str]] = []
        self._readers = [threading.Thread(target=self._read, args=(stream,), daemon=True)
                         for stream in (proc.stdout, proc.stderr)]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def first(self, text: str, after: float = 0.0) -> float | None:
        """When a line containing ``text`` first arrived (after ``after``), or None."""
        return next((t for t, ln in list(self.lines) if t >= after and text in ln), None)

    def wait(self, timeout: float) -> tuple[int, dict[str, Any], str]:
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=10)
        text = "\n".join(ln for _, ln in self.lines)
        start = text.rfind("\n{\n") + 1 if not text.startswith("{") else 0
        end = text.find("\n}", start) + 2
        try:
            return self.proc.returncode, json.loads(text[start:end]), text
        except ValueError:
            raise AssertionError(f"no JSON summary (rc={self.proc.returncode}): {text[-4000:]}") from None


def running_again(run_dir: Path) -> float | None:
    """When the group last started whole: the wall-clock time of the latest first ``running``
    row of each task's last attempt in ``events.jsonl`` (None when a task never ran)."""
    rows = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines() if ln.strip()]
    last: dict[str, int] = {}
    for row in rows:
        last[row["task"]] = max(last.get(row["task"], -1), row["attempt"])
    times = [min((r["time"] for r in rows if r["task"] == task and r["attempt"] == attempt
                  and r["state"] == "running"), default=None) for task, attempt in last.items()]
    return None if not times or None in times else max(t for t in times if t is not None)
