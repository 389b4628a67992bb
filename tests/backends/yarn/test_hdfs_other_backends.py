"""The recommendation example's quick shards in the real HDFS beside the YARN test cluster,
trained on the other backends that stage from it: on this machine's processes and on a Spark
standalone cluster (examples/recsys/hdfs.yaml, MWMS, two workers). Each worker stages and
reads only its own 4 files from HDFS, and the checkpoints and the model land in HDFS.

These live in the YARN group because that is when its HDFS is up: ``make test`` stops the
cluster after the group's last test (tests/conftest.py's STOPPED_AFTER), so a test of it
elsewhere in the suite would only ever skip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.backends.spark.spark_cluster import StandaloneCluster, missing
from tests.backends.yarn.hdfs_cluster import Hdfs, hdfs, recsys_in_hdfs, shares_read  # noqa: F401 - the fixture
from tests.backends.yarn.yarn_cluster import ROOT
from tests.conftest import tfdist
from tests.data.test_local_jobs import log_of

pytestmark = [pytest.mark.yarn, pytest.mark.integration]

STEPS = 100


def _train(hdfs: Hdfs, tmp_path: Path, staged: str, *backend: str) -> None:  # noqa: F811
    """Run hdfs.yaml on ``backend`` against the quick shards put in HDFS for this test, and
    check what each worker read (staged to a path holding ``staged``, ``{task}`` its name)
    and what was kept; the shards are removed after."""
    client, base, _ = recsys_in_hdfs(hdfs, tmp_path)
    try:
        project = tmp_path / "project"
        project.mkdir()
        for name in ("train.py", "model.py", "generate.py", "hdfs.yaml"):
            (project / name).write_bytes((ROOT / "examples" / "recsys" / name).read_bytes())
        quick = f"{hdfs.url}{base}/quick"
        inputs = {"train": {"uris": [f"{quick}/train-*"], "shard": "file"},
                  "heldout": {"uris": [f"{quick}/eval.tfrecord", f"{quick}/manifest.json"], "shard": "none"}}
        command = ["python", "train.py", "--loop", "fit", "--save", "--max-steps", str(STEPS), "--target-auc", "0.99"]
        proc = tfdist("run", "--quiet", "--json", str(project / "hdfs.yaml"), *backend,
                      "--runs-dir", str(tmp_path / "runs"), "--set", f"command={json.dumps(command)}",
                      "--set", f"data={json.dumps(inputs)}", "--set", f"outputs.model_dir={hdfs.url}{base}/model",
                      cwd=tmp_path, timeout=600, env={"HADOOP_CONF_DIR": str(hdfs.conf_dir)})
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        result: dict[str, Any] = json.loads(proc.stdout)
        run_dir = Path(result["run_dir"])
        dealt = json.loads((run_dir / "data.json").read_text())["tasks"]
        shares = {}
        for worker in ("worker-0", "worker-1"):
            log = log_of(str(run_dir), worker)
            (shares[worker],) = shares_read(log)
            assert shares[worker] == {Path(u).name for u in dealt[worker]["train"]}
            assert "staged train: 4 files" in log and staged.format(task=worker) in log, log[-2000:]
        assert shares["worker-0"].isdisjoint(shares["worker-1"])
        assert shares["worker-0"] | shares["worker-1"] == {f"train-{i:05d}-of-00008.tfrecord" for i in range(8)}
        assert result["metrics"]["auc"] > 0.65, result["metrics"]  # chance is 0.5
        checkpoint = client.read(f"{base}/model/checkpoints/checkpoint")
        assert checkpoint.startswith(f'model_checkpoint_path: "ckpt-{STEPS}"'.encode())
        assert client.status(f"{base}/model/model/saved_model.pb") is not None
    finally:
        client.delete(base, recursive=True)


def test_local_processes_train_the_recsys_shards_from_hdfs(hdfs: Hdfs, tmp_path: Path) -> None:  # noqa: F811
    _train(hdfs, tmp_path, "/data/{task}/inputs/train/")  # in the run directory


@pytest.mark.spark
@pytest.mark.skipif(missing() is not None, reason=missing() or "")
def test_spark_trains_the_recsys_shards_from_hdfs(hdfs: Hdfs, tmp_path: Path) -> None:  # noqa: F811
    cluster = StandaloneCluster(workers=2, cores=2).start()
    try:
        _train(hdfs, tmp_path, "/tfdist-data/{task}/inputs/train/", "--backend", "spark", "--spark-master", cluster.master,
               "--set", f"spark.master_ui={cluster.ui}")
    finally:
        cluster.stop()
