"""The Spark backend's pure parts (masters, slots, the packed workdir) and its channel's
authentication, with real sockets but no Spark: the driver's server and the agent's side."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.backends.spark.spark_cluster import agent_handshake
from tfdist.backends.agent import workdir
from tfdist.backends.agent.channel import Channel
from tfdist.backends.spark import plan as spark_plan
from tfdist.errors import SpecError
from tfdist.node import agent as node_agent


def test_import_tfdist_never_imports_pyspark() -> None:
    code = "import sys, tfdist, tfdist.api, tfdist.cli, tfdist.backends; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("master", "kind", "slots"),
    [
        ("local", "local", 1),
        ("local[3]", "local", 3),
        ("local[4, 2]", "local", 4),
        ("local-cluster[2, 3, 1024]", "local-cluster", 6),
        ("spark://127.0.0.1:7077", "standalone", None),
        ("spark://a:7077,b:7077", "standalone", None),
        ("k8s://https://10.0.0.1:6443", "k8s", None),
        ("yarn", "yarn", None),
    ],
)
def test_masters_and_their_known_slots(master: str, kind: str, slots: int | None) -> None:
    assert spark_plan.master_kind(master) == kind
    assert spark_plan.known_slots(master, 1) == slots


@pytest.mark.parametrize("master", ["spark://nohost", "mesos://x:5050", "local[x]", "localhost"])
def test_a_bad_master_is_named(master: str) -> None:
    with pytest.raises(SpecError, match="is not a Spark master URL"):
        spark_plan.master_kind(master)


def test_slots_follow_task_cpus_and_alive_workers() -> None:
    status = {"workers": [{"host": "a", "cores": 4, "coresfree": 1, "state": "ALIVE"},
                          {"host": "b", "cores": 3, "coresfree": 3, "state": "ALIVE"},
                          {"host": "c", "cores": 8, "coresfree": 8, "state": "DEAD"}]}
    assert spark_plan.standalone_slots(status, 1)[:2] == (7, 4)
    assert spark_plan.standalone_slots(status, 2)[:2] == (3, 1)
    assert spark_plan.task_cpus([None, 1.5, 1]) == 2
    assert spark_plan.known_slots("local-cluster[2,3,512]", 2) == 2


def test_packed_workdir_keeps_modes_and_leaves_out_runs_and_venvs(tmp_path: Path) -> None:
    work = tmp_path / "proj"
    (work / ".venv").mkdir(parents=True)
    (work / ".venv" / "big").write_text("x")
    (work / "runs" / "old").mkdir(parents=True)
    (work / "runs" / "old" / "log").write_text("x")
    (work / "pkg").mkdir()
    (work / "pkg" / "mod.py").write_text("x = 1\n")
    (work / "run.sh").write_text("#!/bin/sh\n")
    (work / "run.sh").chmod(0o755)
    dest = tmp_path / "w.tar.gz"
    assert workdir.pack_workdir(work, dest, [work / "runs"]) == 2
    with tarfile.open(dest) as tar:
        names = {m.name: m.mode for m in tar.getmembers()}
    assert set(names) == {"pkg/mod.py", "run.sh"}
    assert names["run.sh"] & 0o111




def test_channel_admits_only_agents_that_know_the_secret() -> None:
    got: list[tuple[str, dict | None]] = []
    channel = Channel("127.0.0.1", "s3cret", ["worker-0", "worker-1"], lambda n, m: got.append((n, m)))
    try:
        assert channel.address[0] == "127.0.0.1"  # never the wildcard
        bad, reply = agent_handshake(channel.address, "guess")
        assert reply is None  # closed without a word
        assert bad.recv(10) == b""
        nobody, reply = agent_handshake(channel.address, "s3cret", partition=7)  # no such task
        assert reply is None
        good, reply = agent_handshake(channel.address, "s3cret", partition=1)
        assert reply is not None and reply["port"] == 0
        assert channel.wait(["worker-1"], 5, lambda: None) is None
        twin, reply = agent_handshake(channel.address, "s3cret", partition=1)  # one live agent per task
        assert reply is None
        link = channel.link("worker-1")
        assert link is not None and link.info["port"] == 4242 and "proof" not in link.info
        node_agent.send(good, threading.Lock(), {"ev": "lines", "attempt": 0, "lines": ["hi"], "time": 1.0})
        good.close()
        deadline = time.monotonic() + 5
        while ("worker-1", None) not in got and time.monotonic() < deadline:
            time.sleep(0.05)
        assert got == [("worker-1", {"ev": "lines", "attempt": 0, "lines": ["hi"], "time": 1.0}), ("worker-1", None)]
        # a replacement agent must hold the port the first one held (TF_CONFIG is fixed)
        again, reply = agent_handshake(channel.address, "s3cret", partition=1)
        assert reply is not None and reply["port"] == 4242
        for s in (bad, nobody, twin, again):
            s.close()
    finally:
        channel.close()


def test_a_silent_connection_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    from tfdist.backends.agent import channel as agent_channel

    monkeypatch.setattr(agent_channel, "HANDSHAKE_SECONDS", 0.5)
    channel = Channel("127.0.0.1", "s", ["worker-0"], lambda n, m: None)
    try:
        sock = socket.create_connection(channel.address, timeout=5)
        assert json.loads(sock.recv(1000))["nonce"]
        sock.settimeout(5)
        assert sock.recv(10) == b""  # closed after the handshake window
        sock.close()
    finally:
        channel.close()


def test_a_hello_larger_than_any_agent_sends_is_dropped_at_once() -> None:
    """Before its proof, a connection is anyone's: its hello may not grow to the 16 MiB an
    authenticated agent's message may (many such connections would fill the supervisor)."""
    channel = Channel("127.0.0.1", "s", ["worker-0"], lambda n, m: None)
    try:
        sock = socket.create_connection(channel.address, timeout=5)
        assert json.loads(sock.recv(1000))["nonce"]
        started = time.monotonic()
        with contextlib.suppress(OSError):  # the driver may close it while this still sends
            for _ in range(16):
                sock.sendall(b"x" * 65536)
        sock.settimeout(3)
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(10) == b""
        assert time.monotonic() - started < 3  # not after the 10 s handshake window
        sock.close()
    finally:
        channel.close()


