"""The Spark backend across hosts of the test bed: a standalone master on h0, workers on h1
and h2 (3 cores each), tfdist's driver on h3, each on its own network stack and hostname.

What only shows between hosts: the address a task advertises (its own host's, reachable by
its peers), the working directory and the job's environment arriving where they never were,
a host dying with its tasks (the job moves to the hosts left, or fails saying it no longer
fits), and a host cut off from the network and back (the job moves; nothing of the old attempt
joins the new one). Nothing of a job may be left on any host afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.backends.spark.spark_cluster import missing
from tests.conftest import ROOT, read_jsonl
from tests.hosts.clusters import (
    SparkOnHosts,
    Watched,
    digits_project,
    finish,
    job_processes,
    placement,
    run_tfdist,
    running_again,
    shown_where_run,
)

if missing():
    pytest.skip(missing() or "", allow_module_level=True)

# a cluster of three JVMs and up to five TensorFlow tasks per job on two cores
pytestmark = [pytest.mark.hosts, pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(900)]



@pytest.fixture(scope="module")
def spark(host_bed):
    cluster = SparkOnHosts(host_bed, host_bed.host("h0"), [host_bed.host("h1"), host_bed.host("h2")],
                           cores=3).start()
    try:
        yield cluster
    finally:
        cluster.stop()
        host_bed.restore()


@pytest.fixture
def project(host_bed) -> Path:
    """The digits examples, copied to the driver host's own disk (h3's workdir)."""
    return digits_project(host_bed.host("h3"))


def start(bed, spark, proj: Path, job: str, *args: str, name: str):
    runs = proj.parent / "runs"
    return run_tfdist(bed, bed.host("h3"), ["run", "--json", *spark.args(), "--runs-dir", str(runs),
                                            str(proj / job), "--set", f"name={name}", *args], cwd=proj.parent)





#: Whole-worker executors (3 cores each), with the session waiting for both before the job's
#: stage: Spark offers a barrier stage's tasks round-robin over the executors it has, so the
#: three tasks span h1 and h2 (2 + 1), and after a fault on h2 h1's executor alone still fits
#: the gang. Without the wait, the job started on the first executor to register, whose three
#: slots fit all three tasks (seen in CI: nothing on h2 to cut off).
BOTH_WORKERS = ("--set", 'spark.conf={"spark.cores.max": "6", "spark.scheduler.minRegisteredResourcesRatio": "1.0", '
                '"spark.scheduler.maxRegisteredResourcesWaitingTime": "120s"}')


def assert_nothing_left(bed, spark, name: str) -> None:
    assert spark.active_apps() == []
    deadline = time.monotonic() + 30
    while (job_processes(name) or bed.pids(bed.host("h3"))) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert job_processes(name) == []
    assert bed.pids(bed.host("h3")) == []  # the driver host: tfdist and its JVM are gone


def assert_on_own_hosts(bed, result: dict, used: set[str]) -> None:
    """Every task's address (what TF_CONFIG names) is the address of the host it ran on."""
    where = placement(result, "spark")
    for task in result["tasks"]:
        if task["address"]:
            assert task["address"].split(":")[0] == bed.host(where[task["name"]]["hostname"]).address, task
    assert {w["hostname"] for w in where.values()} == used


def test_pss_example_trains_across_hosts_over_a_slow_lossy_link(host_bed, spark, project: Path) -> None:
    """The PSS example (chief, two workers, a ps, an evaluator: five tasks on 2 x 3 slots,
    so on h1 and h2) trains over a slow, lossy link to h2. (What a task gets on its host,
    TF_CONFIG, env, working directory, the crash test's MWMS job shows.)"""
    # the PSS example with h2's link slow and lossy (20 ms each way, 1 % of frames lost):
    # training completes; what it costs is benchmarks/hosts_slow_network.py's figure
    host_bed.slow(host_bed.host("h2"), delay_ms=20, loss=0.01)
    try:
        pss = start(host_bed, spark, project, "pss_fit.yaml", "--set",  # 4x fewer steps over the slow link
                    'command=[python, train_pss_fit.py, --epochs, "1", --batch-per-replica, "128"]', name="hosts-pss")
        rc, result, err = finish(pss, 600)
    finally:
        host_bed.fast(host_bed.host("h2"))
    assert rc == 0, (result, err[-3000:])
    states = {t["name"]: t["state"] for t in result["tasks"]}
    assert states["chief-0"] == "succeeded" and states["ps-0"] == "stopped", states
    assert_on_own_hosts(host_bed, result, {"h1", "h2"})
    assert_nothing_left(host_bed, spark, "hosts-pss")


