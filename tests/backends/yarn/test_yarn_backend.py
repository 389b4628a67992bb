"""``--backend yarn`` on the real cluster of yarn/yarn.sh: one application per role (Hadoop's
distributed shell AM), one container per task with the role's resources, tfdist's agent in
each. Few jobs (each costs an AM and a container per task); each asserts all it can."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.backends import warm
from tests.backends.yarn.yarn_cluster import (
    ROOT,
    Cluster,
    KilledNodeManager,
    cluster_full,
    container_processes,
    nodemanager_at,
    pmem_check_on,
    task_process,
)
from tests.conftest import BIN, TFDIST, plain_and_summary, still_alive, summary, tfdist
from tfdist.backends.yarn import reaper, rest

pytestmark = [pytest.mark.yarn, pytest.mark.integration]


def yarn_args(tmp_path: Path, *more: str) -> list[str]:
    return ["--backend", "yarn", "--runs-dir", str(tmp_path / "runs"), *more]


@contextlib.contextmanager
def running(tmp_path: Path, job: Path) -> Iterator[subprocess.Popen]:
    """``tfdist run --json JOB`` on the test cluster, killed if still running on the way out."""
    proc = subprocess.Popen([*TFDIST, "run", "--quiet", "--json", str(job), *yarn_args(tmp_path)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def ended(proc: subprocess.Popen, timeout: float = 400) -> tuple[dict, str]:
    """The run's JSON summary and its stderr, once it ends (a failure when it printed none)."""
    out, err = proc.communicate(timeout=timeout)
    return (json.loads(out) if out.strip() else pytest.fail(f"no summary: {err[-3000:]}")), err


def test_what_can_never_fit_is_refused_before_submitting(yarn_env: Cluster, tmp_path: Path) -> None:
    cases = {
        "roles.worker.resources.memory=8Gi": "allocates at most 4096 MB",
        "roles.worker.resources.cpus=9": "allocates at most 4",
        "roles.worker.replicas=30": "holds at most",
        "yarn.queue=nosuch": "no leaf queue 'nosuch'",
        "yarn.queue=root": "no leaf queue 'root'",
    }
    before = len(yarn_env.apps("tfdist"))
    for setting, says in cases.items():
        proc = tfdist("run", *yarn_args(tmp_path), "--workers", "2", "--set", setting, "--",
                      "python", "-c", "pass", cwd=tmp_path, timeout=60)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], (setting, proc.stderr)
    assert len(yarn_env.apps("tfdist")) == before  # nothing was submitted
    assert not (tmp_path / "runs").exists()


def test_a_killed_agent_is_relaunched_in_place_and_the_job_restarts(yarn_env: Cluster, tmp_path: Path) -> None:
    """SIGKILL the agent of worker-1's container (as the OOM killer would): the NodeManager
    relaunches the container in place (it would not for exit 137, so the bootstrap reports 75),
    its new agent takes the same host and port, and tfdist restarts the group by policy."""
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: yarn-relaunch\n"
        "roles: {worker: 2}\n"
        "restart: {policy: on-failure, max_restarts: 2, backoff_seconds: 0}\n"
        "command: [python, -c, \"import os, time; time.sleep(12 if os.environ['TFDIST_RESTART_COUNT'] == '0' else 1)\"]\n"
        "yarn: {queue: tfdist}\n")
    with running(tmp_path, job) as proc:
        task = task_process("worker-1", time.monotonic() + 300, job="yarn-relaunch", cli=proc)
        agent = psutil.Process(task).ppid()
        assert "tfdist_boot.py" in " ".join(psutil.Process(agent).cmdline())
        os.kill(agent, signal.SIGKILL)
        result, err = ended(proc)
    assert proc.returncode == 0, (result.get("root_cause"), err[-2000:])
    tasks = {t["name"]: t for t in result["tasks"]}
    assert {n: t["state"] for n, t in tasks.items()} == {"worker-0": "succeeded", "worker-1": "succeeded"}
    assert tasks["worker-1"]["restarts"] >= 1
    log = (Path(result["run_dir"]) / "logs" / "worker-1.log").read_text()
    assert "runs in a relaunched container" in log
    assert not yarn_env.live_apps("tfdist-job-yarn-relaunch")


