"""The pure parts of tfdist's YARN support: reading the client configuration, the settings
added to a Spark session, the staged jar archive. No cluster."""

from __future__ import annotations

import os
import time
import zipfile
from pathlib import Path

import pytest

from tests.backends.spark.spark_cluster import agent_handshake
from tfdist.backends.agent.channel import Channel
from tfdist.backends.yarn import conf, rest
from tfdist.backends.yarn import spark as on_yarn
from tfdist.errors import SpecError
from tfdist.node import agent as node_agent


def site(**props: str) -> str:
    body = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
    return f"<?xml version='1.0'?><configuration>{body}</configuration>"


def urls(**props: str) -> list[str]:
    return conf.rm_web_urls(conf.parse_site(site(**{k.replace("_", "."): v for k, v in props.items()}), "t"))


def test_rm_web_address_defaults_and_substitution() -> None:
    assert urls() == ["http://0.0.0.0:8088"]
    assert urls(yarn_resourcemanager_hostname="rm.example") == ["http://rm.example:8088"]
    assert conf.rm_web_urls({"yarn.resourcemanager.hostname": "h", "yarn.resourcemanager.webapp.address":
                             "${yarn.resourcemanager.hostname}:9999"}) == ["http://h:9999"]
    assert conf.rm_web_urls({"yarn.http.policy": "HTTPS_ONLY", "yarn.resourcemanager.hostname": "h"}) == \
        ["https://h:8090"]


def test_ha_lists_every_rm_in_order() -> None:
    c = {"yarn.resourcemanager.ha.enabled": "true", "yarn.resourcemanager.ha.rm-ids": "rm1, rm2",
         "yarn.resourcemanager.hostname.rm1": "a", "yarn.resourcemanager.webapp.address.rm2": "b:1234"}
    assert conf.rm_web_urls(c) == ["http://a:8088", "http://b:1234"]


def test_a_self_referencing_value_ends() -> None:
    c = {"yarn.resourcemanager.webapp.address": "${x}", "x": "${x}y"}
    assert conf.resolve(c, "yarn.resourcemanager.webapp.address").startswith("${x}")


@pytest.mark.parametrize(("text", "says"), [
    ("<configuration>", "not valid XML"),
    ('<!DOCTYPE c [<!ENTITY a "aaaa">]><configuration>&a;</configuration>', "declares XML entities"),
    ("<c>" + "x" * (conf.MAX_SITE_BYTES + 1) + "</c>", "larger than"),
])
def test_bad_site_files_are_refused_naming_the_file(text: str, says: str) -> None:
    with pytest.raises(SpecError, match=says):
        conf.parse_site(text, "yarn-site.xml")


def test_no_conf_dir_or_no_site_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="HADOOP_CONF_DIR is not set"):
        rest.ResourceManager.from_environ({})
    with pytest.raises(SpecError, match="cannot read"):
        rest.ResourceManager.from_environ({"YARN_CONF_DIR": str(tmp_path)})
    (tmp_path / "yarn-site.xml").write_text(site(**{"yarn.resourcemanager.webapp.address": "r:1"}))
    assert rest.ResourceManager.from_environ({"HADOOP_CONF_DIR": str(tmp_path)}).urls == ["http://r:1"]


def test_session_conf_tags_and_the_staged_archive_unless_the_job_names_jars(tmp_path: Path) -> None:
    archive = tmp_path / "spark-libs.zip"
    got = on_yarn.session_conf({}, "digits", "digits-abc", archive)
    assert got == {"spark.yarn.tags": "tfdist,tfdist-job-digits,tfdist-run-digits-abc",
                   "spark.yarn.archive": f"file://{archive}"}
    for key in on_yarn.JAR_SETTINGS:
        assert "spark.yarn.archive" not in on_yarn.session_conf({key: "hdfs:///x"}, "d", "t", archive)
    assert all(len(t) <= 100 for t in on_yarn.tags("a" * 200, "b" * 200))


def test_session_conf_asks_for_the_executors_the_stage_needs() -> None:
    """Spark on YARN starts 2 executors unless told: a stage of 3 tasks never got its slots."""
    def instances(user: dict[str, str], tasks: int, cpus: int = 1) -> str | None:
        return on_yarn.session_conf(user, "d", "t", None, tasks=tasks, task_cpus=cpus).get(
            "spark.executor.instances")

    assert instances({}, 3) == "3"
    assert instances({"spark.executor.cores": "2"}, 3) == "2"  # two tasks per executor
    assert instances({"spark.executor.cores": "4"}, 3, cpus=2) == "2"
    assert instances({"spark.executor.instances": "5"}, 3) is None  # the job's own wins
    assert instances({"spark.dynamicAllocation.enabled": "true"}, 3) is None


