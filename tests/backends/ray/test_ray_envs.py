"""A job's ``python.requirements`` on a real Ray cluster: they travel as the runtime_env's
pip packages, and the task sees its pin (not the version tfdist's own environment has) while
still importing tfdist.runtime."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import BIN, tfdist

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

pytestmark = [pytest.mark.ray, pytest.mark.integration, pytest.mark.network,
              pytest.mark.usefixtures("package_index")]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    session = c.head_node.get_session_dir_path()
    try:
        c.wait_for_nodes()
        yield c
    finally:
        c.shutdown()
        shutil.rmtree(session, ignore_errors=True)  # its runtime env copies ~3 GB of this venv


def test_requirements_reach_the_task_through_runtime_env(cluster, tmp_path: Path) -> None:
    import six

    pin = "1.15.0"
    assert six.__version__ != pin  # else the test could not tell whose six the task sees
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(BIN / "print_version.py", proj)
    job = proj / "job.yaml"
    job.write_text(json.dumps({"name": "rayenv", "strategy": "none", "roles": {"worker": 1},
                               "command": ["python", "print_version.py", "six"]}))
    proc = tfdist("run", str(job), "--quiet", "--json", "--backend", "ray", "--ray-address", cluster.address,
                  "--runs-dir", str(tmp_path / "runs"), "--set", f"python.requirements=[six=={pin}]",
                  cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    log = (Path(result["run_dir"]) / "logs" / "worker-0.log").read_text()
    line = next(ln for ln in log.splitlines() if ln.startswith("VERSION "))
    assert line.split()[2] == pin, log
    assert "runtime_resources" in line or "virtualenv" in line or os.sep + "pip" + os.sep in line, line
    # the local cache is not involved: Ray builds the environment on its nodes
    assert not (Path(os.environ["TFDIST_HOME"]) / "envs").exists()
