"""The real YARN cluster of `make yarn-up` (yarn/yarn.sh), as pytest fixtures.

Tests that use it skip, with one line saying why and how to get it, when it does not run
(no Java or Maven, a failed fetch or start: .yarn/unavailable says which), or was simply not
started. The cluster (one ResourceManager, two NodeManagers on 127.0.0.1) is shared by every
test of a session.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tfdist.backends.yarn import rest

ROOT = Path(__file__).resolve().parents[3]
STATE = ROOT / ".yarn"
CONF = STATE / "conf"
UNAVAILABLE = STATE / "unavailable"


def why_unavailable() -> str | None:
    """None when the cluster answers; else one line: why not, and how to get it."""
    if not (STATE / "rm-url").exists() or not (CONF / "yarn-site.xml").exists():
        if UNAVAILABLE.exists():
            return f"no YARN cluster: {UNAVAILABLE.read_text().strip()}"
        return "no YARN cluster running; start one with: make yarn-up"
    try:
        Cluster().get("/ws/v1/cluster/info")
    except OSError as err:
        return f"the YARN cluster of .yarn/ does not answer ({err}); restart it: make yarn-down yarn-up"
    return None


class RmApps:
    """A ResourceManager's applications by tag, for a class whose ``get(path)`` asks its REST API."""

    def get(self, path: str) -> Any:
        raise NotImplementedError

    def apps(self, tag: str) -> list[dict[str, Any]]:
        got = self.get(f"/ws/v1/cluster/apps?applicationTags={tag}").get("apps") or {}
        return list(got.get("app") or [])

    def live_apps(self, tag: str, wait: float = 30.0) -> list[dict[str, Any]]:
        """Applications with ``tag`` still live after up to ``wait`` seconds."""
        deadline = time.monotonic() + wait
        while True:
            live = [a for a in self.apps(tag) if a["state"] in rest.LIVE_STATES]
            if not live or time.monotonic() > deadline:
                return live
            time.sleep(0.5)


class Cluster(RmApps):
    """The test cluster's RM REST API as plain JSON, and its client configuration."""

    def __init__(self) -> None:
        self.url = (STATE / "rm-url").read_text().strip()
        self.conf_dir = CONF
        self.env = {"HADOOP_CONF_DIR": str(CONF)}

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as reply:
            return json.loads(reply.read())

    def shut_down(self, container_id: str) -> None:
        """Have YARN end a container, as an operator or a preemption would: the RM's signal
        API, ``FORCEFUL_SHUTDOWN`` (the NodeManager kills it; its node stays live)."""
        req = urllib.request.Request(f"{self.url}/ws/v1/cluster/containers/{container_id}/signal/FORCEFUL_SHUTDOWN"
                                     f"?user.name={getpass.getuser()}", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass



def container_pids(container_id: str) -> list[int]:
    """Processes running in a YARN container (their environment names it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            env = (entry / "environ").read_bytes().split(b"\0")
            if f"CONTAINER_ID={container_id}".encode() in env:
                found.append(int(entry.name))
    return found


def task_process(task: str, deadline: float, job: str | None = None,
                 cli: subprocess.Popen[str] | None = None, attempt: int = 0) -> int:
    """The pid of an attempt of a task (the first unless ``attempt`` says; of job ``job``,
    when given: other sessions' jobs have a worker-0 too) running in a container (its
    environment names it). Fails at once, with what it said, when the tfdist run ``cli`` ends
    first."""
    mark = f"TFDIST_JOB_NAME={job}".encode() if job else None
    while time.monotonic() < deadline:
        if cli is not None and cli.poll() is not None:
            said = cli.stderr.read() if cli.stderr else ""
            pytest.fail(f"tfdist ended (exit {cli.returncode}) before {task} ran in a YARN container: {said[-3000:]}")
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                env = (entry / "environ").read_bytes().split(b"\0")
                if (f"TFDIST_TASK={task}".encode() in env and f"TFDIST_RESTART_COUNT={attempt}".encode() in env
                        and (mark is None or mark in env) and any(e.startswith(b"CONTAINER_ID=") for e in env)):
                    return int(entry.name)
        time.sleep(0.5)
    pytest.fail(f"{task} never ran in a YARN container")


def container_processes(app_ids: list[str]) -> list[int]:
    """Processes still running in any container of these applications (CONTAINER_ID in their
    environment names the application: container_[eN_]TS_SEQ_ATTEMPT_N)."""
    marks = [app_id.removeprefix("application") + "_" for app_id in app_ids]  # _TS_SEQ_
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for var in (entry / "environ").read_bytes().split(b"\0"):
                if var.startswith(b"CONTAINER_ID=") and any(m.encode() in var for m in marks):
                    found.append(int(entry.name))
    return found


@pytest.fixture(scope="session")
def yarn() -> Cluster:
    why = why_unavailable()
    if why:
        pytest.skip(why)
    return Cluster()


@pytest.fixture
def yarn_env(yarn: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """The cluster, with HADOOP_CONF_DIR set for the tfdist commands a test runs."""
    monkeypatch.setenv("HADOOP_CONF_DIR", str(yarn.conf_dir))
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    os.environ.pop("HADOOP_USER_NAME", None)
    return yarn


RUN = STATE / "run"
YARN_SH = ROOT / "yarn" / "yarn.sh"
_PMEM_ON = "<name>yarn.nodemanager.pmem-check-enabled</name><value>true</value>"


def pmem_check_on() -> bool:
    """Do the test cluster's NodeManagers run with YARN's physical-memory check on (their
    yarn-site.xml says so; ``yarn/yarn.sh pmem-check`` rewrites it before it restarts them)?"""
    sites = sorted(RUN.glob("nm-*/conf/yarn-site.xml"))
    return bool(sites) and all(_PMEM_ON in site.read_text() for site in sites)


def _pmem_check(state: str) -> None:
    done = subprocess.run([str(YARN_SH), "pmem-check", state], cwd=ROOT, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=400, check=False)
    if done.returncode != 0:
        pytest.fail(f"yarn/yarn.sh pmem-check {state} failed (exit {done.returncode}): {done.stderr[-2000:]}")


@pytest.fixture
def pmem_checked(yarn_env: Cluster) -> Iterator[Cluster]:
    """The cluster with YARN's physical-memory check on (a container over its memory is
    killed, exit status -104), and off again after: ``yarn/yarn.sh pmem-check on|off``
    restarts the NodeManagers (the ResourceManager and HDFS stay up; their containers end,
    and their localized files go). A test using it is marked ``restarts_cluster``, so it
    runs after the rest of the YARN group (tests/conftest.py)."""
    _pmem_check("on")
    try:
        yield yarn_env
    finally:
        _pmem_check("off")


def nodemanager_at(node_http: str) -> str:
    """The name (``nm-0``) of the test cluster's NodeManager serving ``node_http``."""
    port = node_http.rpartition(":")[2]  # the host may be written localhost or 127.0.0.1
    for site in sorted(RUN.glob("nm-*/conf/yarn-site.xml")):
        if f"<name>yarn.nodemanager.webapp.address</name><value>127.0.0.1:{port}</value>" in site.read_text():
            return site.parent.parent.name
    raise LookupError(f"no NodeManager of .yarn/ serves {node_http}")