def _wait_for(cond, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _read_until_closed(sock: socket.socket, timeout: float = 10.0) -> list[dict]:
    sock.settimeout(timeout)
    got = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            got += chunk
    return [json.loads(line) for line in got.decode().splitlines() if line]


def test_an_agent_of_an_ending_stage_gives_way_to_its_successor() -> None:
    """A host cut off from the network leaves its agents' connections open (nothing closes
    them), so when tfdist starts a new stage the old agent still looks alive. Its task's new
    agent must be admitted, not refused as a twin (it was: the new stage could never start
    that task), and the old connection closed."""
    channel = Channel("127.0.0.1", "s", ["worker-0"], lambda n, m: None)
    try:
        old, reply = agent_handshake(channel.address, "s")
        assert reply is not None and channel.wait(["worker-0"], 5, lambda: None) is None
        first = channel.link("worker-0")
        assert first is not None
        with channel.cond:
            first.closing = True  # what the driver does when the stage ends
        new, reply = agent_handshake(channel.address, "s")
        assert reply is not None, "the new stage's agent was refused"
        assert channel.wait(["worker-0"], 5, lambda: None) is None
        assert channel.link("worker-0") is not first
        _read_until_closed(old)  # the old agent's connection is closed by the driver
        new.close()
    finally:
        channel.close()


def test_a_silent_agent_is_taken_for_gone_and_hears_beats() -> None:
    """An agent that says nothing (its host cut off) is reported gone within ``silence``
    seconds, its link saying why, and its connection is closed; a live one hears the
    driver's beats meanwhile."""
    got: list[tuple[str, dict | None]] = []
    channel = Channel("127.0.0.1", "s", ["worker-0"], lambda n, m: got.append((n, m)), beat=0.1, silence=1.0)
    try:
        sock, reply = agent_handshake(channel.address, "s")
        assert reply is not None
        assert _wait_for(lambda: ("worker-0", None) in got), "a silent agent was never taken for gone"
        link = channel.link("worker-0")
        assert link is not None and not link.alive and link.ended == "silent for 1s"
        heard = _read_until_closed(sock)
        assert {"op": "beat"} in heard  # the driver beat until it gave up
        assert got == [("worker-0", None)]  # beats are not reported as messages
        sock.close()
    finally:
        channel.close()


def _admit_and_start(server: socket.socket, held: list[socket.socket]) -> node_agent.LineReader:
    """The driver's half of an agent's handshake (secret ``s``) on the next connection, then
    attempt 0 started; the reader of what the agent sends after."""
    sock, _ = server.accept()
    held.append(sock)
    reader, lock = node_agent.LineReader(sock), threading.Lock()
    node_agent.send(sock, lock, {"nonce": "d1"})
    hello = reader.read(5)
    assert hello is not None
    node_agent.send(sock, lock, {"proof": node_agent.proof("s", "driver", hello["nonce"]), "port": 0})
    assert reader.read(5) is not None  # the port it holds
    node_agent.send(sock, lock, {"op": "start", "attempt": 0, "env": {}})
    return reader


def test_an_agent_whose_driver_falls_silent_ends_its_task(tmp_path: Path) -> None:
    """The cut host's side: the agent hears nothing from the driver for ``silence``
    seconds, so it ends and its task with it (before, it waited for ever, and its task ran
    on after the link came back)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    started: list[dict] = []

    def silent_driver() -> None:  # the driver's half of the handshake, one start, then nothing
        reader = _admit_and_start(server, held)
        while (msg := reader.read(5)) is not None:
            if msg.get("ev") == "started":
                started.append(msg)

    threading.Thread(target=silent_driver, daemon=True).start()
    task = {"name": "worker-0", "command": [sys.executable, "-c", "import time; time.sleep(60)"]}
    try:
        t0 = time.monotonic()
        done = node_agent.run_agent(server.getsockname(), "s", "tok", [task], 0, str(tmp_path), {},
                                     beat=0.2, silence=1.5)
        assert done["ended"] == "the driver was silent for 1.5s"
        assert time.monotonic() - t0 < 30
        assert _wait_for(lambda: bool(started))
        pid = started[0]["pid"]
        assert _wait_for(lambda: not _alive(pid)), "the task outlived its agent"
    finally:
        server.close()
        for s in held:
            s.close()


def test_a_refused_agent_leaves_the_task_of_the_agent_that_holds_it(tmp_path: Path) -> None:
    """Two agents of one task on one machine: the old one's container was given up with its
    node (its process lives on) and a replacement container's agent claims the task; the
    driver refuses that claim. The refused agent's end must not kill the task the other one
    runs (it did, with one mark per task: YARN's lost-NodeManager test then failed its
    restarts at once with exit -9)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    started: list[dict] = []

    def driver() -> None:  # the first agent admitted and started; the second refused
        reader = _admit_and_start(server, held)
        while (msg := reader.read(5)) is not None and not started:
            if msg.get("ev") == "started":
                started.append(msg)
        second, _ = server.accept()
        node_agent.send(second, threading.Lock(), {"nonce": "d2"})
        node_agent.LineReader(second).read(5)  # its claim, never answered
        second.close()

    threading.Thread(target=driver, daemon=True).start()
    task = {"name": "worker-0", "command": [sys.executable, "-c", "import time; time.sleep(60)"]}
    first = threading.Thread(target=node_agent.run_agent, daemon=True,
                             args=(server.getsockname(), "s", "tok", [task], 0, str(tmp_path), {}))
    first.start()
    try:
        assert _wait_for(lambda: bool(started))
        pid = started[0]["pid"]
        with pytest.raises(node_agent.Refused):
            node_agent.run_agent(server.getsockname(), "s", "tok", [task], 0, str(tmp_path), {})
        time.sleep(0.5)
        assert _alive(pid), "the refused agent killed the task another agent runs"
    finally:
        for s in held:
            s.close()  # the first agent's driver is gone: it ends its task
        first.join(30)
        server.close()
    assert _wait_for(lambda: not _alive(pid)), "the task outlived its own agent"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_spark_section_and_options_round_trip() -> None:
    from tfdist.backends.base import BackendOptions
    from tfdist.jobspec import load

    job = load.from_dict({"name": "s", "command": "python t.py", "roles": {"worker": 2},
                          "spark": {"master": "yarn", "conf": {"spark.executor.instances": 3,
                                                               "spark.dynamicAllocation.enabled": False}}}, "job")
    assert job.spark.conf == {"spark.executor.instances": "3", "spark.dynamicAllocation.enabled": "false"}
    assert load.from_dict(job.to_dict(), "job") == job
    with pytest.raises(SpecError, match="unknown key 'masterr' in spark; did you mean 'master'"):
        load.from_dict({"name": "s", "command": "x", "spark": {"masterr": "yarn"}}, "job")
    argv = BackendOptions(spark_master="spark://h:7077").to_argv()
    assert argv[-1:] == ["--spark-master=spark://h:7077"]  # one word: a value may start with a dash


def test_refusals_before_a_jvm_starts(tmp_path: Path) -> None:
    """Bad masters, GPUs and a gang bigger than a local master are refused in check()."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed: pip install -e '.[spark]'")
    from tfdist.backends.base import BackendOptions
    from tfdist.backends.spark.driver import SparkBackend
    from tfdist.jobspec import load

    def backend(master: str, **roles: object) -> SparkBackend:
        job = load.from_dict({"name": "s", "command": "python t.py", "workdir": str(tmp_path),
                              "roles": roles or {"worker": 3}}, "job")
        return SparkBackend(job, BackendOptions(spark_master=master))

    with pytest.raises(SpecError, match=r"asks for 3 tasks .* has 2 task slot"):
        backend("local[2]").check()
    with pytest.raises(SpecError, match=r"has 2 task slot"):
        backend("local-cluster[2,2,512]", worker={"replicas": 3, "resources": {"cpus": 2}}).check()
    with pytest.raises(SpecError, match="roles.worker.resources.gpus"):
        backend("local[4]", worker={"replicas": 1, "resources": {"gpus": 1}}).check()
    with pytest.raises(SpecError, match="is not a Spark master URL"):
        backend("mesos://x:1").check()
    job = load.from_dict({"name": "s", "command": "python t.py", "workdir": str(tmp_path),
                          "roles": {"worker": 1}, "python": {"requirements": ["six"]}}, "job")
    with pytest.raises(SpecError, match="python: on Spark the executors' Python provides the packages"):
        SparkBackend(job, BackendOptions(spark_master="local[2]")).check()
    backend("local[3]").check()  # fits: nothing raised, nothing started


def test_a_huge_workdir_is_refused_not_packed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workdir, "MAX_WORKDIR_FILES", 3)
    for i in range(5):
        (tmp_path / f"f{i}").write_text("x")
    assert "more than" in (workdir.workdir_problem(tmp_path, []) or "")
    assert workdir.workdir_problem(tmp_path / "nothing", []) is None


def test_a_restart_sent_as_the_last_attempt_ends_is_not_refused(tmp_path: Path) -> None:
    """The agent reports an exit just before its TaskProcess marks itself done; the driver
    restarts on that report. A start arriving in between waits instead of failing with
    "the previous attempt is still running" (a loaded CI run counted a second restart)."""

    class Ending:  # the previous attempt: reaped and its exit reported, done comes a moment later
        def __init__(self) -> None:
            self.done = threading.Event()
            self.exit_code = 0

    mine, theirs = socket.socketpair()
    try:
        agent = node_agent.Agent(mine, {"command": [sys.executable, "-c", "print('again')"]}, "t")
        agent.proc = Ending()  # type: ignore[assignment]
        threading.Timer(0.3, agent.proc.done.set).start()
        agent.start(1, {}, str(tmp_path))
        assert agent.proc is not None and not isinstance(agent.proc, Ending)
        agent.proc.done.wait(timeout=30)
        theirs.settimeout(10)
        got = b""
        while b'"ev": "exit"' not in got:
            got += theirs.recv(65536)
        events = [json.loads(line) for line in got.decode().splitlines()]
        assert [e["ev"] for e in events if e["ev"] in ("started", "exit")] == ["started", "exit"]
        assert all(e.get("code", 0) == 0 for e in events)
    finally:
        mine.close()
        theirs.close()


class _StatusPage:
    """A master's web UI on loopback that serves ``body`` at /json/ (no JVM needed)."""

    def __init__(self, body: bytes) -> None:
        import http.server

        page = body

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                self.send_response(200)
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("page", [None, b"<html>not json</html>", b'{"workers": "x"}', b'{"workers": [1]}'])
def test_a_capacity_check_that_cannot_run_says_so_and_names_master_ui(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], page: bytes | None
) -> None:
    """A standalone master whose status page is not where tfdist looks (its web UI on another
    port), or is not a master's: the check is not skipped silently (a gang too big would wait
    the placement timeout and fail); tfdist says so at start, naming spark.master_ui."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed: pip install -e '.[spark]'")
    from tfdist.backends.base import BackendOptions
    from tfdist.backends.spark.driver import SparkBackend
    from tfdist.jobspec import load

    master = socket.create_server(("127.0.0.1", 0))  # answers the reachability check's connect
    pages = _StatusPage(page) if page is not None else None
    closed = socket.create_server(("127.0.0.1", 0))
    nobody = f"http://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # nothing listens there now
    try:
        ui = pages.url if pages else nobody
        job = load.from_dict({"name": "s", "command": "python t.py", "workdir": str(tmp_path),
                              "roles": {"worker": 3}, "spark": {"master_ui": ui}}, "job")
        SparkBackend(job, BackendOptions(spark_master=f"spark://127.0.0.1:{master.getsockname()[1]}")).check()
    finally:
        master.close()
        if pages:
            pages.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tfdist: warning: the Spark capacity check could not run")
    assert f"{ui}/json/" in err and "Set spark.master_ui" in err and "spark.placement_timeout_seconds (60 s)" in err


def test_a_readable_status_page_refuses_a_gang_too_big(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pyspark", reason="the spark extra is not installed: pip install -e '.[spark]'")
    from tfdist.backends.base import BackendOptions
    from tfdist.backends.spark.driver import SparkBackend
    from tfdist.jobspec import load

    status = {"workers": [{"state": "ALIVE", "cores": 2, "coresfree": 2, "host": "w1"},
                          {"state": "DEAD", "cores": 8, "coresfree": 8, "host": "w2"}]}
    master = socket.create_server(("127.0.0.1", 0))
    pages = _StatusPage(json.dumps(status).encode())
    try:
        job = load.from_dict({"name": "s", "command": "python t.py", "workdir": str(tmp_path),
                              "roles": {"worker": 3}, "spark": {"master_ui": pages.url}}, "job")
        backend = SparkBackend(job, BackendOptions(spark_master=f"spark://127.0.0.1:{master.getsockname()[1]}"))
        with pytest.raises(SpecError, match=r"has 2 task slot\(s\) in all \(1 alive worker\(s\): w1: 2 cores"):
            backend.check()
    finally:
        master.close()
        pages.close()
    assert capsys.readouterr().err == ""


def test_a_lost_host_is_named_with_its_tasks_and_how_its_agent_went() -> None:
    agents = {"chief-0": {"host": "10.0.0.1"}, "worker-0": {"host": "10.0.0.2"}, "worker-1": {"host": "10.0.0.2"}}
    info = {"host": "10.0.0.2", "hostname": "h2", "executor": "1"}
    there, why = spark_plan.lost_on_host(info, "silent for 30s", agents)
    assert there == ["worker-0", "worker-1"]
    assert why == ("its agent was silent for 30s (host h2 (10.0.0.2) cut off, or executor 1 stuck; "
                   "this job's tasks on that host: worker-0, worker-1)")
    _, why = spark_plan.lost_on_host(info, "closed", agents)
    assert why.startswith("its Spark task ended (executor 1 on host h2 (10.0.0.2) lost, or the task killed;")


def test_what_an_agent_ships_to_hold_a_warm_spare(tmp_path: Path) -> None:
    """restart.warm_spares: a ``python SCRIPT`` role ships the spare program's text and the
    script's imports (read here, where tfdist runs); any other command, or no warm_spares,
    ships nothing (its restarts start cold)."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed: pip install -e '.[spark]'")
    from tfdist.backends.spark.driver import SparkBackend
    from tfdist.jobspec import load
    from tfdist.node import spares

    (tmp_path / "t.py").write_text("import numpy\nfrom . import mine\n")
    roles = {"chief": 1, "ps": {"replicas": 1, "command": ["bash", "ps.sh"]}}

    def backend(warm: bool) -> SparkBackend:
        return SparkBackend(load.from_dict({"name": "s", "command": "python t.py", "workdir": str(tmp_path),
                                            "strategy": "parameter_server", "roles": {**roles, "worker": 1},
                                            "restart": {"warm_spares": warm}}, "job"))

    shipped = backend(True)._spare_of("worker")
    assert shipped == {"spare": {"imports": ["tensorflow", "numpy"], "program": spares.program_source()}}
    assert backend(True)._spare_of("worker", program=False) == {"spare": {"imports": ["tensorflow", "numpy"]}}
    assert backend(True)._spare_of("ps") == {} and backend(False)._spare_of("worker") == {}


