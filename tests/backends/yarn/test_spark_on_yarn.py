"""Spark on YARN through the Spark backend, on the real cluster of yarn/yarn.sh.

Each job here is one Spark session on YARN (the costly part: a driver, an AM container,
executor containers), so the tests keep to two jobs and assert all they can on each. The
cluster is shared by the session; what is left after a job is read from the RM's REST API
(applications by tag) and from the process table.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.backends.spark.spark_cluster import missing
from tests.backends.yarn.yarn_cluster import (
    ROOT,
    Cluster,
    KilledNodeManager,
    cluster_full,
    container_processes,
    nodemanager_at,
    task_process,
)
from tests.conftest import BIN, TFDIST, plain_and_summary, summary, tfdist
from tfdist.backends.yarn import reaper, rest

pytestmark = [pytest.mark.yarn, pytest.mark.spark, pytest.mark.integration]

EXAMPLE = ROOT / "examples" / "digits" / "mwms.yaml"
#: Every address on loopback: the driver, its channel and the executors' agents.
LOOPBACK = "spark.driver.host: 127.0.0.1, spark.driver.bindAddress: 127.0.0.1"


def assert_nothing_left(yarn_env: Cluster, tag: str, app: str) -> None:
    """No application of the job's ``tag`` is live at the RM, and no process of the
    application ``app``'s containers is left (given 120 s to go)."""
    assert not yarn_env.live_apps(tag, wait=30)
    deadline = time.monotonic() + 120
    while container_processes([app]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not container_processes([app])


@pytest.fixture(autouse=True)
def _spark_here() -> None:
    if missing():
        pytest.skip(missing() or "")


def yarn_args(tmp_path: Path, *, queue: str = "default") -> list[str]:
    return ["--backend", "spark", "--spark-master", "yarn", "--runs-dir", str(tmp_path / "runs"),
            "--set", f"spark.conf={{spark.yarn.queue: {queue}, {LOOPBACK}}}"]


def start_restarting_job(tmp_path: Path, name: str, workers: int, faults: int = 1) -> subprocess.Popen[str]:
    """``tfdist run --json`` of a job of ``workers`` workers in queue ``tfdist`` whose attempts
    before the ``faults``-th restart sleep 300 s and any later one ends at once, so it succeeds
    only by ``faults`` restarts; on failure policy, one restart more than that, no backoff,
    Spark's UI off."""
    job = tmp_path / "job.yaml"
    job.write_text(
        f"name: {name}\nroles: {{worker: {workers}}}\n"
        "command: [python, -c, \"import os, time; "
        f"time.sleep(300 if int(os.environ['TFDIST_RESTART_COUNT']) < {faults} else 1)\"]\n"
        f"restart: {{policy: on-failure, max_restarts: {faults + 1}, backoff_seconds: 0}}\n"
        f"spark: {{conf: {{spark.yarn.queue: tfdist, {LOOPBACK}, spark.ui.enabled: 'false'}}}}\n")
    return subprocess.Popen([*TFDIST, "run", "--json", str(job), "--backend", "spark", "--spark-master", "yarn",
                             "--runs-dir", str(tmp_path / "runs")], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.timeout(600)  # a Spark session on YARN takes minutes to start on a loaded machine
def test_ctrl_c_leaves_no_application_running(yarn_env: Cluster, tmp_path: Path) -> None:
    """SIGINT to tfdist while its task runs in an executor container: exit 130, and the
    application ends (none of the job's left live at the RM) with no process of its
    containers left behind."""
    proc = subprocess.Popen([*TFDIST, "run", "--quiet", *yarn_args(tmp_path, queue="tfdist"), "--name",
                             "spark-yarn-ctrl-c", "--workers", "1", "--", "python", str(BIN / "hang.py")],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        task_process("worker-0", time.monotonic() + 400, job="spark-yarn-ctrl-c", cli=proc)
        apps = [a["id"] for a in yarn_env.apps("tfdist-job-spark-yarn-ctrl-c") if a["state"] == "RUNNING"]
        assert len(apps) == 1, apps
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert not yarn_env.live_apps("tfdist-job-spark-yarn-ctrl-c", wait=30)
    deadline = time.monotonic() + 30
    while container_processes(apps) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not container_processes(apps)


def _driver_jvms(job: str) -> list[int]:
    """The job's Spark driver JVMs: their command line names the job's YARN tag."""
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if any(f"tfdist-job-{job}" in arg for arg in (p.info["cmdline"] or []))
            and "java" in (p.info["cmdline"] or [""])[0]]


@pytest.mark.timeout(400)
@pytest.mark.parametrize("when", ["jvm-starting", "app-accepted"])
def test_interrupt_while_the_session_starts_leaves_no_jvm_and_no_application(
        yarn_env: Cluster, tmp_path: Path, when: str) -> None:
    """SIGTERM to tfdist while its Spark session is still starting: exit 130, no driver JVM
    left, no application of the run live at the RM. ``jvm-starting``: the signal as the driver
    JVM starts (pyspark's launch_gateway waits for its port); before the fix the JVM's main
    thread died on the directory pyspark had removed, and its other threads kept it alive as
    an orphan for good. ``app-accepted``: the signal once the RM has the application
    (ACCEPTED, its AM not yet up); before the fix it stayed live after tfdist had gone, until
    its AM gave up on the driver (~40 s here; on a busy queue as long as it waits)."""
    job = f"spark-yarn-start-{when}"
    proc = subprocess.Popen([*TFDIST, "run", "--quiet", *yarn_args(tmp_path), "--name", job, "--workers", "1",
                             "--", "python", str(BIN / "hang.py")],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if when == "jvm-starting" and _driver_jvms(job):
                break
            if when == "app-accepted" and yarn_env.live_apps(f"tfdist-job-{job}", wait=0):
                break  # (an earlier run's application, ended, has the same tag)
            time.sleep(0.1)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        if when == "app-accepted":
            assert [a["state"] for a in yarn_env.live_apps(f"tfdist-job-{job}", wait=0)] != ["RUNNING"]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert not yarn_env.live_apps(f"tfdist-job-{job}", wait=10)
    deadline = time.monotonic() + 10
    while _driver_jvms(job) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = _driver_jvms(job)
    for pid in left:  # an orphan must not outlive the test either
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"driver JVM(s) left running: {left}"


@pytest.mark.timeout(400)
def test_a_sigkilled_tfdist_s_queued_application_is_killed_by_its_reaper(yarn_env: Cluster, tmp_path: Path) -> None:
    """tfdist SIGKILLed while its Spark session waits for YARN (every vcore held: the
    application is ACCEPTED, its AM not started): its driver JVM goes with it, and the run's
    reaper kills the application through the RM. Without the reaper it stays ACCEPTED for as
    long as the cluster is full (this test then fails at the assertion after the kill)."""
    job = "spark-yarn-queued"
    with cluster_full(yarn_env) as holders:
        proc = subprocess.Popen([*TFDIST, "run", "--quiet", *yarn_args(tmp_path, queue="tfdist"), "--name", job,
                                 "--workers", "1", "--", "python", str(BIN / "hang.py")],
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        live: list[dict] = []
        try:
            deadline = time.monotonic() + 300  # the session stages Spark's jars, then submits
            while not live and proc.poll() is None and time.monotonic() < deadline:
                live = yarn_env.live_apps(f"tfdist-job-{job}", wait=0)
                time.sleep(0.2)
            assert [a["state"] for a in live] == ["ACCEPTED"], (live, proc.poll())
            proc.kill()
            proc.wait(timeout=30)
            assert not yarn_env.live_apps(f"tfdist-job-{job}", wait=30)  # gone while the cluster is full
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            rm = rest.ResourceManager.from_environ(yarn_env.env)
            for left in yarn_env.live_apps(f"tfdist-job-{job}", wait=0):  # a failed run leaves none queued
                rm.kill(str(left["id"]))
        app = yarn_env.get(f"/ws/v1/cluster/apps/{live[0]['id']}")["app"]
        assert app["state"] == "KILLED" and reaper.DIAGNOSTICS in app["diagnostics"], app
        assert [a["state"] for a in yarn_env.apps("tfdist-test-holder") if a["id"] in holders] == \
            ["ACCEPTED"] * len(holders)
    deadline = time.monotonic() + 10
    while _driver_jvms(job) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _driver_jvms(job)
    (log,) = (tmp_path / "runs").glob("*/yarn-reaper.log")
    assert f"killed {live[0]['id']} through the ResourceManager" in log.read_text(), log.read_text()


@pytest.mark.timeout(900)
@pytest.mark.restarts_cluster
def test_a_shut_down_executor_container_then_a_lost_nodemanager_restart_the_tasks_by_policy(
        yarn_env: Cluster, tmp_path: Path) -> None:
    """One job (a Spark session on YARN is the costly part), two faults, each restarting the
    gang by policy in a new stage:

    - YARN itself ends worker-0's executor container (the RM's signal API,
      FORCEFUL_SHUTDOWN, as an operator or a preemption would) on a NodeManager that stays
      live: Spark loses that executor and gets a new container, tfdist restarts the tasks;
    - once both run again, an executor's NodeManager SIGKILLed (away from the AM's node when
      there is one; the test cluster marks it LOST after 15 s; its containers' processes
      outlive it here): tfdist names the node and the task on it in one line; Spark drops the
      executor and gets a new one from YARN on the NodeManager left, tfdist runs a new stage,
      both workers restart there and succeed. (Before, no line named the node: only
      "executor ... on host ... lost".)

    Nothing of the job is left. The NodeManager is started again after, so the next tests
    have two."""
    job = "spark-yarn-faults"
    proc = start_restarting_job(tmp_path, job, workers=2, faults=2)
    killed = None
    try:
        for task in ("worker-0", "worker-1"):
            task_process(task, time.monotonic() + 400, job=job, cli=proc)
        (placed,) = (tmp_path / "runs").glob("*/spark_placement.json")
        record = json.loads(placed.read_text())
        app, shut = record["application"], record["tasks"]["worker-0"]["container"]
        yarn_env.shut_down(shut)

        for task in ("worker-0", "worker-1"):
            task_process(task, time.monotonic() + 400, job=job, cli=proc, attempt=1)
        deadline = time.monotonic() + 60  # the new stage's placement, written as its agents report
        while (record := json.loads(placed.read_text()))["tasks"]["worker-0"]["container"] == shut:
            assert time.monotonic() < deadline, record
            time.sleep(0.5)
        (attempt,) = yarn_env.get(f"/ws/v1/cluster/apps/{app}/appattempts")["appAttempts"]["appAttempt"]
        listed = yarn_env.get(f"/ws/v1/cluster/apps/{app}/appattempts/{attempt['appAttemptId']}/containers")
        nodes = {c["containerId"]: (c["nodeId"], c["nodeHttpAddress"].removeprefix("http://"))
                 for c in listed["container"]}
        # a worker away from the AM's node, when there is one (else the AM is lost too and
        # YARN starts a new attempt, with new executors for both)
        away = [n for n in ("worker-1", "worker-0")
                if nodes[record["tasks"][n]["container"]][1] != attempt["nodeHttpAddress"]]
        name = (away or ["worker-1"])[0]
        node, node_http = nodes[record["tasks"][name]["container"]]
        killed = KilledNodeManager(nodemanager_at(node_http))
        out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if killed is not None:
            killed.restart(yarn_env)
    plain, result = plain_and_summary(out, err)
    assert proc.returncode == 0, (result.get("root_cause"), out[-3000:], err[-2000:])
    # the application ran in the job's queue (spark.yarn.queue), under the job's name and tags
    ran = yarn_env.get(f"/ws/v1/cluster/apps/{app}")["app"]
    assert (ran["state"], ran["finalStatus"], ran["queue"], ran["name"]) == \
        ("FINISHED", "SUCCEEDED", "root.tfdist", f"tfdist-{job}"), ran
    assert {"tfdist", f"tfdist-job-{job}"} <= set(ran["applicationTags"].split(","))
    line = next((ln for ln in plain.splitlines() if f"node {node} on host" in ln and " is lost " in ln), None)
    assert line is not None and name in line, plain[-3000:]
    assert {t["name"]: t["state"] for t in result["tasks"]} == {"worker-0": "succeeded", "worker-1": "succeeded"}
    assert {t["name"]: t["restarts"] for t in result["tasks"]} == {"worker-0": 2, "worker-1": 2}, result["tasks"]
    assert "runs on a new agent" in (Path(result["run_dir"]) / "logs" / f"{name}.log").read_text()
    assert_nothing_left(yarn_env, f"tfdist-job-{job}", app)


@pytest.mark.timeout(600)
def test_a_packed_environment_in_spark_archives_is_the_task_s_python(yarn_env: Cluster, tmp_path: Path) -> None:
    """The per-job environment as Spark on YARN ships it (docs/spark.md): a packed virtual
    environment named in ``spark.archives`` and ``spark.pyspark.python``. The task's ``python``
    must be the unpacked copy in its container, and a module only that environment has must
    import there."""
    import sys
    import sysconfig
    import tarfile

    env = tmp_path / "env"
    # layered over this interpreter's packages (TensorFlow is not needed by the task, but the
    # executors' Python workers need pyspark), as a packed environment built elsewhere would carry
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(env), "platbase": str(env)}))
    (site / "tfdist_packed_marker.py").write_text("WHERE = __file__\n")
    packed = tmp_path / "train-env.tar.gz"
    with tarfile.open(packed, "w:gz") as tar:
        tar.add(env, arcname=".")
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: spark-yarn-packed-env\nroles: {worker: 1}\n"
        "command: [python, -c, \"import sys, tfdist_packed_marker as m; print('prefix', sys.prefix); print('marker', m.WHERE)\"]\n"
        f"spark: {{conf: {{spark.yarn.queue: tfdist, {LOOPBACK}, spark.ui.enabled: 'false',\n"
        f"  spark.archives: 'file://{packed}#environment', spark.pyspark.python: ./environment/bin/python}}}}\n")
    proc = tfdist("run", "--quiet", "--json", str(job), "--backend", "spark", "--spark-master", "yarn",
                  "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path, timeout=600)
    result = summary(proc)
    assert proc.returncode == 0, (result.get("root_cause"), proc.stdout[-2000:], proc.stderr[-2000:])
    log = (Path(result["run_dir"]) / "logs" / "worker-0.log").read_text()
    prefix = next(ln.split(" ", 1)[1] for ln in log.splitlines() if ln.startswith("prefix "))
    marker = next(ln.split(" ", 1)[1] for ln in log.splitlines() if ln.startswith("marker "))
    # the container's localized copy of the archive, not the environment it was packed from
    assert not prefix.startswith(str(tmp_path)) and "/nm-" in prefix, log
    assert marker.startswith(prefix.rstrip("/") + "/"), log
