"""``--backend yarn`` on the real cluster of yarn/yarn.sh: one application per role (Hadoop's
distributed shell AM), one container per task with the role's resources, tfdist's agent in
each. Few jobs (each costs an AM and a container per task); each asserts all it can."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.backends.yarn.yarn_cluster import ROOT, Cluster
from tests.conftest import tfdist

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
