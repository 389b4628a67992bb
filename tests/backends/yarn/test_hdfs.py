"""tfdist.node.webhdfs against the real HDFS beside the YARN test cluster (yarn/yarn.sh: a
NameNode and two DataNodes of Hadoop 3.4.2, replication 2): files written and read back
whole, globs and listings as ``hdfs dfs`` sees them, a lost DataNode that loses nothing, a
NameNode that is down reported at once."""

from __future__ import annotations

import fnmatch
import hashlib
import http.client
import os
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.yarn.hdfs_cluster import Hdfs, KilledDaemon
from tests.backends.yarn.yarn_cluster import Cluster
from tests.conftest import tfdist
from tfdist.node import webhdfs
from tfdist.node.webhdfs import Entry, WebHdfs, WebHdfsError

pytestmark = [pytest.mark.yarn]


@pytest.fixture
def client(hdfs: Hdfs) -> WebHdfs:
    client, _ = webhdfs.connect(f"{hdfs.url}/", environ={"HADOOP_CONF_DIR": str(hdfs.conf_dir)})
    return client


@pytest.fixture
def base(client: WebHdfs) -> Iterator[str]:
    """A directory of this test's own in the test HDFS, removed after it."""
    path = f"/tfdist-test/{uuid.uuid4().hex[:12]}"
    client.mkdirs(path)
    yield path
    client.delete(path, recursive=True)


def test_the_client_configuration_names_the_hdfs_and_yarn_keeps_file(hdfs: Hdfs) -> None:
    env = {"HADOOP_CONF_DIR": str(hdfs.conf_dir)}
    assert webhdfs.http_address(hdfs.namenode, env) == hdfs.http
    assert webhdfs.http_address("", env) == hdfs.http  # hdfs:/// means the configuration's NameNode
    core = (hdfs.conf_dir / "core-site.xml").read_text()
    assert "<name>fs.defaultFS</name><value>file:///</value>" in core
    assert "<name>dfs.replication</name><value>2</value>" in (hdfs.conf_dir / "hdfs-site.xml").read_text()


def test_a_few_megabytes_make_the_round_trip_on_two_datanodes(hdfs: Hdfs, client: WebHdfs, base: str,
                                                              tmp_path: Path) -> None:
    data = os.urandom(6 * 1024 * 1024 + 123)
    local = tmp_path / "up.bin"
    local.write_bytes(data)
    assert client.upload(local, f"{base}/in/up.bin") == len(data)
    assert client.status(f"{base}/in/up.bin") == Entry(f"{base}/in/up.bin", len(data), False)
    hdfs.wait_replicas(f"{base}/in/up.bin", 2)  # one block, on both DataNodes
    assert len(hdfs.block_hosts(f"{base}/in/up.bin")) == 1
    assert client.download(f"{base}/in/up.bin", tmp_path / "down.bin") == len(data)
    assert hashlib.sha256((tmp_path / "down.bin").read_bytes()).digest() == hashlib.sha256(data).digest()
    # what the client wrote is an HDFS file like any other: Hadoop's own client reads it whole
    got = hdfs.dfs("-get", f"{hdfs.url}{base}/in/up.bin", str(tmp_path / "by-fsshell.bin"))
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "by-fsshell.bin").read_bytes() == data
    assert client.listdir(f"{base}/in") == [Entry(f"{base}/in/up.bin", len(data), False)]  # no _COPYING_ left
    assert client.delete(f"{base}/in", recursive=True) is True
    assert client.status(f"{base}/in/up.bin") is None


def test_glob_and_listing_match_hdfs_dfs(hdfs: Hdfs, client: WebHdfs, base: str) -> None:
    sizes = {"clicks/part-0": 10, "clicks/part-1": 11, "clicks/part-12": 12, "clicks/_SUCCESS": 0,
             "views/part-0": 20, "views/part-1.csv": 21}
    for name, size in sizes.items():
        client.write(f"{base}/{name}", b"x" * size)
    client.mkdirs(f"{base}/clicks/part-dir")
    assert client.listdir(f"{base}/clicks") == [
        Entry(f"{base}/clicks/_SUCCESS", 0, False), Entry(f"{base}/clicks/part-0", 10, False),
        Entry(f"{base}/clicks/part-1", 11, False), Entry(f"{base}/clicks/part-12", 12, False),
        Entry(f"{base}/clicks/part-dir", 0, True)]
    patterns = ("clicks/part-?", "*/part-0", "*/part-1*", "clicks/part-[01]*", "views/*.csv")
    matched = []
    for pattern in patterns:
        got = client.glob(f"{base}/{pattern}")
        assert got == sorted((f"{base}/{n}", s) for n, s in sizes.items() if fnmatch.fnmatchcase(n, pattern))
        matched.extend(p for p, _ in got)
    # Hadoop's own globbing of the same patterns (one FsShell: it lists each pattern's
    # matches, sorted, in the order given)
    shell = hdfs.dfs("-ls", "-C", *(f"{hdfs.url}{base}/{pattern}" for pattern in patterns))
    assert shell.returncode == 0, shell.stderr
    assert matched == [urllib.parse.urlsplit(line).path for line in shell.stdout.split()]
    assert client.glob(f"{base}/nothing-*") == []


