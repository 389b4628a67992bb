"""Real jobs on a real two-node Ray cluster on this machine, through the real CLI.

One cluster (ray.cluster_utils.Cluster: a head and a worker node, 2 CPUs each) is shared by
every test of this module. The test process connects to it as a second driver only to look
at what is left (actors, placement groups, free CPUs) after each job.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.backends import warm
from tests.backends.spark.spark_cluster import free
from tests.conftest import (
    BIN,
    TFDIST,
    alive,
    running_pid,
    start_hang_job,
    still_alive,
    summary,
    task_envs,
    tasks,
    tfdist,
)
from tests.examples.test_readme import DOCS, readme_runs, run_as_written

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

pytestmark = [pytest.mark.ray, pytest.mark.integration]

HERE = Path(__file__).resolve().parent
CPUS_PER_NODE = 2


#: The README's Ray address (its `--ray-address 127.0.0.1:6379` line runs here as written): the
#: module's head listens there when the port is free.
README_PORT = 6379


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    port = {"gcs_server_port": README_PORT} if free(README_PORT) else {}
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": CPUS_PER_NODE, "include_dashboard": False, **port},
    )
    session = c.head_node.get_session_dir_path()
    try:
        c.add_node(num_cpus=CPUS_PER_NODE)
        c.wait_for_nodes()
        c.connect(namespace="tfdist-tests")
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        shutil.rmtree(session, ignore_errors=True)  # Ray leaves its session directory behind


def leftovers(wait: float = 20.0) -> dict:
    """Live tfdist actors, unremoved placement groups, CPUs not free (waits for them to go)."""
    from ray._private.state import actors

    deadline = time.monotonic() + wait
    while True:
        live = [a["Name"] for a in actors().values() if a.get("State") != "DEAD"]
        pgs = [p["name"] for p in ray.util.placement_group_table().values() if p["state"] != "REMOVED"]
        busy = 2 * CPUS_PER_NODE - ray.available_resources().get("CPU", 0)
        found = {k: v for k, v in {"actors": live, "placement_groups": pgs, "busy_cpus": busy}.items() if v}
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def ray_run(cluster, tmp_path: Path, *args: str, env: dict | None = None, timeout: float = 200):
    proc = tfdist("run", "--quiet", "--json", "--backend", "ray", "--ray-address", cluster.address,
                  "--runs-dir", str(tmp_path / "runs"), *args, cwd=tmp_path, env=env, timeout=timeout)
    return proc


def nodes_used(result: dict) -> set[str]:
    placement = json.loads((Path(result["run_dir"]) / "ray_placement.json").read_text())
    return {info["node_id"] for info in placement["tasks"].values()}


def test_the_readme_s_ray_command_runs_as_written_mwms_across_nodes(cluster, tmp_path: Path) -> None:
    """The README's `--ray-address 127.0.0.1:6379` line, as written, on this cluster
    (tests/examples/test_readme.py runs the others): the MWMS example (a chief, two workers)
    trains spread over both nodes, every task succeeds with its log, nothing is left. Where
    6379 was taken, the same job at the module's address (the README's line then unproven)."""
    (argv,) = readme_runs("ray")
    at = argv.index("--ray-address") + 1
    if not cluster.address.endswith(f":{README_PORT}"):
        argv = [*argv[:at], cluster.address, *argv[at + 1:]]

    def check(run_dir: Path) -> None:
        result = json.loads((run_dir / "summary.json").read_text())
        assert result["state"] == "succeeded", result
        assert result["metrics"]["accuracy"] > 0.6, result["metrics"]  # chance is 0.1
        assert {t["state"] for t in result["tasks"]} == {"succeeded"}
        assert len(nodes_used(result)) == 2  # spread over both nodes
        logs = run_dir / "logs"
        assert sorted(p.name for p in logs.iterdir()) == ["chief-0.log", "worker-0.log", "worker-1.log"]
        assert "Epoch 3/3" in (logs / "worker-1.log").read_text()  # every worker trained to the end
        for name in ("chief-0", "worker-0", "worker-1"):  # started through tfdist.node.leave_program
            assert f"tfdist: {name} left with its peers" in (logs / f"{name}.log").read_text(), name

    run_as_written(argv, tmp_path, check=check)
    assert leftovers() == {}
    if not cluster.address.endswith(f":{README_PORT}"):
        pytest.skip(f"port {README_PORT} was taken: the job ran at the module's head, {cluster.address}")


def test_the_ray_page_s_auto_command_runs_as_written(cluster, tmp_path: Path) -> None:
    """docs/ray.md's `--ray-address auto` line, as written, on this cluster: `auto` is Ray's
    own lookup of the cluster started on this machine. Ray reads RAY_ADDRESS first, then the
    address the last head started here wrote under /tmp/ray; other test groups start Ray
    heads here too, so this run names the module's head the first way (the second is Ray's,
    and the README's line above runs at an explicit address)."""
    (argv,) = readme_runs("ray", page=DOCS / "ray.md")
    assert argv[argv.index("--ray-address") + 1] == "auto"

    def check(run_dir: Path) -> None:
        result = json.loads((run_dir / "summary.json").read_text())
        assert result["state"] == "succeeded", result
        assert {t["state"] for t in result["tasks"]} == {"succeeded"}
        assert len(nodes_used(result)) == 2  # the module's two nodes: this cluster, not another

    run_as_written(argv, tmp_path, env={"RAY_ADDRESS": cluster.address}, check=check)
    assert leftovers() == {}


