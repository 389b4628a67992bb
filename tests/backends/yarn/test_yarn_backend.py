"""``--backend yarn`` on the real cluster of yarn/yarn.sh: one application per role (Hadoop's
distributed shell AM), one container per task with the role's resources, tfdist's agent in
each. Few jobs (each costs an AM and a container per task); each asserts all it can."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.backends.yarn.yarn_cluster import ROOT, Cluster, container_pids
from tests.conftest import BIN, TFDIST, read_jsonl, still_alive, tfdist

pytestmark = [pytest.mark.yarn, pytest.mark.integration]

EXAMPLE = ROOT / "examples" / "digits" / "mwms.yaml"


def yarn_args(tmp_path: Path, *more: str) -> list[str]:
    return ["--backend", "yarn", "--runs-dir", str(tmp_path / "runs"), *more]


def summary(proc: subprocess.CompletedProcess) -> dict:
    try:
        return json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON summary (rc={proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-3000:]}")


def test_mwms_example_one_container_per_task(yarn_env: Cluster, tmp_path: Path) -> None:
    proc = tfdist("run", "--quiet", "--json", str(EXAMPLE), *yarn_args(tmp_path), "--set", "yarn.queue=tfdist",
                  "--set", "roles.worker=1", "--set", 'command=[python, train_fit.py, --epochs, "1"]',
                  cwd=tmp_path, timeout=600)
    result = summary(proc)
    assert proc.returncode == 0, (result, proc.stderr[-2000:])
    assert {t["name"]: t["state"] for t in result["tasks"]} == {"chief-0": "succeeded", "worker-0": "succeeded"}
    assert result["metrics"]["accuracy"] > 0.3  # chance is 0.1
    run_dir = Path(result["run_dir"])
    placed = json.loads((run_dir / "yarn_placement.json").read_text())
    assert set(placed["applications"]) == {"chief", "worker"}
    for role, app_id in placed["applications"].items():
        app = yarn_env.get(f"/ws/v1/cluster/apps/{app_id}")["app"]
        assert (app["name"], app["queue"], app["state"], app["finalStatus"]) == \
            (f"tfdist-digits-mwms-{role}", "root.tfdist", "FINISHED", "SUCCEEDED")
        assert "tfdist-job-digits-mwms" in app["applicationTags"].split(",")
    for name, where in placed["tasks"].items():
        assert (run_dir / "yarn-logs" / where["container"] / "stderr").exists(), name
        assert result["tasks"][["chief-0", "worker-0"].index(name)]["address"] == f"{where['host']}:{where['port']}"


def test_roles_get_their_own_resources_a_killed_container_comes_back_and_sigkill_leaves_nothing(
        yarn_env: Cluster, tmp_path: Path) -> None:
    """A ps of 512 MB and two workers of 768 MB and 2 vcores, each its own container. worker-1's
    container is killed (every process in it): the distributed shell relaunches it in place,
    its new agent takes the same host and port, and the policy restarts the task there. Then
    tfdist is SIGKILLed: the agents see its connection drop, end their tasks and exit, so every
    application finishes and no task process is left."""
    job = tmp_path / "job.yaml"
    job.write_text(f"""
name: shapes
strategy: none
command: [{sys.executable}, {BIN / 'hang.py'}]
roles:
  ps: {{replicas: 1, resources: {{memory: 512Mi}}}}
  worker: {{replicas: 2, resources: {{memory: 768Mi, cpus: 2}}}}
restart: {{policy: on-failure, max_restarts: 2, backoff_seconds: 0}}
yarn: {{queue: tfdist}}
""")
    runs = tmp_path / "runs"
    cli = subprocess.Popen([*TFDIST, "run", "--quiet", str(job), *yarn_args(tmp_path)], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def running(task: str, attempt: int) -> bool:
            rows = [r for d in runs.glob("shapes-*") for r in read_jsonl(d / "events.jsonl")]
            return any(r["task"] == task and r["attempt"] == attempt and r["state"] == "running" for r in rows)

        deadline = time.monotonic() + 240
        while not all(running(t, 0) for t in ("ps-0", "worker-0", "worker-1")) and time.monotonic() < deadline:
            assert cli.poll() is None, cli.communicate()[1][-2000:]
            time.sleep(0.3)
        assert all(running(t, 0) for t in ("ps-0", "worker-0", "worker-1")), "the tasks did not all start"
        run_dir = next(runs.glob("shapes-*"))
        placed = json.loads((run_dir / "yarn_placement.json").read_text())
        shapes = {}
        for name, where in placed["tasks"].items():
            app_id = placed["applications"][name.split("-")[0]]
            app = yarn_env.get(f"/ws/v1/cluster/apps/{app_id}")["app"]
            assert app["queue"] == "root.tfdist" and app["state"] == "RUNNING", app
            attempt = yarn_env.get(f"/ws/v1/cluster/apps/{app_id}/appattempts")["appAttempts"]["appAttempt"][0]
            got = yarn_env.get(f"/ws/v1/cluster/apps/{app_id}/appattempts/{attempt['appAttemptId']}"
                               f"/containers/{where['container']}")
            shapes[name] = (got["allocatedMB"], got["allocatedVCores"])
        assert shapes == {"ps-0": (512, 1), "worker-0": (768, 2), "worker-1": (768, 2)}
        victim = placed["tasks"]["worker-1"]["container"]
        for pid in container_pids(victim):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 180
        while not running("worker-1", 1) and time.monotonic() < deadline:
            assert cli.poll() is None, cli.communicate()[1][-2000:]
            time.sleep(0.3)
        assert running("worker-1", 1), "worker-1 was not restarted"
        log = (run_dir / "logs" / "worker-1.log").read_text()
        assert "worker-1 lost: its YARN container ended" in log and "runs in a relaunched container" in log, log
        relaunched = json.loads((run_dir / "yarn_placement.json").read_text())["tasks"]["worker-1"]
        assert (relaunched["container"], relaunched["port"]) == (victim, placed["tasks"]["worker-1"]["port"])
        time.sleep(1)
        pids = [int(w) for log in run_dir.glob("logs/*.log") for line in log.read_text().splitlines()
                if " pid " in line and " child " in line for w in line.split()[2:5:2]]
        cli.send_signal(signal.SIGKILL)
        cli.communicate(timeout=30)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert still_alive(pids, wait=60) == []
    assert yarn_env.live_apps("tfdist-job-shapes", wait=90) == []
    for where in placed["tasks"].values():
        assert container_pids(where["container"]) == []


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
