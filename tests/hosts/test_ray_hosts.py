"""The Ray backend across hosts of the test bed: a head on h0 (no CPUs; tfdist runs there, as
a Ray driver must run on a node), nodes of 3 CPUs on h1 and h2, each its own network stack
and hostname, ``placement: spread``.

The same checks as for Spark: each task's TF_CONFIG names its own host's address and the
peers reach it (the MWMS example trains), the working directory and the job's env arrive on
the nodes, and a host that dies mid-training moves its tasks to the host left."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, read_jsonl
from tests.hosts.clusters import RayOnHosts, finish, run_tfdist
from tests.hosts.test_spark_hosts import SHOW, job_processes

pytest.importorskip("ray", reason="the ray extra is not installed")

pytestmark = [pytest.mark.hosts, pytest.mark.ray, pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def ray_hosts(host_bed):
    cluster = RayOnHosts(host_bed, host_bed.host("h0"), [host_bed.host("h1"), host_bed.host("h2")], cpus=3).start()
    try:
        yield cluster
    finally:
        cluster.stop()
        host_bed.restore()


@pytest.fixture
def project(host_bed) -> Path:
    """The digits examples on the head host's own disk (h0's workdir)."""
    proj = host_bed.host("h0").workdir / "digits"
    shutil.rmtree(proj, ignore_errors=True)
    shutil.copytree(ROOT / "examples" / "digits", proj, ignore=shutil.ignore_patterns("__pycache__"))
    (proj / "show.py").write_text(SHOW)
    (proj / "data.txt").write_text("shipped from h0")
    return proj


def start(bed, cluster, proj: Path, job: str, *args: str, name: str):
    return run_tfdist(bed, bed.host("h0"), ["run", "--json", *cluster.args(), "--runs-dir", str(proj.parent / "runs"),
                                            str(proj / job), "--set", f"name={name}", "--set", "ray.placement=spread",
                                            *args], cwd=proj.parent)


def placement(result: dict) -> dict[str, dict]:
    return json.loads((Path(result["run_dir"]) / "ray_placement.json").read_text())["tasks"]


def assert_on_own_hosts(bed, result: dict, used: set[str]) -> None:
    where = placement(result)
    for task in result["tasks"]:
        if task["address"]:
            assert task["address"].split(":")[0] == bed.host(where[task["name"]]["hostname"]).address, task
    assert {w["hostname"] for w in where.values()} == used


def assert_nothing_left(name: str) -> None:
    deadline = time.monotonic() + 30
    while job_processes(name) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert job_processes(name) == []


def test_mwms_trains_spread_over_hosts_with_its_workdir_and_env(host_bed, ray_hosts, project: Path) -> None:
    """The MWMS example with ``placement: spread``: tasks on h1 and h2, each one's TF_CONFIG
    entry its own host's address, reached by its peers (they train), the job's env and its
    working directory (Ray's copy on the node) there. That is what differs between hosts;
    the PSS example adds roles, not hosts (it runs on one Ray host in tests/backends/ray
    and across hosts on Spark, here)."""
    mwms = start(host_bed, ray_hosts, project, "mwms.yaml", "--set", "env.EXTRA=per-job",
                 "--set", 'command=[sh, -c, "python show.py && exec python train_fit.py --epochs 1"]',
                 name="ray-mwms")
    rc, result, err = finish(mwms, 500)
    assert rc == 0, (result, err[-3000:])
    assert result["metrics"]["val_accuracy"] > 0.3
    assert_on_own_hosts(host_bed, result, {"h1", "h2"})
    for task, text in {p.stem: p.read_text() for p in (Path(result["run_dir"]) / "logs").glob("*.log")}.items():
        env = json.loads(next(ln for ln in text.splitlines() if ln.startswith("ENV "))[4:])
        config = json.loads(env["TF_CONFIG"])
        role, index = task.rsplit("-", 1)
        assert config["cluster"][role][int(index)].split(":")[0] == host_bed.host(env["hostname"]).address
        assert env["EXTRA"] == "per-job" and env["data"] == "shipped from h0"
        assert env["cwd"].startswith(str(host_bed.host(env["hostname"]).workdir / "ray"))  # the node's copy
    assert_nothing_left("ray-mwms")


def test_host_crash_mid_mwms_moves_the_tasks_to_the_host_left(host_bed, ray_hosts, project: Path) -> None:
    """h2 dies while the MWMS example trains: tfdist names the host and its tasks in one
    line, restarts the group with the lost tasks' bundles on h1 and a TF_CONFIG naming their
    new addresses, and the job finishes. Before the fix a moved bundle was final ("addresses
    cannot change") and the job failed."""
    h1, h2 = host_bed.host("h1"), host_bed.host("h2")
    runs = project.parent / "runs"
    proc = start(host_bed, ray_hosts, project, "mwms.yaml", "--set", 'command=[python, train_fit.py, --epochs, "3"]',
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
        on_h2 = sorted(n for n, i in placement({"run_dir": run_dir}).items() if i["hostname"] == "h2")
        assert on_h2, "no task was placed on h2"
        assert host_bed.crash(h2)
        rc, result, err = finish(proc, 500)
    finally:
        ray_hosts.start_node(h2)
    assert rc == 0, (result, err[-4000:])
    # one line names the lost host and its tasks (the restart line itself may name a peer
    # whose collective broke first, and then the first restart is spent on the old placement)
    lost = [ln for ln in err.splitlines() if " lost: " in ln]
    assert any(f"host h2 ({h2.address})" in ln and all(t in ln for t in on_h2) for ln in lost), err[-3000:]
    assert 1 <= result["restarts_used"] <= 2
    assert {t["state"] for t in result["tasks"]} == {"succeeded"}
    assert {t["address"].split(":")[0] for t in result["tasks"]} == {h1.address}
    assert_on_own_hosts(host_bed, result, {"h1"})
    assert_nothing_left("ray-crash")
    ray_hosts.wait_nodes(3)