def _first_redirect(hdfs: Hdfs, path: str) -> int:
    """The HTTP port of the DataNode the NameNode sends a read of ``path`` to now."""
    conn = http.client.HTTPConnection(*hdfs.http.split(":"), timeout=10)
    try:
        conn.request("GET", f"/webhdfs/v1{path}?op=OPEN&user.name=root")
        reply = conn.getresponse()
        assert reply.status == 307, reply.read()
        return int(urllib.parse.urlsplit(reply.getheader("Location") or "").port or 0)
    finally:
        conn.close()


@pytest.mark.restarts_cluster
def test_a_lost_datanode_loses_nothing_with_replication_2(hdfs: Hdfs, client: WebHdfs, base: str,
                                                         tmp_path: Path) -> None:
    files = {f"{base}/part-{i}": os.urandom(2 * 1024 * 1024 + i) for i in range(3)}
    for path, data in files.items():
        client.write(path, data)
        hdfs.wait_replicas(path, 2)
    # the DataNode the NameNode would send the first read to, SIGKILLed: the NameNode goes
    # on naming it until it notices (3 s stale, 20 s dead here), so the reads meet a dead node
    victim = hdfs.datanode_of_http_port(_first_redirect(hdfs, f"{base}/part-0"))
    killed = KilledDaemon(victim)
    try:
        for path, data in files.items():
            local = tmp_path / path.rpartition("/")[2]
            assert client.download(path, local) == len(data)
            assert local.read_bytes() == data
        assert [e.path for e in client.listdir(base)] == sorted(files)
    finally:
        killed.restart()
        hdfs.wait_ready()


@pytest.mark.restarts_cluster
def test_a_datanode_stopped_by_yarn_sh_and_started_again_rejoins(hdfs: Hdfs, client: WebHdfs, base: str) -> None:
    client.write(f"{base}/f", b"kept")
    hdfs.wait_replicas(f"{base}/f", 2)
    hdfs.datanode("stop", "dn-1")
    try:
        assert client.read(f"{base}/f") == b"kept"
    finally:
        hdfs.datanode("start", "dn-1")
        hdfs.wait_ready()
    assert len(hdfs.heartbeating()) == 2


@pytest.mark.restarts_cluster
def test_a_namenode_that_is_down_is_one_error_at_once(hdfs: Hdfs, yarn_env: Cluster, tmp_path: Path) -> None:
    """The client says it at once; and a job on --backend yarn whose data or outputs are in
    that HDFS is refused in one line (exit 2) before anything is submitted or written."""
    uri = f"{hdfs.url}/data/part-*"
    client, path = webhdfs.connect(uri, environ={"HADOOP_CONF_DIR": str(hdfs.conf_dir)})
    killed = KilledDaemon("namenode")
    try:
        # refused, or reset by a dying JVM's listener in the moment after the kill
        expected = (rf"{hdfs.url}/data: cannot reach the NameNode's WebHDFS at {hdfs.http} "
                    r"\(Connection(Refused|Reset)Error")
        with pytest.raises(WebHdfsError, match=expected) as err:
            client.glob(path)
        assert err.value.exception is None
        with pytest.raises(WebHdfsError, match="cannot reach the NameNode's WebHDFS"):
            client.download("/data/x", tmp_path / "x")
        assert list(tmp_path.iterdir()) == []
        head = "name: hdfs-down\nroles: {worker: 2}\ncommand: [python, -c, pass]\nyarn: {queue: tfdist}\n"
        jobs = {f"data: {{train: {{uris: ['{uri}']}}}}\n": "data.train.uris.0: cannot list",
                f"outputs: {{model_dir: '{hdfs.url}/models/x'}}\n": "outputs.model_dir: cannot reach"}
        for i, (section, says) in enumerate(jobs.items()):
            job = tmp_path / f"job-{i}.yaml"
            job.write_text(head + section)
            proc = tfdist("run", str(job), "--backend", "yarn", "--runs-dir", str(tmp_path / "runs"),
                          cwd=tmp_path, timeout=120)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1, (section, proc.stderr)
            assert lines[0].startswith(f"tfdist: error: {says} ") and "NameNode" in lines[0], lines[0]
        assert not yarn_env.apps("tfdist-job-hdfs-down")  # nothing submitted
        assert not (tmp_path / "runs").exists()  # nothing written
    finally:
        killed.restart()
        hdfs.wait_ready()