def test_jars_are_staged_once_and_again_when_they_change(tmp_path: Path) -> None:
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "a.jar").write_bytes(b"A" * 100)
    (home / "jars" / "b.jar").write_bytes(b"B")
    first = on_yarn.staged_archive(home, tmp_path / "cache")
    assert zipfile.ZipFile(first).namelist() == ["a.jar", "b.jar"]
    assert all(i.compress_type == zipfile.ZIP_STORED for i in zipfile.ZipFile(first).infolist())
    mtime = first.stat().st_mtime_ns
    assert on_yarn.staged_archive(home, tmp_path / "cache") == first and first.stat().st_mtime_ns == mtime
    (home / "jars" / "c.jar").write_bytes(b"C")
    assert on_yarn.staged_archive(home, tmp_path / "cache") != first
    assert not list((tmp_path / "cache").glob("*/.spark-libs-*"))  # no temporary left
    (home / "jars").rename(home / "gone")
    with pytest.raises(SpecError, match="no jars"):
        on_yarn.staged_archive(home, tmp_path / "cache")


def test_ids_are_checked_before_they_reach_a_url() -> None:
    rm = rest.ResourceManager(["http://127.0.0.1:1"], timeout=0.1)
    for bad in ["../../x", "application_1_2/../../", "application_1_2?x=1"]:
        with pytest.raises(rest.RMError, match="not an application id"):
            rm.kill(bad)
    assert rest.node_log("127.0.0.1:1", "../etc", "stdout") is None
    assert rest.node_log("127.0.0.1:1", "container_1_2_01_000001", "../x") is None


def test_an_rm_that_does_not_answer_is_one_error() -> None:
    with pytest.raises(rest.RMError, match="no ResourceManager answers"):
        rest.ResourceManager(["http://127.0.0.1:9"], timeout=1).info()


