"""The real HDFS that `make yarn-up` (yarn/yarn.sh) starts beside YARN, as a pytest fixture:
a NameNode and two DataNodes (dn-0, dn-1) on 127.0.0.1, replication 2, WebHDFS on.

Tests that use it skip, saying why, when it does not run (the YARN cluster is not up, it was
started with TFDIST_YARN_HDFS=0, or it does not answer).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.backends.yarn.yarn_cluster import CONF, ROOT, RUN, STATE, why_unavailable

YARN_SH = ROOT / "yarn" / "yarn.sh"
HDFS_URL = STATE / "hdfs-url"
DATANODES = ("dn-0", "dn-1")


def why_hdfs_unavailable() -> str | None:
    """None when the test HDFS answers; else one line: why not, and how to get it."""
    why = why_unavailable()
    if why:
        return why.replace("no YARN cluster", "no YARN cluster (and so no HDFS)")
    if not HDFS_URL.exists():
        return "the YARN cluster of .yarn/ runs without HDFS (started with TFDIST_YARN_HDFS=0?); make yarn-down yarn-up"
    try:
        Hdfs().live_datanodes()
    except OSError as err:
        return f"the test HDFS's NameNode does not answer ({err}); restart it: make yarn-down yarn-up"
    return None


class Hdfs:
    """The test HDFS: its URI (``hdfs://127.0.0.1:PORT``), the NameNode's WebHDFS address,
    its client configuration (``HADOOP_CONF_DIR``), and its daemons to stop and start."""

    def __init__(self) -> None:
        self.url = HDFS_URL.read_text().strip()
        self.namenode = self.url.removeprefix("hdfs://")
        self.http = f"127.0.0.1:{(RUN / 'ports' / 'nn-http').read_text().strip()}"
        self.conf_dir = CONF

    def jmx(self, bean: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{self.http}/jmx?qry=Hadoop:service=NameNode,name={bean}",
                                    timeout=10) as reply:
            beans = json.loads(reply.read()).get("beans") or [{}]
        return dict(beans[0])

    def live_datanodes(self) -> dict[str, Any]:
        """The DataNodes the NameNode counts live, by transfer address."""
        return dict(json.loads(self.jmx("NameNodeInfo").get("LiveNodes") or "{}"))

    def block_hosts(self, path: str) -> list[list[str]]:
        """Each block of ``path``: the transfer addresses of the DataNodes holding it."""
        url = f"http://{self.http}/webhdfs/v1{path}?op=GETFILEBLOCKLOCATIONS&user.name={os.environ.get('USER', 'root')}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            blocks = json.loads(reply.read())["BlockLocations"]["BlockLocation"]
        return [sorted(b["names"]) for b in blocks]

    def wait_replicas(self, path: str, replicas: int = 2, timeout: float = 30) -> None:
        """Until the NameNode knows ``replicas`` DataNodes holding each block of ``path``: a
        write is complete once one replica is reported, the others' reports follow within a
        heartbeat or so, and a DataNode stopped before then takes the only known copy along."""
        deadline = time.monotonic() + timeout
        while not all(len(set(hosts)) >= replicas for hosts in self.block_hosts(path)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{path} did not reach {replicas} replicas within {timeout:g}s: "
                                   f"{self.block_hosts(path)}")
            time.sleep(0.2)

    def datanode_of_http_port(self, port: int) -> str:
        """The name (dn-0) of the DataNode whose HTTP server is at ``port``."""
        for name in DATANODES:
            if int((RUN / "ports" / f"{name}-http").read_text()) == port:
                return name
        raise LookupError(f"no DataNode of .yarn/ serves HTTP at port {port}")

    def heartbeating(self) -> list[str]:
        """The DataNodes heard from in the last 2 s (heartbeats every second here). A DataNode
        killed and started again stays "live" at the NameNode meanwhile (dead only after
        20 s), so a count of live nodes does not say the new one has registered."""
        return sorted(name for name, node in self.live_datanodes().items() if int(node.get("lastContact", 99)) <= 2)

    def registered(self, name: str) -> bool:
        """The DataNode ``name`` runs and has registered and sent its block report (its own
        JMX says so: the NameNode's list cannot tell a restarted DataNode from the one
        killed a moment ago, at the same address)."""
        port = (RUN / "ports" / f"{name}-http").read_text().strip()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/jmx?qry=Hadoop:service=DataNode,name=DataNodeInfo",
                                    timeout=5) as reply:
            bean = (json.loads(reply.read()).get("beans") or [{}])[0]
        actors = json.loads(bean.get("BPServiceActorInfo") or "[]")
        return bool(actors) and all(a.get("ActorState") == "RUNNING" and str(a.get("LastBlockReport", "")).isdigit()
                                    for a in actors)

    def wait_ready(self, timeout: float = 120) -> None:
        """Until the NameNode answers, out of safe mode, every DataNode registered and
        heartbeating."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError, ValueError):
                if (all(self.registered(name) for name in DATANODES) and len(self.heartbeating()) >= len(DATANODES)
                        and not self.jmx("NameNodeInfo").get("Safemode")):
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test HDFS did not have its DataNodes live within {timeout:g}s; "
                                   "see .yarn/logs/")
            time.sleep(0.5)

    def datanode(self, action: str, name: str) -> None:
        """``yarn/yarn.sh datanode stop|start NAME``."""
        subprocess.run([str(YARN_SH), "datanode", action, name], check=True, capture_output=True, timeout=60)

    def dfs(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``hdfs dfs ARGS`` (Hadoop's FsShell through ``yarn/yarn.sh dfs``)."""
        return subprocess.run([str(YARN_SH), "dfs", *args], capture_output=True, text=True, timeout=120)


class KilledDaemon:
    """An HDFS daemon SIGKILLed as a lost host's would be, and started again the same way
    yarn.sh started it (its argv, environment and directory), so the HDFS is whole again."""

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

    def restart(self) -> None:
        with open(STATE / "logs" / f"{self.name}.log", "ab") as out:
            proc = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        (RUN / "pids" / self.name).write_text(f"{proc.pid}\n")  # yarn.sh down stops it


def recsys_in_hdfs(hdfs: Hdfs, tmp_path: Path) -> tuple[Any, str, Path]:
    """The recommendation example's quick data (examples/recsys/generate.py --quick --seed 7)
    generated into ``tmp_path/data`` and put in a directory of the test HDFS of its own
    (``BASE/quick/``), each file on both DataNodes: ``(a WebHDFS client, BASE, the local
    data)``. The caller deletes BASE."""
    import sys
    import uuid

    from tfdist.node import webhdfs

    data = tmp_path / "data"
    subprocess.run([sys.executable, str(ROOT / "examples" / "recsys" / "generate.py"), "--out", str(data),
                    "--quick", "--seed", "7"], check=True, capture_output=True, timeout=300)
    client, _ = webhdfs.connect(f"{hdfs.url}/", environ={"HADOOP_CONF_DIR": str(hdfs.conf_dir)})
    base = f"/tfdist-test/{uuid.uuid4().hex[:12]}"
    for f in sorted(data.iterdir()):
        client.upload(f, f"{base}/quick/{f.name}")
        hdfs.wait_replicas(f"{base}/quick/{f.name}", 2)  # on both DataNodes before one may stop
    return client, base, data


def shares_read(log: str) -> list[set[str]]:
    """The files each start of a recsys worker's input pipeline said it reads (train.py's
    FileShards line), one set of file names per line."""
    import re

    return [set(re.findall(r"(train-\d{5}-of-\d{5}\.tfrecord)", line))
            for line in log.splitlines() if "tfdist: input pipeline" in line]


@pytest.fixture(scope="session")
def hdfs() -> Hdfs:
    why = why_hdfs_unavailable()
    if why:
        pytest.skip(why)
    return Hdfs()