def test_pss_across_nodes_ps_torn_down(cluster, tmp_path: Path) -> None:
    proc = ray_run(cluster, tmp_path, "--chief", "--workers", "2", "--ps", "1", "--name", "pss", "--",
                   "python", str(BIN / "train.py"), "--epochs", "1", "--steps", "20")
    result = summary(proc)
    assert proc.returncode == 0, result
    t = tasks(result)
    assert t["chief-0"]["state"] == "succeeded"
    assert t["ps-0"]["state"] == "stopped" and t["ps-0"]["exit_code"] == -15
    assert t["worker-0"]["state"] == "stopped" and t["worker-1"]["state"] == "stopped"
    assert result["metrics"]["accuracy"] > 0.3
    assert len(nodes_used(result)) == 2
    assert leftovers() == {}



SHOW = """
import json, os, sys
keys = ["TF_CONFIG", "TFDIST_TASK", "TFDIST_RUN_DIR", "TF_USE_LEGACY_KERAS", "CUDA_VISIBLE_DEVICES",
        "TF_GRPC_REUSE_PORT", "EXTRA"]
print("ENV " + json.dumps({**{k: os.environ.get(k) for k in keys}, "cwd": os.getcwd(),
      "files": sorted(os.listdir(".")), "data": open("data.txt").read(), "python": sys.executable}))
"""


def test_tf_config_env_and_working_dir_reach_every_task(cluster, tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    (proj / ".venv").mkdir(parents=True)
    (proj / ".venv" / "big.bin").write_bytes(b"x" * 1000)  # never shipped
    (proj / "show.py").write_text(SHOW)
    (proj / "data.txt").write_text("shipped")
    job = proj / "job.yaml"
    job.write_text("name: envs\ncommand: [python, show.py]\nenv: {EXTRA: '1'}\n"
                   "roles: {chief: 1, worker: 2, evaluator: 1}\n")
    proc = ray_run(cluster, tmp_path, str(job))
    result = summary(proc)
    assert proc.returncode == 0, result
    envs = task_envs(result["run_dir"])
    assert set(envs) == {"chief-0", "worker-0", "worker-1", "evaluator-0"}
    w1 = json.loads(envs["worker-1"]["TF_CONFIG"])
    assert w1["task"] == {"type": "worker", "index": 1}
    assert w1["cluster"]["worker"][1] == tasks(result)["worker-1"]["address"]
    ev = json.loads(envs["evaluator-0"]["TF_CONFIG"])
    assert ev["task"]["type"] == "evaluator" and "evaluator" not in ev["cluster"]
    for env in envs.values():
        assert env["EXTRA"] == "1" and env["TF_USE_LEGACY_KERAS"] == "1"
        assert env["TF_GRPC_REUSE_PORT"] == "1" and env["CUDA_VISIBLE_DEVICES"] == ""
        assert env["data"] == "shipped" and env["cwd"] != str(proj)  # Ray's copy of the workdir
        assert ".venv" not in env["files"] and "show.py" in env["files"]
        assert env["python"].startswith(str(Path(sys.executable).parent))  # `python` = the nodes' Python

@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--workers", "5"], "it needs 5 CPU in all but the cluster has only 4 CPU"),
        (["--workers", "3", "--set", "ray.placement=strict-spread"], "only 2 nodes can hold one"),
        (["--workers", "1", "--set", "roles.worker.resources.cpus=3"], "no node has that much"),
    ],
)
def test_gang_too_large_is_refused_at_once(cluster, tmp_path: Path, args: list[str], said: str) -> None:
    began = time.monotonic()
    proc = ray_run(cluster, tmp_path, *args, "--", "python", str(BIN / "ok.py"), timeout=60)
    took = time.monotonic() - began
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot fit the job" in lines[0], proc.stderr
    assert said in lines[0] and "2 node(s)" in lines[0]
    assert took < 45  # no waiting for resources that will never come
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert leftovers(wait=2) == {}