def _rm_stand_in(status: int, seen: list[str]):  # type: ignore[no-untyped-def]
    """An RM web service that answers every request with ``status`` (200: an empty app list)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(f"{self.server.server_address[1]} {self.command}")
            body = json.dumps({"apps": None, "state": "KILLED"} if status == 200 else
                              {"RemoteException": {"message": "no such application"}}).encode()
            self.send_response(status)
            if status == 307:
                self.send_header("Location", "http://127.0.0.1:9/elsewhere")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PUT = _answer  # noqa: N815 - http.server's names

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize("standby", [307, 503])
def test_a_standby_rm_passes_the_call_to_the_next_which_is_kept_first(standby: int) -> None:
    """The one RM client (tfdist's and the reaper's): a standby RM (a redirect to the active
    one, which urllib does not follow for a PUT, or 503) counts as no answer, the next RM is
    asked, and the one that answered is asked first next time."""
    seen: list[str] = []
    (first, a), (second, b) = _rm_stand_in(standby, seen), _rm_stand_in(200, seen)
    try:
        rm = rest.ResourceManager([a, b], timeout=5, user="alice")
        assert rm.kill("application_1_0001", "why") == "KILLED"
        assert rm.urls == [b, a]
        assert rm.apps("tfdist-run-x") == []
        ports = [int(u.rsplit(":", 1)[1]) for u in (a, b)]
        assert seen == [f"{ports[0]} PUT", f"{ports[1]} PUT", f"{ports[1]} GET"]
    finally:
        for server in (first, second):
            server.shutdown()
            server.server_close()


def test_an_rm_that_refuses_is_one_error_at_once() -> None:
    seen: list[str] = []
    (first, a), (second, b) = _rm_stand_in(404, seen), _rm_stand_in(200, seen)
    try:
        with pytest.raises(rest.RMError, match="HTTP 404: no such application"):
            rest.ResourceManager([a, b], timeout=5).kill("application_1_0001")
        assert len(seen) == 1  # the active RM said no: the next is not asked
    finally:
        for server in (first, second):
            server.shutdown()
            server.server_close()




def _until(cond, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(cond())


def test_a_replacement_elsewhere_or_after_the_driver_ended_the_old_agent_gets_any_port() -> None:
    """YARN's channel: a task's new agent on the same host as its last (a container relaunched
    in place) must hold the old port; one on another host (a replacement container on
    another node), or taking over from an agent the driver ended (its node lost: it may still
    hold the port), gets any free one."""
    channel = Channel("127.0.0.1", "s", ["worker-0"], lambda n, m: None, any_port_elsewhere=True)
    try:
        first, reply = agent_handshake(channel.address, "s", host="10.0.0.1", held=4008)
        assert reply is not None and reply["port"] == 0
        assert _until(lambda: (lk := channel.link("worker-0")) is not None and lk.info.get("port") == 4008)
        first.close()
        assert _until(lambda: not channel.link("worker-0").alive)  # type: ignore[union-attr]
        again, reply = agent_handshake(channel.address, "s", host="10.0.0.1", held=4008)  # relaunched in place
        assert reply is not None and reply["port"] == 4008
        assert _until(lambda: channel.link("worker-0").alive)  # type: ignore[union-attr]
        channel.link("worker-0").close()  # type: ignore[union-attr]  # the driver ends it (node lost)
        same, reply = agent_handshake(channel.address, "s", host="10.0.0.1", held=4008)
        assert reply is not None and reply["port"] == 0
        assert _until(lambda: channel.link("worker-0").alive)  # type: ignore[union-attr]
        same.close()
        assert _until(lambda: not channel.link("worker-0").alive)  # type: ignore[union-attr]
        moved, reply = agent_handshake(channel.address, "s", host="10.0.0.22", held=4009)  # another node's host
        assert reply is not None and reply["port"] == 0
        for s in (again, moved):
            s.close()
    finally:
        channel.close()


def _one_worker(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A yarn backend of one worker, placed at 10.0.0.1:4008, its channel listening on
    loopback: (backend, channel, the worker's task)."""
    from tfdist.backends.yarn.driver import YarnBackend
    from tfdist.cluster import cluster_map, make_task, task_ids
    from tfdist.jobspec import load

    job = load.from_dict({"name": "y", "command": "python t.py", "workdir": str(tmp_path),
                          "roles": {"worker": 1}}, "job")
    backend = YarnBackend(job)
    channel = Channel("127.0.0.1", "s", ["worker-0"], backend._on_message, any_port_elsewhere=True)
    backend._channel = channel
    backend._placement.take({"worker-0": "10.0.0.1:4008"})
    backend._ran_at = backend._placement.addresses
    task = make_task(job, task_ids(job)[0], cluster_map(job, backend._ran_at), backend._ran_at,
                     run_dir=str(tmp_path))
    return backend, channel, task


def test_a_start_superseded_while_it_waited_for_its_container_is_dropped(tmp_path: Path) -> None:
    """Two restarts asked for while a task waits for its new container (the policy restarted
    the group again meanwhile): only the latest attempt is started on the new agent. Before,
    both were sent and the second was refused by the agent ('the previous attempt is still
    running', exit 127), spending a restart."""
    backend, channel, task = _one_worker(tmp_path)
    try:
        backend.start(task, 1)  # no agent: both wait for one
        backend.start(task, 2)
        sock, reply = agent_handshake(channel.address, "s", host="10.0.0.1", held=4008)
        assert reply is not None
        reader = node_agent.LineReader(sock)
        starts = []
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            msg = reader.read(0.5)
            if msg and msg.get("op") == "start":
                starts.append(msg["attempt"])
        assert starts == [2]
        sock.close()
    finally:
        backend._closing = True
        channel.close()


def _ops_until_start(sock, seconds: float = 5) -> list[str]:
    """The ops an agent receives until its start (or ``seconds`` pass)."""
    reader = node_agent.LineReader(sock)
    ops: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and "start" not in ops:
        msg = reader.read(0.5)
        if msg:
            ops.append(msg["op"])
    return ops