class KilledNodeManager:
    """A NodeManager SIGKILLed as a lost node's would be (its containers' processes stay:
    they run in sessions of their own), and started again the same way yarn.sh started it,
    so the cluster is whole for the next test."""

    def __init__(self, name: str) -> None:
        self.name = name
        pid = int((RUN / "pids" / name).read_text())
        proc = Path(f"/proc/{pid}")
        self.argv = [a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
        self.env = dict(e.decode().partition("=")[::2] for e in (proc / "environ").read_bytes().split(b"\0") if e)
        self.cwd = os.readlink(proc / "cwd")
        os.kill(pid, signal.SIGKILL)
        while proc.exists() and b"State:\tZ" not in (proc / "status").read_bytes():
            time.sleep(0.1)

    def restart(self, cluster: Cluster, timeout: float = 180) -> None:
        log = STATE / "logs" / f"{self.name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        (RUN / "pids" / self.name).write_text(f"{proc.pid}\n")  # yarn.sh down stops it
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                nodes = (cluster.get("/ws/v1/cluster/nodes?states=RUNNING").get("nodes") or {}).get("node") or []
                if len(nodes) >= len(list(RUN.glob("nm-*/conf"))):
                    return
            time.sleep(1)
        raise RuntimeError(f"{self.name} did not register again within {timeout:g}s")


@contextlib.contextmanager
def cluster_full(cluster: Cluster, queue: str = "tfdist", timeout: float = 60) -> Iterator[list[str]]:
    """Every vcore of every NodeManager held, so that an application submitted meanwhile gets
    no container for its AM and stays ACCEPTED for as long as this lasts (no timing luck:
    the RM has nothing to give). One holding application per node, whose AM container asks
    for all of a node's vcores and runs a plain ``sleep`` (no JVM: cheap); it never
    registers, so the RM keeps it ACCEPTED with its container held. Killed on the way out."""
    rm = rest.ResourceManager.from_environ(cluster.env)
    nodes = [n for n in rm.nodes() if n.get("state") == "RUNNING"]
    holders = []
    try:
        for node in nodes:
            vcores = int(node["availableVirtualCores"]) + int(node["usedVirtualCores"])
            app_id, _ = rm.new_application()
            holders.append(app_id)
            rm.submit({"application-id": app_id, "application-name": "tfdist-test-holder", "queue": queue,
                       "application-type": "tfdist-test", "application-tags": {"tag": ["tfdist-test-holder"]},
                       "max-app-attempts": 1, "unmanaged-AM": False, "resource": {"memory": 128, "vCores": vcores},
                       "am-container-spec": {"commands": {"command": "sleep 600"}}})
        deadline = time.monotonic() + timeout
        while int(cluster.get("/ws/v1/cluster/metrics")["clusterMetrics"]["availableVirtualCores"]) > 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster's vcores were not all held within {timeout:g}s "
                                   f"(an application of another test still running?): {cluster.get('/ws/v1/cluster/metrics')}")
            time.sleep(0.2)
        yield holders
    finally:
        for app_id in holders:
            with contextlib.suppress(rest.RMError):
                rm.kill(app_id)
