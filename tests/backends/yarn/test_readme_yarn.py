"""The README's YARN lines, as written, on the project's own `make yarn-up` cluster (two
NodeManagers, no other application): a container per task (`--backend yarn`), and Spark on
YARN (`--backend spark --spark-master yarn`, whose first run stages Spark's jars). Here,
in the YARN group, because that is when the cluster is up (tests/examples/test_readme.py
runs the README's other lines); nothing of either job is left at the ResourceManager."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.backends.spark.spark_cluster import missing
from tests.backends.yarn.yarn_cluster import ROOT, Cluster
from tests.examples.test_readme import backend_of, readme_runs, run_as_written

pytestmark = [pytest.mark.yarn, pytest.mark.integration, pytest.mark.timeout(900)]

LINES = readme_runs("yarn", "spark")
YARN_LINES = [argv for argv in LINES
              if backend_of(argv) == "yarn" or argv[argv.index("--spark-master") + 1:][:1] == ["yarn"]]


def test_the_readme_shows_both_yarn_lines() -> None:
    assert sorted(backend_of(argv) for argv in YARN_LINES) == ["spark", "yarn"], YARN_LINES


@pytest.mark.parametrize("argv", YARN_LINES, ids=" ".join)
def test_the_readme_s_yarn_line_runs_as_written(argv: list[str], yarn_env: Cluster, tmp_path: Path) -> None:
    """Each line as written; each is also the group's run of the MWMS example on its path
    (:func:`_yarn_ran_there`, :func:`_spark_on_yarn_ran_there`)."""
    spark = backend_of(argv) == "spark"
    if spark and missing():
        pytest.skip(missing() or "")
    ran_there = _spark_on_yarn_ran_there if spark else _yarn_ran_there
    run_as_written(argv, tmp_path, env=yarn_env.env, check=lambda run_dir: ran_there(yarn_env, run_dir))
    assert not yarn_env.live_apps("tfdist-job-digits-mwms", wait=30)


def _yarn_ran_there(yarn_env: Cluster, run_dir: Path) -> None:
    """The MWMS example (a chief, two workers) trained with `--backend yarn`: one application
    per role (the distributed shell's AM) in the default queue, FINISHED/SUCCEEDED under the
    job's name and tags; the job's own application beside them, run by tfdist as an unmanaged
    AM, saying how the job ended; each task's address its container's host and port, and
    each container's log in the run directory."""
    result = json.loads((run_dir / "summary.json").read_text())
    tasks = ["chief-0", "worker-0", "worker-1"]
    assert {t["name"]: t["state"] for t in result["tasks"]} == dict.fromkeys(tasks, "succeeded"), result
    assert result["metrics"]["accuracy"] > 0.3  # chance is 0.1
    placed = json.loads((run_dir / "yarn_placement.json").read_text())
    assert set(placed["applications"]) == {"chief", "worker"}
    tags = set()
    for role, app_id in placed["applications"].items():
        app = yarn_env.get(f"/ws/v1/cluster/apps/{app_id}")["app"]
        assert (app["name"], app["queue"], app["state"], app["finalStatus"]) == \
            (f"tfdist-digits-mwms-{role}", "root.default", "FINISHED", "SUCCEEDED")
        assert "tfdist-job-digits-mwms" in app["applicationTags"].split(",")
        tags.add(app["applicationTags"])
    job_app = yarn_env.get(f"/ws/v1/cluster/apps/{placed['job_application']}")["app"]
    assert (job_app["name"], job_app["queue"], job_app["state"], job_app["finalStatus"], job_app["diagnostics"]) == \
        ("tfdist-digits-mwms", "root.default", "FINISHED", "SUCCEEDED", "tfdist: job digits-mwms succeeded"), job_app
    assert job_app["unmanagedApplication"] and tags == {job_app["applicationTags"]}
    for name, where in placed["tasks"].items():
        assert (run_dir / "yarn-logs" / where["container"] / "stderr").exists(), name
        assert result["tasks"][tasks.index(name)]["address"] == f"{where['host']}:{where['port']}"
    _left_with_their_peers(run_dir, tasks)


def _left_with_their_peers(run_dir: Path, tasks: list[str]) -> None:
    """Each task ran its script through tfdist.node.leave_program (on YARN: from the agent's
    zip) and left with its peers."""
    for name in tasks:
        log = (run_dir / "logs" / f"{name}.log").read_text()
        assert f"tfdist: {name} left with its peers" in log, log[-2000:]


def _spark_on_yarn_ran_there(yarn_env: Cluster, run_dir: Path) -> None:
    """The MWMS example (a chief, two workers) trained on Spark on YARN in the default queue;
    its application FINISHED/SUCCEEDED under the job's name and tags; each task ran in its
    executor's container in the job's shipped working directory; every container's log (the
    AM's and the executors') is in the run directory; Spark's jars went as one staged archive
    (made once per Spark installation), which the NodeManagers localized for the AM's
    container. (The job's own queue, spark.yarn.queue, is checked by test_spark_on_yarn.py.)"""
    result = json.loads((run_dir / "summary.json").read_text())
    assert {t["name"]: t["state"] for t in result["tasks"]} == \
        {"chief-0": "succeeded", "worker-0": "succeeded", "worker-1": "succeeded"}, result
    assert result["metrics"]["accuracy"] > 0.3  # chance is 0.1
    placed = json.loads((run_dir / "spark_placement.json").read_text())
    app = yarn_env.get(f"/ws/v1/cluster/apps/{placed['application']}")["app"]
    assert (app["state"], app["finalStatus"], app["queue"]) == ("FINISHED", "SUCCEEDED", "root.default")
    assert app["name"] == "tfdist-digits-mwms"
    assert {"tfdist", "tfdist-job-digits-mwms"} <= set(app["applicationTags"].split(","))
    for name, where in placed["tasks"].items():
        assert where["container"].startswith("container_"), (name, where)
        assert where["executor"].isdigit(), where  # Spark's id for it, as killAndReplaceExecutor takes
        assert "/appcache/" in where["cwd"] and where["cwd"].endswith("/tfdist-workdir"), where
        assert (run_dir / "yarn-logs" / where["container"] / "stderr").stat().st_size > 0
    containers = sorted(p.name for p in (run_dir / "yarn-logs").iterdir())
    assert len(containers) >= 3, containers  # the AM's and the executors'
    am_log = (run_dir / "yarn-logs" / containers[0] / "stderr").read_text()
    assert "ApplicationMaster" in am_log and "Final app status: SUCCEEDED" in am_log
    staged = list(Path(os.environ["TFDIST_HOME"]).glob("spark-yarn/*/spark-libs.zip"))
    assert len(staged) == 1 and staged[0].stat().st_size > 100 << 20
    launch = list((ROOT / ".yarn" / "run").glob(f"nm-*/logs/{app['id']}/{containers[0]}/launch_container.sh"))
    assert len(launch) == 1 and "spark-libs.zip" in launch[0].read_text()
    _left_with_their_peers(run_dir, ["chief-0", "worker-0", "worker-1"])