def test_every_new_agent_gets_the_workdir_before_its_start(tmp_path: Path) -> None:
    """Each agent that takes the task (a relaunched or replacement container: a new
    connection each time) is sent the workdir before the task starts there, whether it
    connected before the restart that starts it or after. Before, an agent that connected
    first was started as the old one had been: no workdir to change into (exit code 127, a
    spent restart), and at the old address if it had a new one."""
    import gc

    backend, channel, task = _one_worker(tmp_path)
    backend._archive = tmp_path / "workdir.tar.gz"
    backend._archive.write_bytes(b"packed")
    try:
        for attempt, agent_first in enumerate([True, False, True, True, False], start=1):
            if agent_first:  # the new container's agent is there before the restart
                sock, reply = agent_handshake(channel.address, "s", host="10.0.0.1", held=4008)
                assert _until(lambda: (lk := channel.link("worker-0")) is not None and lk.alive)
                backend.start(task, attempt)
            else:  # the restart waits for it
                backend.start(task, attempt)
                sock, reply = agent_handshake(channel.address, "s", host="10.0.0.1", held=4008)
            assert reply is not None
            assert _ops_until_start(sock) == ["put", "start"], attempt
            sock.close()
            assert _until(lambda: not channel.link("worker-0").alive)  # type: ignore[union-attr]
            gc.collect()  # the old connection's objects freed (their ids free for new ones)
    finally:
        backend._closing = True
        channel.close()


def test_a_lost_node_is_named_with_every_task_that_ran_there(tmp_path: Path) -> None:
    """Two workers ran on node h2, which the RM gave up on; worker-0's replacement agent (on
    h1) connected before tfdist looked (its AM was on the node left and asked at once). The
    one line names h2, its host and both tasks, and the new agent on h1 is left alone. Before,
    the tasks were those whose current agent was on the node: worker-0 went unnamed."""
    import types

    from tfdist.backends.yarn.driver import YarnBackend
    from tfdist.jobspec import load

    job = load.from_dict({"name": "y", "command": "python t.py", "roles": {"worker": 2}}, "job")
    backend = YarnBackend(job)
    nodes = [{"id": "h1:8041", "state": "RUNNING"}, {"id": "h2:8041", "state": "LOST"}]
    backend._rm = types.SimpleNamespace(nodes=lambda: nodes)  # type: ignore[assignment]
    channel = Channel("127.0.0.1", "s", ["worker-0", "worker-1"], backend._on_message, any_port_elsewhere=True)
    backend._channel = channel
    on_h2 = {"node": "h2:8041", "hostname": "h2", "host": "10.0.0.2", "port": 4008}
    backend._ran_on = {"worker-0": dict(on_h2), "worker-1": dict(on_h2, port=4009)}
    try:
        sock, reply = agent_handshake(channel.address, "s", host="10.0.0.1", held=4010,
                                      report={"node": "h1:8041", "hostname": "h1"})
        assert reply is not None and _until(lambda: (lk := channel.link("worker-0")) is not None and lk.alive)
        lost = backend._on_lost_nodes()
        assert sorted(lost) == ["worker-0", "worker-1"]
        backend._nodes_lost(lost)
        lines = [e.line for e in list(backend.events.queue) if hasattr(e, "line")]
        assert len(lines) == 1 and "node h2:8041 on host h2 (10.0.0.2) is lost" in lines[0], lines
        assert "this job's tasks on it: worker-0, worker-1;" in lines[0], lines
        assert channel.link("worker-0").alive  # type: ignore[union-attr]
        sock.close()
    finally:
        backend._closing = True
        channel.close()


def _container(cid: str, mb: int, vcores: int, node: str = "nm1:8041") -> dict:
    return {"containerId": cid, "allocatedMB": str(mb), "allocatedVCores": str(vcores), "nodeId": node,
            "nodeHttpAddress": "http://nm1:8042"}


def test_the_spark_gang_on_yarn_is_its_executors_and_am_as_allocated() -> None:
    listed = [_container("container_1_0001_01_000001", 896, 1), _container("container_1_0001_01_000002", 1408, 1),
              _container("container_1_0001_01_000003", 1408, 1), _container("container_1_0001_01_000004", 1408, 1),
              {"containerId": "container_1_0001_01_000001", "nodeHttpAddress": "nm1:8042", "amContainer": True}]
    # the tasks run in two of the three executors: the gang is those two and the AM
    executors, ams = on_yarn.gang_of(listed, {"container_1_0001_01_000002", "container_1_0001_01_000003"})
    assert [a.describe() for a in executors] == ["2 x (1408 MB, 1 vcores) for executor"]
    assert [a.describe() for a in ams] == ["1 x (896 MB, 1 vcores) for Spark's ApplicationMaster"]
    # an executor the RM did not list (or no AM listed): unknown, so no fit check at all
    assert on_yarn.gang_of(listed, {"container_1_0001_01_000009"}) == ([], [])
    assert on_yarn.gang_of(listed[:4], {"container_1_0001_01_000002"}) == ([], [])