def test_a_restart_on_a_new_agent_starts_cold_and_says_why(tmp_path: Path) -> None:
    """With restart.warm_spares, the first start of a restarted task on a new agent (a new
    Spark stage, a relaunched YARN container) has no spare: the old agent's went with it."""
    (tmp_path / "t.py").write_text("print('again')\n")
    task = {"name": "worker-0", "command": [sys.executable, "t.py"], "spare": {"imports": [], "program": ""}}
    mine, theirs = socket.socketpair()
    agent = node_agent.Agent(mine, task, "t")
    try:
        agent.start(1, {}, str(tmp_path))
        theirs.settimeout(10)
        got = b""
        while b'"ev": "exit"' not in got:
            got += theirs.recv(65536)
        lines = [ln for e in map(json.loads, got.decode().splitlines()) for ln in e.get("lines", [])]
        assert lines == ["tfdist: no warm spare for worker-0 (its agent is new: the old agent's spare "
                         "ended with it); starting cold", "again"]
        assert agent.spare.pool is not None and agent.spare.pool.idle() == {}  # kept from now on, made on fill
    finally:
        agent.shutdown()
        mine.close()
        theirs.close()


#: What py4j said when a Spark-on-YARN session start lost Spark's UI race (a CI run's driver
#: log, shortened): the exception has no message, its stack names the UI's handlers.
_UI_RACE = (
    "An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.\n"
    ": java.util.ConcurrentModificationException\n"
    "\tat java.base/java.util.ArrayList$ArrayListSpliterator.forEachRemaining(ArrayList.java:1631)\n"
    "\tat org.sparkproject.jetty.ee10.servlet.ServletHandler.initialize(ServletHandler.java:687)\n"
    "\tat org.apache.spark.ui.SparkUI.attachAllHandlers(SparkUI.scala:82)\n"
    "\tat org.apache.spark.SparkContext.<init>(SparkContext.scala:703)\n")