def _described(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            out.append(f"{pid}: {' '.join(psutil.Process(pid).cmdline())[:200]}")
    return out


def _registered(yarn_env: Cluster, tag: str, deadline: float) -> str:
    """The id of the job's own application (unmanaged) once its AM, tfdist, has registered."""
    while time.monotonic() < deadline:
        mine = [a for a in yarn_env.apps(tag)  # an earlier run's, ended, may be listed too
                if a["unmanagedApplication"] and a["state"] == "RUNNING" and a["trackingUrl"].startswith(yarn_env.url)]
        if mine:
            return str(mine[0]["id"])
        time.sleep(0.5)
    pytest.fail(f"the job's application never registered: {yarn_env.apps(tag)}")


def test_a_sigkilled_tfdist_leaves_no_application_and_no_process(yarn_env: Cluster, tmp_path: Path) -> None:
    """tfdist SIGKILLed mid-job (two workers each running a task with a grandchild): every
    application of the job ends (none left live at the RM; the job's own, whose AM was tfdist,
    killed by the run's reaper) and no process of its containers, task or grandchild, is left
    on the machine."""
    job = tmp_path / "job.yaml"
    job.write_text(f"name: yarn-sigkill\nroles: {{worker: 2}}\ncommand: [python, {BIN / 'hang.py'}]\n"
                   "yarn: {queue: tfdist}\n")
    proc = subprocess.Popen([*TFDIST, "run", "--quiet", str(job), *yarn_args(tmp_path)], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        tasks = [task_process(f"worker-{i}", deadline, job="yarn-sigkill", cli=proc) for i in (0, 1)]
        seen = {p.pid for t in tasks for p in [psutil.Process(t), *psutil.Process(t).children(recursive=True)]}
        apps = [a["id"] for a in yarn_env.apps("tfdist-job-yarn-sigkill")
                if a["state"] == "RUNNING" and not a["unmanagedApplication"]]
        assert len(apps) == 1 and container_processes(apps), apps  # one application (role worker), live
        job_app = _registered(yarn_env, "tfdist-job-yarn-sigkill", deadline)  # the job's, its AM tfdist
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not yarn_env.live_apps("tfdist-job-yarn-sigkill", wait=60)
    # nobody heartbeats for the job's application any more: the run's reaper killed it
    app = yarn_env.get(f"/ws/v1/cluster/apps/{job_app}")["app"]
    assert app["state"] == "KILLED" and reaper.DIAGNOSTICS in app["diagnostics"], app
    deadline = time.monotonic() + 120  # an AM's JVM may take long to exit on a loaded machine
    while (container_processes(apps) or [p for p in seen if psutil.pid_exists(p)]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not container_processes(apps), _described(container_processes(apps))
    assert not [p for p in seen if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_pss_example_ps_and_workers_in_their_own_containers(yarn_env: Cluster, tmp_path: Path) -> None:
    """The PSS example (chief, worker, ps; no evaluator, to fit the test queue with an AM per
    role) in the job's own queue (yarn.queue): it trains, each role is its own application
    in that queue and each task its own container, and the ps and the worker are stopped by
    tfdist once the chief's training ends. (The README's MWMS line, in the default queue,
    is tests/backends/yarn/test_readme_yarn.py's.)"""
    proc = tfdist("run", "--quiet", "--json", str(ROOT / "examples" / "digits" / "pss_fit.yaml"),
                  *yarn_args(tmp_path), "--set", "yarn.queue=tfdist", "--set", "roles.worker=1",
                  "--set", "roles.evaluator=0", "--set", 'command=[python, train_pss_fit.py, --epochs, "1"]',
                  cwd=tmp_path, timeout=600)
    result = summary(proc)
    assert proc.returncode == 0, (result.get("root_cause"), proc.stderr[-2000:])
    states = {t["name"]: (t["state"], t["exit_code"]) for t in result["tasks"]}
    assert states == {"chief-0": ("succeeded", 0), "worker-0": ("stopped", 143), "ps-0": ("stopped", 143)}
    assert result["metrics"]["accuracy"] > 0.3  # chance is 0.1
    placed = json.loads((Path(result["run_dir"]) / "yarn_placement.json").read_text())
    assert set(placed["applications"]) == {"chief", "worker", "ps"}
    assert len({t["container"] for t in placed["tasks"].values()}) == 3
    for role, app_id in placed["applications"].items():
        app = yarn_env.get(f"/ws/v1/cluster/apps/{app_id}")["app"]
        assert (app["name"], app["queue"], app["state"], app["finalStatus"]) == \
            (f"tfdist-digits-pss-fit-{role}", "root.tfdist", "FINISHED", "SUCCEEDED"), app
    job_app = yarn_env.get(f"/ws/v1/cluster/apps/{placed['job_application']}")["app"]
    assert (job_app["queue"], job_app["finalStatus"]) == ("root.tfdist", "SUCCEEDED"), job_app


def test_the_keras_tutorial_leaves_together_in_yarn_containers(yarn_env: Cluster, tmp_path: Path) -> None:
    """TensorFlow's multi-worker Keras tutorial, unchanged (tests/examples/peers: code nobody
    here wrote), a container per worker: the agents start it through tfdist.node.leave_program
    (read from the agent's zip), so both workers leave with their peers and exit by
    themselves, 0, none stopped at the drain and none ending more than the drain after the
    other."""
    from tests.examples.test_peers import JOB, assert_left_together

    job = tmp_path / "tutorial.yaml"
    job.write_text(JOB + "yarn: {queue: tfdist}\n")
    with running(tmp_path, job) as proc:
        result, err = ended(proc)
    assert proc.returncode == 0, (result.get("root_cause"), err[-2000:])
    assert_left_together(result)


def test_the_working_directory_is_shipped_to_the_containers(yarn_env: Cluster, tmp_path: Path) -> None:
    """The job's workdir exists only on the submitting side (removed once the applications
    are submitted): each task starts in the container's unpacked copy, with its files."""
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "words.txt").write_text("shipped words\n")
    (project / "show.py").write_text(
        "import os, sys\n"
        "print('cwd', os.getcwd(), 'original', os.path.exists(sys.argv[1]), flush=True)\n"
        "print('data', open('data/words.txt').read().strip(), flush=True)\n")
    (project / "job.yaml").write_text(
        f"name: yarn-workdir\nroles: {{worker: 2}}\ncommand: [python, show.py, {project}]\n"
        "yarn: {queue: tfdist}\n")
    with running(tmp_path, project / "job.yaml") as proc:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "runs").glob("*/yarn_placement.json")):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no yarn_placement.json (tfdist exit {proc.poll()}): {proc.stderr.read()[-2000:]}")
            time.sleep(0.1)
        shutil.rmtree(project)  # the applications are submitted; no task has started yet
        result, err = ended(proc)
    assert proc.returncode == 0, (result.get("root_cause"), err[-2000:])
    for name in ("worker-0", "worker-1"):
        log = (Path(result["run_dir"]) / "logs" / f"{name}.log").read_text()
        assert "data shipped words" in log, log
        cwd = next(line.split()[1] for line in log.splitlines() if line.startswith("cwd "))
        assert cwd.endswith("/tfdist-workdir") and "original False" in log, log


@pytest.mark.restarts_cluster
def test_a_lost_nodemanager_moves_its_task_to_the_node_left(yarn_env: Cluster, tmp_path: Path) -> None:
    """A worker's NodeManager SIGKILLed (a lost node; the test cluster marks it LOST after
    15 s without heartbeats; its containers' processes outlive it here): tfdist names the
    node and the task on it in one line and ends that task's agent; the distributed shell
    gets a replacement container on the NodeManager left, whose agent takes the task at a
    new port; the policy's restart starts both with a TF_CONFIG naming it, and the job
    succeeds. Nothing of the job is left. (Before, the job failed naming the node.) The
    NodeManager is started again after."""
    job = tmp_path / "job.yaml"
    job.write_text("name: yarn-lost-node\nroles: {worker: 2}\n"
                   "command: [python, -c, \"import os, time; time.sleep(300 if os.environ['TFDIST_RESTART_COUNT'] == '0' else 1)\"]\n"
                   "restart: {policy: on-failure, max_restarts: 2, backoff_seconds: 0}\nyarn: {queue: tfdist}\n")
    proc = subprocess.Popen([*TFDIST, "run", "--json", str(job), *yarn_args(tmp_path)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    try:
        task_process("worker-1", time.monotonic() + 300, job="yarn-lost-node", cli=proc)
        (placed,) = (tmp_path / "runs").glob("*/yarn_placement.json")
        record = json.loads(placed.read_text())
        apps = list(record["applications"].values())
        attempts = yarn_env.get(f"/ws/v1/cluster/apps/{apps[0]}/appattempts")["appAttempts"]["appAttempt"]
        # a worker away from the AM's node, when there is one: the application lives on and
        # its AM asks for the replacement (else a new AM attempt starts both containers anew)
        away = [n for n in ("worker-1", "worker-0")
                if record["tasks"][n]["node_http"] != attempts[-1]["nodeHttpAddress"]]
        name = (away or ["worker-1"])[0]
        where = record["tasks"][name]
        node = where["node"]  # the RM's node id, NM_HOST:NM_PORT
        killed = KilledNodeManager(nodemanager_at(where["node_http"]))
        out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if killed is not None:
            killed.restart(yarn_env)
    plain, result = plain_and_summary(out, err)
    assert proc.returncode == 0, (result.get("root_cause"), out[-3000:], err[-2000:])
    line = next((ln for ln in plain.splitlines() if f"node {node} on host" in ln and " is lost " in ln), None)
    assert line is not None and name in line, plain[-3000:]
    assert {t["name"]: t["state"] for t in result["tasks"]} == {"worker-0": "succeeded", "worker-1": "succeeded"}
    log = (Path(result["run_dir"]) / "logs" / f"{name}.log").read_text()
    assert "moved to container" in log, log
    moved = {t["name"]: t["address"] for t in result["tasks"]}[name]
    assert moved != f"{where['host']}:{where['port']}", moved
    assert not yarn_env.live_apps("tfdist-job-yarn-lost-node", wait=30)
    deadline = time.monotonic() + 120
    while container_processes(apps) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not container_processes(apps), _described(container_processes(apps))


@pytest.mark.timeout(600)
def test_a_killed_task_restarts_in_its_agent_s_warm_spare(yarn_env: Cluster, tmp_path: Path) -> None:
    """restart.warm_spares on YARN (tests/backends/warm.py): the container's agent holds the
    spare, the killed task's restart is the spare, its next spare is made; a SIGKILLed tfdist
    leaves no spare and no live application."""
    args = yarn_args(tmp_path, "--set", "yarn.queue=tfdist")
    spares = warm.kill_the_task_then_tfdist(args, tmp_path / "runs", "yarn-warm", tmp_path)
    assert not yarn_env.live_apps("tfdist-job-yarn-warm", wait=60)
    assert still_alive(spares, wait=60) == []


def _submitted(proc: subprocess.Popen, runs: Path, timeout: float) -> dict:
    """The run's yarn_placement.json, once tfdist has submitted its applications."""
    deadline = time.monotonic() + timeout
    while not (placed := list(runs.glob("*/yarn_placement.json"))):
        if proc.poll() is not None:
            pytest.fail(f"tfdist ended (exit {proc.returncode}) before submitting: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"tfdist submitted nothing within {timeout:g}s")
        time.sleep(0.1)
    return dict(json.loads(placed[0].read_text()))


def test_a_sigkilled_tfdist_s_queued_application_is_killed_by_its_reaper(yarn_env: Cluster, tmp_path: Path) -> None:
    """tfdist SIGKILLed while its application is still ACCEPTED (every vcore of the cluster
    is held: its AM waits for a container, and no agent exists that could notice): the
    run's reaper kills it through the RM, records it, and exits; the other applications
    are left alone. Without the reaper the application stays ACCEPTED for as long as the
    cluster is full (this test then fails at the first assertion after the kill)."""
    job = tmp_path / "job.yaml"
    job.write_text(f"name: yarn-queued\nroles: {{worker: 1}}\ncommand: [python, {BIN / 'hang.py'}]\n"
                   "yarn: {queue: tfdist}\n")
    with cluster_full(yarn_env) as holders:
        proc = subprocess.Popen([*TFDIST, "run", "--quiet", str(job), *yarn_args(tmp_path)], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        tag = ""
        try:
            app_id = _submitted(proc, tmp_path / "runs", 120)["applications"]["worker"]
            app = yarn_env.get(f"/ws/v1/cluster/apps/{app_id}")["app"]
            assert app["state"] == "ACCEPTED", app
            (tag,) = [t for t in app["applicationTags"].split(",") if t.startswith("tfdist-run-")]
            reapers = [p.pid for p in psutil.process_iter(["cmdline"]) if tag in (p.info["cmdline"] or [])]
            assert len(reapers) == 1, reapers  # started before the submission, waiting
            proc.kill()
            proc.wait(timeout=30)
            assert not yarn_env.live_apps(tag, wait=30)  # gone while the cluster is still full
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            rm = rest.ResourceManager.from_environ(yarn_env.env)
            for left in rm.apps(tag) if tag else []:  # a failed run leaves no queued application
                rm.kill(str(left["id"]))
        app = yarn_env.get(f"/ws/v1/cluster/apps/{app_id}")["app"]
        assert app["state"] == "KILLED" and reaper.DIAGNOSTICS in app["diagnostics"], app
        assert [a["state"] for a in yarn_env.apps("tfdist-test-holder") if a["id"] in holders] == \
            ["ACCEPTED"] * len(holders)
        assert still_alive(reapers, wait=30) == []
    (log,) = (tmp_path / "runs").glob("*/yarn-reaper.log")
    assert f"killed {app_id} through the ResourceManager" in log.read_text(), log.read_text()


@pytest.mark.restarts_cluster
def test_a_container_killed_for_memory_has_the_memory_root_cause(pmem_checked: Cluster, tmp_path: Path) -> None:
    """A task filling memory past its role's resources.memory (512Mi): YARN's NodeManager
    kills its container (physical-memory check, exit status -104) and the job fails at once
    with the root cause a local cgroup's kill gets, naming the limit and parameter servers.
    The check is on for this test only (``pmem_checked`` restarts the NodeManagers)."""
    assert pmem_check_on()
    (tmp_path / "eat.py").write_text("import time\nb = []\nfor _ in range(60):\n"
                                     "    b.append(bytearray(b'x') * (50 * 2**20))\n    time.sleep(0.2)\n")
    job = tmp_path / "job.yaml"
    job.write_text("name: yarn-oom\nroles:\n  worker: {replicas: 1, resources: {memory: 512Mi}}\n"
                   "command: [python, eat.py]\nyarn: {queue: tfdist}\n")
    proc = tfdist("run", "--quiet", "--json", str(job), *yarn_args(tmp_path), cwd=tmp_path, timeout=300)
    result = summary(proc)
    assert proc.returncode == 1, (result, proc.stderr[-2000:])
    cause = json.dumps(result["root_cause"])
    assert "killed for memory: over its 512 MiB limit (resources.memory)" in cause, cause
    assert "parameter servers" in cause and "exit status -104" in cause, cause
    assert not pmem_checked.live_apps("tfdist-job-yarn-oom")
