"""The data section on a real Spark standalone cluster: the agent on each executor stages its
task's share and keeps the writer's outputs (tests/bin/data_task.py reports what it got)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.backends.spark.spark_cluster import StandaloneCluster, missing
from tests.conftest import BIN, tfdist
from tests.data.test_local_jobs import log_of, reports

if missing():
    pytest.skip(missing() or "", allow_module_level=True)

pytestmark = [pytest.mark.spark, pytest.mark.integration]


@pytest.fixture(scope="module")
def cluster():
    c = StandaloneCluster(workers=2, cores=2).start()
    try:
        yield c
    finally:
        c.stop()


def test_spark_tasks_stage_their_own_shares_and_keep_outputs(cluster: StandaloneCluster, tmp_path: Path) -> None:
    data = tmp_path / "clicks"
    data.mkdir()
    for i in range(5):
        (data / f"part-{i}").write_bytes(b"s" * (500 * (i + 1)))
    job = tmp_path / "job.yaml"
    job.write_text(f"""
name: spark-data
command: {json.dumps(["python", str(BIN / "data_task.py"), "fail-first-worker"])}
roles: {{worker: 2}}
restart: {{policy: on-failure, max_restarts: 1, backoff_seconds: 0}}
data:
  train: {{uris: ["{data}/part-*"]}}
outputs:
  model_dir: {tmp_path / "models"}
""")
    proc = tfdist("run", "--quiet", "--json", "--backend", "spark", "--spark-master", cluster.master,
                  "--runs-dir", str(tmp_path / "runs"), "--set", f"spark.master_ui={cluster.ui}", str(job),
                  cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = json.loads(proc.stdout)["run_dir"]
    got = reports(run_dir)
    first = {r["task"]: r for r in got if r["restart"] == "0"}
    assert set(first) == {"worker-0", "worker-1"}
    names = sorted(Path(p).name for r in first.values() for p in r["inputs"]["train"])
    assert names == [f"part-{i}" for i in range(5)]
    for task, r in first.items():
        assert r["exist"] == {"train": True} and not r["plan_seen"]
        assert all(f"/tfdist-data/{task}/inputs/train/" in p for p in r["inputs"]["train"])
        assert not any(p.startswith(str(run_dir)) for p in r["inputs"]["train"])  # on the executor's side
    again = {r["task"]: r for r in got if r["restart"] == "1"}
    assert again["worker-0"]["inputs"] == first["worker-0"]["inputs"]
    assert "(copied 0, cached" in log_of(run_dir, "worker-0")
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["worker-0-0.txt", "worker-0-1.txt"]

