"""The data section on a real two-node Ray cluster: each task's actor stages its share on its
node and the writer's actor keeps the outputs (tests/bin/data_task.py reports what it got)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import BIN, tfdist
from tests.data.test_local_jobs import log_of, reports

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

pytestmark = [pytest.mark.ray, pytest.mark.integration]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    session = c.head_node.get_session_dir_path()
    try:
        c.add_node(num_cpus=2)
        c.wait_for_nodes()
        yield c
    finally:
        c.shutdown()
        shutil.rmtree(session, ignore_errors=True)


def test_ray_actors_stage_their_own_shares_and_keep_outputs(cluster, tmp_path: Path) -> None:
    data = tmp_path / "clicks"
    data.mkdir()
    for i in range(4):
        (data / f"part-{i}").write_bytes(b"y" * (300 * (i + 1)))
    job = tmp_path / "job.yaml"
    job.write_text(f"""
name: ray-data
command: {json.dumps(["python", str(BIN / "data_task.py"), "fail-first-worker"])}
roles: {{worker: 2}}
restart: {{policy: on-failure, max_restarts: 1, backoff_seconds: 0}}
data:
  train: {{uris: ["{data}/part-*"]}}
outputs:
  model_dir: {tmp_path / "models"}
""")
    proc = tfdist("run", "--quiet", "--json", "--backend", "ray", "--ray-address", cluster.address,
                  "--runs-dir", str(tmp_path / "runs"), str(job), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = json.loads(proc.stdout)["run_dir"]
    got = reports(run_dir)
    first = {r["task"]: r for r in got if r["restart"] == "0"}
    assert sorted(Path(p).name for r in first.values() for p in r["inputs"]["train"]) == [
        f"part-{i}" for i in range(4)]
    for task, r in first.items():
        assert r["exist"] == {"train": True} and not r["plan_seen"]
        assert all(f"/tfdist-data/{task}/inputs/train/" in p for p in r["inputs"]["train"])
    again = {r["task"]: r for r in got if r["restart"] == "1"}
    assert again["worker-0"]["inputs"] == first["worker-0"]["inputs"]
    assert "(copied 0, cached" in log_of(run_dir, "worker-0")
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["worker-0-0.txt", "worker-0-1.txt"]
