"""The Ray backend across hosts of the test bed: a head on h0 (no CPUs; tfdist runs there, as
a Ray driver must run on a node), nodes of 3 CPUs on h1 and h2, each its own network stack
and hostname, ``placement: spread``.

The same checks as for Spark: each task's TF_CONFIG names its own host's address and the
peers reach it (the MWMS example trains), the working directory and the job's env arrive on
the nodes, and a host that dies mid-training moves its tasks to the host left."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import read_jsonl
from tests.hosts.clusters import (
    RayOnHosts,
    Watched,
    digits_project,
    finish,
    job_processes,
    placement,
    run_tfdist,
    running_again,
    shown_where_run,
)

pytest.importorskip("ray", reason="the ray extra is not installed")

pytestmark = [pytest.mark.hosts, pytest.mark.ray, pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def ray_hosts(host_bed):
    # Ray 2.60 turns token authentication on by itself where RAY_AUTH_MODE is unset and a
    # ~/.ray/auth_token exists, which any local ray.init() on this machine writes (the hosts
    # share the home directory): then the head wanted a token the nodes' `ray start` did not
    # send ("InvalidAuthToken"), and no node joined. The cluster, its nodes and tfdist's
    # drivers say the mode the bed runs in instead of leaving it to what the home holds.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_AUTH_MODE", "disabled")
        cluster = RayOnHosts(host_bed, host_bed.host("h0"), [host_bed.host("h1"), host_bed.host("h2")],
                             cpus=3).start()
        try:
            yield cluster
        finally:
            cluster.stop()
            host_bed.restore()


@pytest.fixture(autouse=True)
def _all_nodes(ray_hosts) -> None:
    """Every node up before each test. A test that takes a host's node away (a crash, a
    partition) leaves bringing it back to the test after, so the module's last test does
    not start a node again that only the teardown would stop."""
    ray_hosts.restore()


@pytest.fixture
def project(host_bed) -> Path:
    """The digits examples on the head host's own disk (h0's workdir)."""
    return digits_project(host_bed.host("h0"))


def start(bed, cluster, proj: Path, job: str, *args: str, name: str):
    return run_tfdist(bed, bed.host("h0"), ["run", "--json", *cluster.args(), "--runs-dir", str(proj.parent / "runs"),
                                            str(proj / job), "--set", f"name={name}", "--set", "ray.placement=spread",
                                            *args], cwd=proj.parent)



def assert_on_own_hosts(bed, result: dict, used: set[str]) -> None:
    where = placement(result, "ray")
    for task in result["tasks"]:
        if task["address"]:
            assert task["address"].split(":")[0] == bed.host(where[task["name"]]["hostname"]).address, task
    assert {w["hostname"] for w in where.values()} == used


def assert_nothing_left(name: str) -> None:
    deadline = time.monotonic() + 30
    while job_processes(name) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert job_processes(name) == []


def test_host_crash_mid_mwms_moves_the_tasks_to_the_host_left(host_bed, ray_hosts, project: Path) -> None:
    """The MWMS example with ``placement: spread`` starts with tasks on h1 and h2, each
    one's TF_CONFIG entry its own host's address, reached by its peers (they train), the
    job's env and its working directory (Ray's copy on the node) there: what differs between
    hosts (the PSS example adds roles, not hosts: it runs on one Ray host in
    tests/backends/ray and across hosts on Spark, here). Then h2 dies while it trains: tfdist
    names the host and its tasks in one line, restarts the group with the lost tasks'
    bundles on h1 and a TF_CONFIG naming their new addresses, and the job finishes. Before
    the fix a moved bundle was final ("addresses cannot change") and the job failed."""
    h1, h2 = host_bed.host("h1"), host_bed.host("h2")
    runs = project.parent / "runs"
    proc = start(host_bed, ray_hosts, project, "mwms.yaml", "--set", "env.EXTRA=per-job", "--set",
                 'command=[sh, -c, "python show.py && exec python train_fit.py --epochs 3"]',
                 "--set", "restart.policy=on-failure", "--set", "restart.max_restarts=3",
                 "--set", "restart.backoff_seconds=0", name="ray-crash")
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            if any(read_jsonl(p) for p in runs.glob("ray-crash-*/progress.jsonl")):
                break
            time.sleep(0.3)
        run_dir = next(runs.glob("ray-crash-*"), None)
        if run_dir is None or proc.poll() is not None:
            rc, result, err = finish(proc, 60)
            raise AssertionError(f"the job never trained: rc={rc}: {err[-2000:]}")
        on_h2 = sorted(n for n, i in placement({"run_dir": run_dir}, "ray").items() if i["hostname"] == "h2")
        assert on_h2, "no task was placed on h2"
        assert host_bed.crash(h2)
        rc, result, err = finish(proc, 500)
    finally:
        ray_hosts.start_node(h2)
    assert rc == 0, (result, err[-4000:])
    assert result["metrics"]["val_accuracy"] > 0.3  # chance is 0.1
    # what each attempt's tasks printed first (the logs keep every attempt's): the first
    # attempt on both hosts, the restart's on h1
    shown = shown_where_run(host_bed, result, "h0", "ray")  # the node's copy
    hosts_seen = {env["hostname"] for envs in shown.values() for env in envs}
    assert hosts_seen == {"h1", "h2"}
    # one line names the lost host and its tasks (the restart line itself may name a peer
    # whose collective broke first, and then the first restart is spent on the old placement)
    lost = [ln for ln in err.splitlines() if " lost: " in ln]
    assert any(f"host h2 ({h2.address})" in ln and all(t in ln for t in on_h2) for ln in lost), err[-3000:]
    assert 1 <= result["restarts_used"] <= 2
    assert {t["state"] for t in result["tasks"]} == {"succeeded"}
    assert {t["address"].split(":")[0] for t in result["tasks"]} == {h1.address}
    assert_on_own_hosts(host_bed, result, {"h1"})
    assert_nothing_left("ray-crash")




def test_partition_mid_mwms_restarts_on_the_host_left_and_the_healed_host_stays_out(
        host_bed, ray_hosts, project: Path) -> None:
    """h2's link goes down while the MWMS example trains. Nothing closes a cut host's
    connections: TensorFlow's coordination service fails the peers' collective within seconds,
    the policy restarts the group, and the stop of h2's task gets no answer. What bounds the
    wait is Ray's own: the GCS declares h2's node dead after its health checks fail
    (``health_check_failure_threshold`` x ``health_check_timeout_ms``, 5 x 10 s by default),
    kills its actors and re-places its bundles on h1. The restart's tasks start only then
    (before the fix they started on the old map while the moved task got the new one, and
    that attempt was lost: two restarts, not one), each with TF_CONFIG naming h1's addresses.
    Meanwhile h2's actor heard no poll for 30 s (actor.SILENCE_SECONDS) and killed its task, so
    nothing of the old attempt is left on h2 when the link comes back; the healed raylet
    learns it was declared dead and exits, and the job finishes on h1."""
    h1, h2 = host_bed.host("h1"), host_bed.host("h2")
    runs = project.parent / "runs"
    watched = Watched(start(host_bed, ray_hosts, project, "mwms.yaml", "--set",
                            'command=[python, train_fit.py, --epochs, "3"]', "--set", "restart.policy=on-failure",
                            "--set", "restart.max_restarts=5", "--set", "restart.backoff_seconds=0",
                            name="ray-cut"))
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and watched.proc.poll() is None:
            if any("epoch" in r for p in runs.glob("ray-cut-*/progress.jsonl") for r in read_jsonl(p)):
                break
            time.sleep(0.3)
        run_dir = next(runs.glob("ray-cut-*"), None)
        if run_dir is None or watched.proc.poll() is not None:
            rc, result, text = watched.wait(60)
            raise AssertionError(f"the job never trained: rc={rc}: {text[-2000:]}")
        on_h2 = sorted(n for n, i in placement({"run_dir": run_dir}, "ray").items() if i["hostname"] == "h2")
        assert on_h2, "no task was placed on h2"
        cut, cut_wall = time.monotonic(), time.time()
        host_bed.partition(h2)
        deadline = time.monotonic() + 400
        while watched.proc.poll() is None and time.monotonic() < deadline:
            again = running_again(run_dir)
            if again is not None and again > cut_wall:
                break
            time.sleep(0.5)
        left_on_h2 = set(job_processes("ray-cut")) & set(host_bed.pids(h2))
        host_bed.heal(h2)
        rc, result, text = watched.wait(420)
    finally:
        host_bed.heal(h2)
    said = "\n".join([ln for _, ln in watched.lines if ln.startswith("tfdist") or " lost: " in ln][-30:]
                     + (run_dir / "events.jsonl").read_text().splitlines())
    assert rc == 0, said
    assert not left_on_h2, f"the old attempt still ran on h2 when the link came back: {left_on_h2}"
    lost = [ln for _, ln in watched.lines if " lost: " in ln and f"host h2 ({h2.address})" in ln]
    assert lost and all(t in lost[0] for t in on_h2), said
    assert result["restarts_used"] == 1, said  # the first restart's group trained to the end
    assert {t["state"] for t in result["tasks"]} == {"succeeded"}
    assert {t["address"].split(":")[0] for t in result["tasks"]} == {h1.address}
    assert_on_own_hosts(host_bed, result, {"h1"})
    assert_nothing_left("ray-cut")
    named = watched.first(f"host h2 ({h2.address})", after=cut)
    print(f"cut -> h2 named lost {(named or cut) - cut:.1f} s; -> group running again "
          f"{(running_again(run_dir) or 0) - cut_wall:.1f} s")
    assert ray_hosts.wait_ended(h2), "h2's node, declared dead, ran on after the heal"
