"""The recommendation example trained on ``--backend yarn`` from the real HDFS beside the
YARN test cluster (yarn/yarn.sh): its quick-size shards in HDFS, each worker staging and
reading only its own, its checkpoints and model kept in HDFS; a worker killed mid-job
resumes from the HDFS checkpoint with the same files while a DataNode is stopped, and
nothing is lost. One job: each costs an AM, two containers and TensorFlow's start-ups."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.backends.yarn.hdfs_cluster import Hdfs, recsys_in_hdfs, shares_read
from tests.backends.yarn.yarn_cluster import ROOT, Cluster, task_process
from tests.conftest import TFDIST
from tfdist.node import webhdfs

pytestmark = [pytest.mark.yarn, pytest.mark.integration]

RECSYS = ROOT / "examples" / "recsys"
LEARNED = 0.65  # chance is 0.5; the quick data's attainable AUC is ~0.87
STEPS = 400


def test_recsys_trains_on_yarn_from_hdfs_and_a_killed_worker_resumes_there(
        yarn_env: Cluster, hdfs: Hdfs, tmp_path: Path) -> None:
    client, base, data = recsys_in_hdfs(hdfs, tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    for name in ("train.py", "model.py", "generate.py", "hdfs.yaml"):
        shutil.copy(RECSYS / name, project / name)
    quick = f"hdfs:///{base.lstrip('/')}/quick"  # hdfs:///: the NameNode of HADOOP_CONF_DIR
    inputs = {"train": {"uris": [f"{quick}/train-*"], "shard": "file"},
              "heldout": {"uris": [f"{quick}/eval.tfrecord", f"{quick}/manifest.json"], "shard": "none"}}
    command = ["python", "train.py", "--loop", "fit", "--save", "--max-steps", str(STEPS), "--target-auc", "0.99"]
    proc = subprocess.Popen(
        [*TFDIST, "run", "--quiet", "--json", str(project / "hdfs.yaml"), "--backend", "yarn",
         "--runs-dir", str(tmp_path / "runs"), "--set", "yarn.queue=tfdist", "--set", f"command={json.dumps(command)}",
         "--set", f"data={json.dumps(inputs)}", "--set", f"outputs.model_dir=hdfs:///{base.lstrip('/')}/model"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped = False
    try:
        # once the first checkpoint is in HDFS: worker-1's task SIGKILLed, then a DataNode stopped
        deadline = time.monotonic() + 400
        while client.status(f"{base}/model/checkpoints/checkpoint") is None:
            if proc.poll() is not None:
                pytest.fail(f"tfdist ended (exit {proc.returncode}) before a checkpoint reached HDFS: "
                            f"{proc.stderr.read()[-3000:] if proc.stderr else ''}")
            if time.monotonic() > deadline:
                pytest.fail("no checkpoint reached HDFS within 400 s")
            time.sleep(0.3)
        os.kill(task_process("worker-1", deadline, job="recsys-hdfs", cli=proc), signal.SIGKILL)
        hdfs.datanode("stop", "dn-1")
        stopped = True
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        result = json.loads(out)
        run_dir = Path(result["run_dir"])
        logs = {w: (run_dir / "logs" / f"{w}.log").read_text() for w in ("worker-0", "worker-1")}

        # each worker read only its own files, the same ones after the restart, as tfdist dealt them
        dealt = json.loads((run_dir / "data.json").read_text())["tasks"]
        shares = {}
        for worker, log in logs.items():
            lines = shares_read(log)
            assert len(lines) == 2 and lines[0] == lines[1], (worker, lines)  # the first start, the restart
            shares[worker] = lines[0]
            assert shares[worker] == {Path(u).name for u in dealt[worker]["train"]}
            assert all(u.startswith(f"{quick}/") for u in dealt[worker]["train"])
            assert "staged train: 4 files" in log and "(copied 0, cached 4)" in log, log[-3000:]
        assert len(shares["worker-0"]) == len(shares["worker-1"]) == 4
        assert shares["worker-0"].isdisjoint(shares["worker-1"])
        assert shares["worker-0"] | shares["worker-1"] == {f"train-{i:05d}-of-00008.tfrecord" for i in range(8)}

        # the restart resumed from the checkpoint in HDFS: worker-1 (whose own saves are never
        # kept) restored it from there, and both workers went on from the same step
        tasks = {t["name"]: t for t in result["tasks"]}
        assert tasks["worker-1"]["restarts"] == 1 and tasks["worker-1"]["state"] == "succeeded", tasks
        assert re.search(r"output model_dir: \d+ files .* restored from hdfs:///", logs["worker-1"]), logs["worker-1"][-3000:]
        resumed = {w: [int(n) for n in re.findall(r"resumed from \S+/checkpoints/ckpt-\d+ at step (\d+)", log)]
                   for w, log in logs.items()}
        assert len(resumed["worker-0"]) == 1 and resumed["worker-0"] == resumed["worker-1"], resumed
        assert 50 <= resumed["worker-0"][0] < STEPS

        # a sane model, and it and its checkpoints are in HDFS, every file readable with dn-1 down
        assert result["metrics"]["auc"] > LEARNED, result["metrics"]
        assert client.read(f"{base}/model/checkpoints/checkpoint").startswith(
            f'model_checkpoint_path: "ckpt-{STEPS}"'.encode())
        kept = {e.path.removeprefix(f"{base}/model/"): e.size for e in _walk(client, f"{base}/model")}
        assert {"model/saved_model.pb", f"checkpoints/ckpt-{STEPS}.index"} <= set(kept), sorted(kept)
        assert not [p for p in kept if p.endswith(("._COPYING_", ".tfdist-tmp"))], sorted(kept)
        for path, size in kept.items():
            assert len(client.read(f"{base}/model/{path}")) == size, path
        for f in data.iterdir():  # the inputs, written before the DataNode stopped, whole
            assert client.read(f"{base}/quick/{f.name}") == f.read_bytes(), f.name
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if stopped:
            hdfs.datanode("start", "dn-1")
            hdfs.wait_ready()
        client.delete(base, recursive=True)


def _walk(client: webhdfs.WebHdfs, path: str) -> list[webhdfs.Entry]:
    """Every file under ``path``."""
    found = []
    for entry in client.listdir(path):
        found.extend(_walk(client, entry.path) if entry.is_dir else [entry])
    return found