def _wait_training(runs: Path, name: str, proc: subprocess.Popen, timeout: float = 500) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if any("epoch" in r for p in runs.glob(f"{name}-*/progress.jsonl") for r in read_jsonl(p)):
            return  # an epoch done: training runs (a "begin" mark comes before the first step)
        time.sleep(0.3)
    raise AssertionError(f"{name} never reported progress (rc={proc.poll()}): {proc.stderr.read() if proc.poll() is not None else ''}")


def test_host_crash_mid_mwms_moves_the_job_to_the_hosts_left(host_bed, spark, project: Path) -> None:
    """The MWMS example (a chief and two workers) starts with tasks on h1 and h2, each first
    printing what it got: TF_CONFIG naming its own host, the job's env, the working directory
    unpacked on its host (the copy on h3's disk is not where they run). Then h2 dies (every
    process on it SIGKILLed) while it trains. tfdist says in one line which host was lost and
    which tasks were on it, restarts the group by policy on h1 (3 slots: the gang still fits)
    with a TF_CONFIG naming h1's addresses, and the job finishes. Before the fix the new
    stage's agents were refused ("its address ... cannot change") and the job failed."""
    h1, h2 = host_bed.host("h1"), host_bed.host("h2")
    proc = start(host_bed, spark, project, "mwms.yaml", "--set", "env.EXTRA=per-job", "--set",
                 'command=[sh, -c, "python show.py && exec python train_fit.py --epochs 3"]',
                 "--set", "restart.policy=on-failure", "--set", "restart.max_restarts=3",
                 "--set", "restart.backoff_seconds=0", *BOTH_WORKERS, name="hosts-crash")
    try:
        _wait_training(project.parent / "runs", "hosts-crash", proc)
        run_dir = next((project.parent / "runs").glob("hosts-crash-*"))
        on_h2 = sorted(n for n, w in placement({"run_dir": run_dir}, "spark").items() if w["hostname"] == "h2")
        assert on_h2, "no task was placed on h2"
        assert host_bed.crash(h2)
        rc, result, err = finish(proc, 420)
    finally:
        spark.start_worker(h2)  # the host comes back for the next test
    assert rc == 0, (result, err[-4000:])
    assert result["metrics"]["val_accuracy"] > 0.3  # chance is 0.1
    # what each attempt's tasks printed first (the logs keep every attempt's): one map for
    # the first attempt's tasks, on both hosts; in every attempt each task's entry its host's
    shown = shown_where_run(host_bed, result, "h3", "spark-work")
    first_maps = [json.loads(envs[0]["TF_CONFIG"])["cluster"] for envs in shown.values()]
    hosts_seen = {env["hostname"] for envs in shown.values() for env in envs}
    assert hosts_seen == {"h1", "h2"} and all(m == first_maps[0] for m in first_maps), first_maps
    # one line names the lost host and its tasks (the restart line itself may name a peer
    # whose collective broke first, and then the first restart is spent on the old placement)
    lost = [ln for ln in err.splitlines() if " lost: " in ln]
    assert any(f"h2 ({h2.address})" in ln and all(t in ln for t in on_h2) for ln in lost), err[-3000:]
    assert 1 <= result["restarts_used"] <= 2
    assert {t["state"] for t in result["tasks"]} == {"succeeded"}
    assert {t["address"].split(":")[0] for t in result["tasks"]} == {h1.address}
    assert_on_own_hosts(host_bed, result, {"h1"})
    assert_nothing_left(host_bed, spark, "hosts-crash")
    spark.wait_workers(2)


