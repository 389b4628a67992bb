"""Spark on YARN through the Spark backend, on the real cluster of yarn/yarn.sh.

Each job here is one Spark session on YARN (the costly part: a driver, an AM container,
executor containers), so the tests keep to two jobs and assert all they can on each. The
cluster is shared by the session; what is left after a job is read from the RM's REST API
(applications by tag) and from the process table.
"""

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
from tests.spark.spark_cluster import missing

pytestmark = [pytest.mark.yarn, pytest.mark.spark, pytest.mark.integration]

EXAMPLE = ROOT / "examples" / "digits" / "mwms.yaml"
#: Every address on loopback: the driver, its channel and the executors' agents.
LOOPBACK = "spark.driver.host: 127.0.0.1, spark.driver.bindAddress: 127.0.0.1"


@pytest.fixture(autouse=True)
def _spark_here() -> None:
    if missing():
        pytest.skip(missing() or "")


def yarn_args(tmp_path: Path, *, queue: str = "default") -> list[str]:
    return ["--backend", "spark", "--spark-master", "yarn", "--runs-dir", str(tmp_path / "runs"),
            "--set", f"spark.conf={{spark.yarn.queue: {queue}, {LOOPBACK}}}"]


def summary(proc: subprocess.CompletedProcess) -> dict:
    try:
        return json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON summary (rc={proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-3000:]}")


def test_mwms_example_runs_in_its_queue_with_logs_and_staged_jars(yarn_env: Cluster, tmp_path: Path) -> None:
    proc = tfdist("run", "--quiet", "--json", str(EXAMPLE), *yarn_args(tmp_path, queue="tfdist"),
                  "--set", "roles.worker=1", "--set", 'command=[python, train_fit.py, --epochs, "1"]',
                  cwd=tmp_path, timeout=600)
    result = summary(proc)
    assert proc.returncode == 0, (result, proc.stderr[-2000:])
    assert {t["name"]: t["state"] for t in result["tasks"]} == {"chief-0": "succeeded", "worker-0": "succeeded"}
    assert result["metrics"]["accuracy"] > 0.3  # chance is 0.1
    run_dir = Path(result["run_dir"])
    placed = json.loads((run_dir / "spark_placement.json").read_text())
    app = yarn_env.get(f"/ws/v1/cluster/apps/{placed['application']}")["app"]
    assert (app["state"], app["finalStatus"], app["queue"]) == ("FINISHED", "SUCCEEDED", "root.tfdist")
    assert app["name"] == "tfdist-digits-mwms"
    assert {"tfdist", "tfdist-job-digits-mwms"} <= set(app["applicationTags"].split(","))
    for name, where in placed["tasks"].items():
        # each task ran in its executor's container, in the job's shipped working directory
        assert where["container"].startswith("container_"), (name, where)
        assert "/appcache/" in where["cwd"] and where["cwd"].endswith("/tfdist-workdir"), where
        assert (run_dir / "yarn-logs" / where["container"] / "stderr").stat().st_size > 0
    containers = sorted(p.name for p in (run_dir / "yarn-logs").iterdir())
    assert len(containers) >= 3, containers  # the AM's and the two executors'
    am_log = (run_dir / "yarn-logs" / containers[0] / "stderr").read_text()
    assert "ApplicationMaster" in am_log and "Final app status: SUCCEEDED" in am_log
    # Spark's jars went as one staged archive (made once per Spark installation), which the
    # NodeManagers localized for the AM's container
    staged = list(Path(os.environ["TFDIST_HOME"]).glob("spark-yarn/*/spark-libs.zip"))
    assert len(staged) == 1 and staged[0].stat().st_size > 100 << 20
    launch = list((ROOT / ".yarn" / "run").glob(f"nm-*/logs/{app['id']}/{containers[0]}/launch_container.sh"))
    assert len(launch) == 1 and "spark-libs.zip" in launch[0].read_text()


def test_lost_container_restarts_the_task_and_ctrl_c_kills_the_application(yarn_env: Cluster,
                                                                              tmp_path: Path) -> None:
    """worker-1's executor container is killed (every process in it, as a NodeManager or an
    OOM killer would): its agent and task die, Spark fails the barrier stage, tfdist runs a
    new one and the policy restarts the task on a new executor's agent. Then Ctrl-C: the
    tasks stop, the session stops and no application of the job is left live."""
    runs = tmp_path / "runs"
    cli = subprocess.Popen(
        [*TFDIST, "run", "--quiet", *yarn_args(tmp_path), "--workers", "2", "--name", "lose",
         "--set", "restart.policy=on-failure", "--set", "restart.backoff_seconds=0",
         "--", sys.executable, str(BIN / "hang.py")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        def running(attempt: int) -> dict | None:
            for run_dir in runs.glob("lose-*"):
                rows = read_jsonl(run_dir / "events.jsonl")
                if {r["task"] for r in rows if r["state"] == "running" and r["attempt"] == 0} == \
                        {"worker-0", "worker-1"} and (attempt == 0 or any(
                            r["task"] == "worker-1" and r["state"] == "running" and r["attempt"] == attempt
                            for r in rows)):
                    return json.loads((run_dir / "spark_placement.json").read_text())
            return None

        placed = None
        deadline = time.monotonic() + 420
        while placed is None and time.monotonic() < deadline and cli.poll() is None:
            placed = running(0)
            time.sleep(0.3)
        assert placed, f"the job never ran: {cli.poll()} {cli.stderr.read() if cli.poll() is not None else ''}"
        app_id, container = placed["application"], placed["tasks"]["worker-1"]["container"]
        assert [a["id"] for a in yarn_env.live_apps("tfdist-job-lose", wait=0)] == [app_id]
        victims = container_pids(container)
        assert victims, container
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 300
        while running(1) is None and time.monotonic() < deadline and cli.poll() is None:
            time.sleep(0.3)
        assert running(1) is not None, f"worker-1 was not restarted: {cli.poll()}"
        pids = [int(w) for log in runs.glob("lose-*/logs/worker-*.log") for line in log.read_text().splitlines()
                if " pid " in line for w in line.split()[2:5:2]]
        cli.send_signal(signal.SIGINT)
        _out, err = cli.communicate(timeout=180)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 130, err[-2000:]
    log = next(runs.glob("lose-*/logs/worker-1.log")).read_text()
    assert "worker-1 lost: " in log and "runs on a new agent" in log, log
    assert still_alive(pids, wait=30) == []
    assert yarn_env.live_apps("tfdist-job-lose", wait=60) == []
    assert container_pids(container) == []