@pytest.mark.parametrize(("said", "line"), [
    (_UI_RACE, "java.util.ConcurrentModificationException"),
    ("An error occurred while calling None.x.\n: org.apache.spark.SparkIllegalArgumentException: "
     "[INVALID_CONF_VALUE] The value 'BOGUS' is invalid.\n\tat a.b(C.scala:1)\n",
     "org.apache.spark.SparkIllegalArgumentException: [INVALID_CONF_VALUE] The value 'BOGUS' is invalid."),
    ("Java gateway process exited before sending its port number", "Java gateway process exited before sending its port number"),
])
def test_a_jvm_error_is_the_exception_py4j_quotes(said: str, line: str) -> None:
    from tfdist.backends.spark import jvm

    assert jvm.first_line(RuntimeError(said)) == line


def test_only_spark_s_ui_race_is_taken_for_it() -> None:
    from tfdist.backends.spark import jvm

    assert jvm.ui_race(RuntimeError(_UI_RACE))
    assert not jvm.ui_race(RuntimeError(_UI_RACE.replace("attachAllHandlers", "somethingElse")))
    assert not jvm.ui_race(RuntimeError(": org.apache.spark.SparkException: External scheduler cannot be instantiated"))


def _failing_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, errors: list[str]) -> tuple[Any, list[str]]:
    """A Spark backend whose session starts raise ``errors`` in turn (then start), with the
    ends of failed starts recorded instead of done."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed: pip install -e '.[spark]'")
    from pyspark.sql import SparkSession

    from tfdist.backends.base import BackendOptions
    from tfdist.backends.spark import driver
    from tfdist.jobspec import load

    calls: list[str] = []

    class Started:
        sparkContext = "sc"

    def get_or_create(_builder: object) -> Started:
        calls.append("start")
        if errors:
            raise RuntimeError(errors.pop(0))
        return Started()

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", get_or_create)
    monkeypatch.setattr(driver.jvm, "end_driver", lambda token, started: calls.append(f"end started={started}"))
    job = load.from_dict({"name": "s", "command": "python t.py", "workdir": str(tmp_path), "roles": {"worker": 1}}, "job")
    backend = driver.SparkBackend(job, BackendOptions(spark_master="local[1]"))
    backend.attach(tmp_path)
    return backend, calls


def test_a_session_start_lost_to_spark_s_ui_race_is_made_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, calls = _failing_starts(tmp_path, monkeypatch, [_UI_RACE])
    assert backend._start_session() == "sc"
    assert calls == ["start", "end started=False", "start"]  # the failed start's JVM ended first
    said = backend.events.get_nowait()
    assert "Spark's driver UI raced the YARN application master); starting it again (2 of 2)" in said.line


def test_a_session_start_fails_at_once_on_any_other_error_or_a_second_race(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tfdist.errors import BackendError

    backend, calls = _failing_starts(tmp_path, monkeypatch, [": org.apache.spark.SparkException: bad conf"])
    with pytest.raises(BackendError, match=r"the session did not start: org.apache.spark.SparkException: bad conf$"):
        backend._start_session()
    assert calls == ["start"]
    backend, calls = _failing_starts(tmp_path, monkeypatch, [_UI_RACE, _UI_RACE])
    with pytest.raises(BackendError, match=r"did not start: java.util.ConcurrentModificationException$"):
        backend._start_session()
    assert calls == ["start", "end started=False", "start"]