def test_host_crash_when_the_gang_no_longer_fits_fails_clearly(host_bed, spark, project: Path) -> None:
    """Four tasks on 6 slots; h2 dies: 3 slots are left. The job fails within the placement
    timeout saying so, instead of Spark retrying a stage that cannot be placed."""
    hang = ROOT / "tests" / "bin" / "hang.py"
    runs = project.parent / "runs"
    proc = run_tfdist(host_bed, host_bed.host("h3"), [
        "run", "--json", *spark.args(), "--runs-dir", str(runs), "--workers", "4", "--name", "hosts-nofit",
        "--set", "restart.policy=on-failure", "--set", "restart.max_restarts=2",
        "--set", "spark.placement_timeout_seconds=10", "--", sys.executable, str(hang)], cwd=project.parent)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if len([r for p in runs.glob("hosts-nofit-*/events.jsonl") for r in read_jsonl(p)
                if r["state"] == "running"]) == 4:
            break
        time.sleep(0.3)
    host_bed.crash(host_bed.host("h2"))
    try:
        rc, result, err = finish(proc, 240)
    finally:
        spark.start_worker(host_bed.host("h2"))
    assert rc == 1, (result, err[-3000:])
    message = result["root_cause"]["message"]
    assert "no longer fits" in message and "4 tasks" in message, message
    assert_nothing_left(host_bed, spark, "hosts-nofit")
    spark.wait_workers(2)


def test_partition_mid_mwms_restarts_on_the_host_left_and_the_healed_host_stays_out(
        host_bed, spark, project: Path) -> None:
    """h2's link goes down while the MWMS example trains. Nothing closes the connections of
    a cut host, so tfdist notices by silence: h2's agents say nothing (not even their
    heartbeat) for 30 s (node_agent.SILENCE_SECONDS), tfdist names the host and its tasks
    in one line, ends the stage and restarts the group on h1. The link comes back as soon
    as the group runs again: h2's old agents ended by themselves meanwhile (they heard no
    driver for as long), so nothing of the old attempt joins the new one, and the job
    finishes on h1. Before the fix the new stage's agent for an h2 task was refused while
    the old one still looked alive, and the old agent ran on after the heal."""
    h1, h2 = host_bed.host("h1"), host_bed.host("h2")
    runs = project.parent / "runs"
    watched = Watched(start(host_bed, spark, project, "mwms.yaml", "--set",
                            'command=[python, train_fit.py, --epochs, "3"]', "--set", "restart.policy=on-failure",
                            "--set", "restart.max_restarts=5", "--set", "restart.backoff_seconds=0",
                            *BOTH_WORKERS, name="hosts-cut"))
    _wait_training(runs, "hosts-cut", watched.proc)
    run_dir = next(runs.glob("hosts-cut-*"))
    on_h2 = sorted(n for n, w in placement({"run_dir": run_dir}, "spark").items() if w["hostname"] == "h2")
    assert on_h2, "no task was placed on h2"
    cut, cut_wall = time.monotonic(), time.time()
    host_bed.partition(h2)
    try:
        deadline = time.monotonic() + 400
        while watched.proc.poll() is None and time.monotonic() < deadline:
            again = running_again(run_dir)
            if again is not None and again > cut_wall:
                break
            time.sleep(0.5)
    finally:
        host_bed.heal(h2)
    rc, result, text = watched.wait(420)
    assert rc == 0, (result, text[-4000:])
    lost = watched.first(f"h2 ({h2.address}) cut off", after=cut)
    assert lost is not None, text[-3000:]
    line = next(ln for _, ln in watched.lines if f"h2 ({h2.address}) cut off" in ln)
    assert "silent for 30s" in line and all(t in line for t in on_h2), line
    assert result["restarts_used"] >= 1
    assert {t["state"] for t in result["tasks"]} == {"succeeded"}
    assert {t["address"].split(":")[0] for t in result["tasks"]} == {h1.address}
    assert_on_own_hosts(host_bed, result, {"h1"})
    assert_nothing_left(host_bed, spark, "hosts-cut")
    print(f"cut -> h2 named lost {lost - cut:.1f} s; -> group running again "
          f"{(running_again(run_dir) or 0) - cut_wall:.1f} s")