def test_the_spark_gang_no_longer_fits_the_nodemanager_left() -> None:
    """The decision --backend yarn takes (yarn.plan.no_longer_fits), with Spark's executors and
    its one AM instead of the distributed shell's AM per role."""
    four = [_container(f"container_1_0001_01_00000{i}", 1408, 1) for i in range(2, 6)]
    listed = [_container("container_1_0001_01_000001", 896, 1), *four,
              {"containerId": "container_1_0001_01_000001", "nodeHttpAddress": "nm1:8042", "amContainer": True}]
    node = {"id": "nm1:8041", "nodeHostName": "nm1", "state": "RUNNING", "totalResource": {"memory": 6144, "vCores": 4}}
    lost = dict(node, id="nm2:8041", nodeHostName="nm2", state="LOST")
    from tfdist.backends.yarn import plan

    two, ams = on_yarn.gang_of(listed, {c["containerId"] for c in four[:2]})
    assert plan.no_longer_fits(two, [node, lost], ams=ams, tasks=2) is None  # 3712 MB, 3 vcores: fits
    all4, ams = on_yarn.gang_of(listed, {c["containerId"] for c in four})
    assert plan.no_longer_fits(all4, [node, lost], ams=ams, tasks=4) == (
        "the job no longer fits the YARN cluster: its 4 tasks need 5 vcores and 6528 MB at once "
        "(4 x (1408 MB, 1 vcores) for executor, and 1 x (896 MB, 1 vcores) for Spark's ApplicationMaster); "
        "the NodeManagers left (nm1) have 4 vcores and 6144 MB")
    assert plan.no_longer_fits(all4, [node, dict(lost, state="RUNNING")], ams=ams, tasks=4) is None
    line = plan.node_lost("nm2:8041", "host nm2 (10.0.0.2)", "its node nm2:8041 is LOST at the ResourceManager",
                          ["worker-1", "chief-0"], "they restart there")
    assert line == ("node nm2:8041 on host nm2 (10.0.0.2) is lost (its node nm2:8041 is LOST at the "
                    "ResourceManager); this job's tasks on it: chief-0, worker-1; they restart there")


def test_a_spark_agent_on_yarn_reports_its_container_and_node() -> None:
    env = {"CONTAINER_ID": "container_1_0001_01_000002", "NM_HOST": "nm1", "NM_PORT": "8041", "NM_HTTP_PORT": "8042"}
    assert node_agent.yarn_container(env) == {"container": "container_1_0001_01_000002",
                                               "node_http": "nm1:8042", "node": "nm1:8041"}
    assert node_agent.yarn_container({}) == {}


def test_a_spark_agent_names_its_executor_as_the_driver_knows_it() -> None:
    """killAndReplaceExecutor takes Spark's executor id: on YARN (log URLs name only the
    container) it is the --executor-id of the executor's JVM, an ancestor of the agent."""
    jvm = ["/usr/bin/java", "-cp", "x", "org.apache.spark.executor.YarnCoarseGrainedExecutorBackend",
           "--driver-url", "spark://CoarseGrainedScheduler@127.0.0.1:1", "--executor-id", "2", "--hostname", "h"]
    on_yarn = {"CONTAINER_ID": "container_1_0001_01_000003", "SPARK_LOG_URL_STDERR": "http://nm/containerlogs/c/u/stderr"}
    assert node_agent.executor_id(on_yarn, [["python", "-m", "pyspark.daemon"], jvm]) == "2"
    assert node_agent.executor_id(on_yarn, [["python"], ["bash", "--executor-id"]]) == on_yarn["CONTAINER_ID"]
    standalone = {"SPARK_LOG_URL_STDERR": "http://w:8081/logPage/?appId=app-1&executorId=7&logType=stderr"}
    assert node_agent.executor_id(standalone, [jvm]) == "7"
    assert node_agent.executor_id({}, []) == "driver"
    here = node_agent.ancestors_argv()
    assert here and here[0] == Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode().split("\0")


