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
import time
from pathlib import Path

import pytest

from tests.backends.spark.spark_cluster import missing
from tests.backends.yarn.yarn_cluster import ROOT, Cluster, container_processes, task_process
from tests.conftest import BIN, TFDIST, summary, tfdist

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


@pytest.mark.timeout(600)  # a Spark session on YARN takes minutes to start on a loaded machine
def test_ctrl_c_leaves_no_application_running(yarn_env: Cluster, tmp_path: Path) -> None:
    """SIGINT to tfdist while its task runs in an executor container: exit 130, and the
    application ends (none of the job's left live at the RM) with no process of its
    containers left behind."""
    proc = subprocess.Popen([*TFDIST, "run", "--quiet", *yarn_args(tmp_path, queue="tfdist"), "--name",
                             "spark-yarn-ctrl-c", "--workers", "1", "--", "python", str(BIN / "hang.py")],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        task_process("worker-0", time.monotonic() + 400, job="spark-yarn-ctrl-c")
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