def test_killed_task_is_restarted_by_policy_and_busy_cluster_times_out(cluster, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    job = subprocess.Popen(
        [*TFDIST, "run", "--quiet", "--json", "--backend", "ray", "--ray-address", cluster.address,
         "--runs-dir", str(runs), "--workers", "2", "--name", "killme",
         "--set", "restart.policy=on-failure", "--set", "restart.backoff_seconds=0",
         "--", sys.executable, str(HERE / "sleep_once.py")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        pid = running_pid(job, runs, "killme", "worker-1", timeout=120)

        # While the job holds 2 of the 4 CPUs, a 3-task gang fits the cluster but not now:
        # it waits only TFDIST_RAY_PLACEMENT_TIMEOUT seconds, then says what is free.
        busy = ray_run(cluster, tmp_path, "--workers", "3", "--", "python", str(BIN / "ok.py"),
                       env={"TFDIST_RAY_PLACEMENT_TIMEOUT": "3"}, timeout=90)
        assert busy.returncode == 1, busy.stderr
        assert "did not place the job within 3s" in busy.stderr and "free now: 2 CPU" in busy.stderr

        os.kill(pid, signal.SIGKILL)  # the task runs on this machine: kill it like an OOM killer
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    result = json.loads(out)
    assert job.returncode == 0, (result, err[-2000:])
    assert result["restarts_used"] == 1
    t = tasks(result)
    assert t["worker-1"]["restarts"] == 1 and t["worker-1"]["state"] == "succeeded"
    assert t["worker-0"]["restarts"] == 1  # all-reduce: the whole group restarts
    log = (Path(result["run_dir"]) / "logs" / "worker-1.log").read_text()
    assert "restart 0" in log and "restart 1" in log
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert leftovers() == {}


def test_no_cluster_at_the_address_is_one_clear_line(tmp_path: Path) -> None:
    began = time.monotonic()
    proc = tfdist("run", "--backend", "ray", "--ray-address", "127.0.0.1:9", "--runs-dir",
                  str(tmp_path / "runs"), "--workers", "1", "--", "python", str(BIN / "ok.py"),
                  cwd=tmp_path, timeout=60)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no Ray cluster answers there" in lines[0], proc.stderr
    assert time.monotonic() - began < 30


def test_the_keras_tutorial_leaves_together_on_ray(cluster, tmp_path: Path) -> None:
    """TensorFlow's multi-worker Keras tutorial, unchanged (tests/examples/peers: code nobody
    here wrote), on Ray: the actors start it through tfdist.node.leave_program (its text
    travels with the task), so both workers leave with their peers and exit by themselves, 0,
    none stopped at the drain and none ending more than the drain after the other."""
    from tests.examples.test_peers import JOB, assert_left_together

    job = tmp_path / "tutorial.yaml"
    job.write_text(JOB)
    done = subprocess.run(
        [*TFDIST, "run", "--quiet", "--json", "--backend", "ray", "--ray-address", cluster.address,
         "--runs-dir", str(tmp_path / "runs"), str(job)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert_left_together(json.loads(done.stdout))
    assert leftovers() == {}


def test_node_death_is_reported_and_recovered_by_policy(cluster, tmp_path: Path) -> None:
    """A third node joins, gets one of three tasks (spread), and dies: the task ends with
    'node died', and the restart policy brings it back in a new actor on a live node."""
    doomed = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    runs = tmp_path / "runs"
    job = subprocess.Popen(
        [*TFDIST, "run", "--quiet", "--json", "--backend", "ray", "--ray-address", cluster.address,
         "--runs-dir", str(runs), "--workers", "3", "--name", "doomed",
         "--set", "restart.policy=on-failure", "--set", "restart.backoff_seconds=0",
         "--", sys.executable, str(HERE / "sleep_once.py")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        victim = run_dir = None
        deadline = time.monotonic() + 120
        while victim is None and time.monotonic() < deadline and job.poll() is None:
            for run_dir in runs.glob("doomed-*"):
                if not (run_dir / "events.jsonl").exists():
                    continue
                events = (run_dir / "events.jsonl").read_text().split("\n")[:-1]  # whole lines
                running = {r["task"]: r["pid"] for r in map(json.loads, events) if r["state"] == "running"}
                if len(running) == 3:
                    placement = json.loads((run_dir / "ray_placement.json").read_text())["tasks"]
                    victim = next(n for n, i in placement.items() if i["node_id"] == doomed.node_id)
            time.sleep(0.2)
        assert victim and run_dir, f"the job never ran on the new node: {job.poll()}"
        began = time.monotonic()
        cluster.remove_node(doomed, allow_graceful=False)
        out, err = job.communicate(timeout=150)
        took = time.monotonic() - began
    finally:
        if job.poll() is None:
            job.kill()
    result = json.loads(out)
    assert job.returncode == 0, (result, err[-2000:])
    assert result["restarts_used"] == 1 and tasks(result)[victim]["restarts"] == 1
    rows = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    ends = [r for r in rows if r["task"] == victim and r["attempt"] == 0 and r["state"] == "failed"]
    assert ends and ends[0]["reason"].startswith("node died: host "), ends
    assert victim in ends[0]["reason"]
    print(f"node death noticed, task restarted elsewhere and job done in {took:.1f}s")
    gone_by = time.monotonic() + 10  # the task died with its node's actor (PR_SET_PDEATHSIG)
    while alive(running[victim]) and time.monotonic() < gone_by:
        time.sleep(0.2)
    assert not alive(running[victim])
    assert leftovers() == {}

def test_ctrl_c_stops_every_task_and_grandchild(cluster, tmp_path: Path) -> None:
    cli, pids = start_hang_job(["--backend", "ray", "--ray-address", cluster.address, "--runs-dir", str(tmp_path / "runs")],
                               tmp_path / "runs", "ctrlc", tmp_path, 120)
    cli.send_signal(signal.SIGINT)
    try:
        cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 130
    assert still_alive(pids, wait=10) == []
    assert leftovers() == {}


def test_sigkilled_tfdist_leaves_nothing_running(cluster, tmp_path: Path) -> None:
    """No chance to clean up: Ray kills the dead driver's actors, their tasks die with them
    (PR_SET_PDEATHSIG) and each actor's guardian kills the tasks' process groups."""
    cli, pids = start_hang_job(["--backend", "ray", "--ray-address", cluster.address, "--runs-dir", str(tmp_path / "runs")],
                               tmp_path / "runs", "sigkill", tmp_path, 120)
    cli.kill()
    cli.communicate(timeout=30)
    left = still_alive(pids, wait=30)
    assert left == [], _ps(left) + f" (tasks and grandchildren: {pids})"
    assert leftovers(wait=30) == {}


def _ps(pids: list[int]) -> str:
    out = subprocess.run(["ps", "-o", "pid,ppid,pgid,etime,cmd", "-p", ",".join(map(str, pids))],
                         capture_output=True, text=True)
    return out.stdout


def test_submit_list_and_stop_a_detached_ray_job(cluster, tmp_path: Path) -> None:
    sub = tfdist("submit", "--backend", "ray", "--ray-address", cluster.address, "--runs-dir",
                 str(tmp_path / "runs"), "--workers", "2", "--name", "detached", "--",
                 sys.executable, str(BIN / "hang.py"), cwd=tmp_path, timeout=60)
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.split()[-1]
    pids: list[int] = []
    deadline = time.monotonic() + 120
    while len(pids) < 4 and time.monotonic() < deadline:
        logs = tfdist("logs", job_id, cwd=tmp_path, timeout=30).stdout
        pids = [int(p) for pair in re.findall(r"pid (\d+) child (\d+)", logs) for p in pair]
        time.sleep(0.5)
    assert len(pids) == 4, logs
    listed = json.loads(tfdist("list", "--json", cwd=tmp_path, timeout=30).stdout)
    assert [(j["id"], j["state"]) for j in listed] == [(job_id, "running")]
    stopped = tfdist("stop", job_id, cwd=tmp_path, timeout=90)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert still_alive(pids, wait=5) == []
    assert leftovers() == {}


@pytest.mark.timeout(600)
def test_a_killed_task_restarts_in_its_actor_s_warm_spare(cluster, tmp_path: Path) -> None:
    """restart.warm_spares on Ray (tests/backends/warm.py): the task's actor holds the spare,
    the killed task's restart is the spare, its next spare is made; a SIGKILLed tfdist leaves
    no spare, no actor and no placement group."""
    args = ["--backend", "ray", "--ray-address", cluster.address, "--runs-dir", str(tmp_path / "runs")]
    spares = warm.kill_the_task_then_tfdist(args, tmp_path / "runs", "ray-warm", tmp_path)
    assert still_alive(spares, wait=60) == []
    assert leftovers(wait=30) == {}