def test_end_kills_what_outlives_the_grace_and_says_when_the_rm_did_not_answer() -> None:
    """The end of a --backend yarn run: applications that end by themselves are left be,
    the rest killed after the grace; an RM that fails a call makes the end unsure (then the
    reaper is left to finish it)."""
    class Rm(rest.ResourceManager):
        def __init__(self, states: dict[str, str], fail: set[str]) -> None:
            super().__init__(["http://127.0.0.1:9"])
            self.states, self.fail, self.killed = states, fail, []

        def app(self, app_id: str) -> dict[str, str]:
            if "app" in self.fail:
                raise rest.RMError("no answer")
            return {"state": self.states[app_id]}

        def kill(self, app_id: str) -> str:
            if "kill" in self.fail:
                raise rest.RMError("no answer")
            self.killed.append(app_id)
            return "KILLED"

    done, queued = "application_1_0001", "application_1_0002"
    rm = Rm({done: "FINISHED", queued: "ACCEPTED"}, set())
    assert rm.end([done, queued], grace=0.6) and rm.killed == [queued]
    assert not Rm({done: "FINISHED"}, {"app"}).end([done], grace=0.6)
    assert not Rm({queued: "ACCEPTED"}, {"kill"}).end([queued], grace=0.6)
    assert Rm({}, {"app", "kill"}).end([], grace=0.6)  # nothing submitted: nothing to be unsure of


#: What a NodeManager of Hadoop 3.4.2 reported for a container its physical-memory check
#: killed (a task of 512Mi filling 50 MB a step; the test cluster with TFDIST_YARN_PMEM_CHECK).
PMEM_KILLED = {
    "id": "container_1796421311067_0001_01_000002", "state": "DONE", "exitCode": -104,
    "diagnostics": "Container [pid=923,containerID=container_1796421311067_0001_01_000002] is running "
                   "52379648B beyond the 'PHYSICAL' memory limit. Current usage: 562.0 MB of 512 MB physical "
                   "memory used; 799.9 MB of 1.0 GB virtual memory used. Killing container.\n"
                   "Dump of the process-tree for container_1796421311067_0001_01_000002 :\n",
}


def test_a_container_killed_for_memory_reads_as_a_local_memory_kill() -> None:
    from tfdist.backends.yarn import plan
    from tfdist.states import describe_memory_kill

    why = plan.memory_kill(PMEM_KILLED, 512)
    assert why == (f"{describe_memory_kill(512 * 2**20)} (YARN's NodeManager killed its container for physical "
                   "memory, 562.0 MB of 512 MB used, exit status -104)")
    assert why.startswith("killed for memory: over its 512 MiB limit (resources.memory)") and "parameter servers" in why
    vmem = {"exitCode": -103, "diagnostics": "Container [pid=1,containerID=c] is running 1B beyond the 'VIRTUAL' "
                                             "memory limit. Current usage: 100 MB of 1 GB physical memory used; "
                                             "2.2 GB of 2.1 GB virtual memory used. Killing container."}
    assert (plan.memory_kill(vmem, 1024) or "").endswith("for virtual memory, 2.2 GB of 2.1 GB used, exit status -103)")
    assert "for physical memory, exit status -104" in (plan.memory_kill({"exitCode": -104}, 1024) or "")
    for other in (None, {}, {"exitCode": -1000}, {"exitCode": 143, "diagnostics": "Killed by external signal"},
                  {"exitCode": -105, "diagnostics": "Container killed by the ApplicationMaster."},
                  {"exitCode": -100, "diagnostics": "Container released on a *lost* node"}, {"exitCode": "x"}):
        assert plan.memory_kill(other, 1024) is None, other
    assert plan.exit_status({"exitCode": "x"}) == plan.exit_status(None) == plan.NOT_ENDED


def test_a_nodemanager_is_asked_how_a_container_ended() -> None:
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    asked: list[str] = []

    class NodeManager(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            asked.append(self.path)
            body = json.dumps({"container": PMEM_KILLED}).encode()
            self.send_response(200 if self.path.endswith(PMEM_KILLED["id"]) else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NodeManager)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        node = f"127.0.0.1:{server.server_address[1]}"
        assert rest.node_container(node, str(PMEM_KILLED["id"])) == PMEM_KILLED
        assert asked == [f"/ws/v1/node/containers/{PMEM_KILLED['id']}"]
        assert rest.node_container(node, "container_1_0001_01_000009") is None  # 404
        assert rest.node_container(node, "../../etc") is None and len(asked) == 2  # not a container id: not asked
    finally:
        server.shutdown()
        server.server_close()
    assert rest.node_container(node, str(PMEM_KILLED["id"])) is None  # nobody answers
