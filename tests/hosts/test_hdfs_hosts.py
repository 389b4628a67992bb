"""HDFS across hosts of the test bed: a NameNode on h0, where the recommendation example's
quick shards are generated and put in HDFS, and its one DataNode on h2, which holds their
blocks; a Spark standalone master on h0 and its one worker on h1; tfdist's driver on h3. The
task lands on h1, which never had a byte of the data: its agent asks h0's NameNode and
fetches the blocks from h2's DataNode over the bed, the task trains on them, and its
checkpoint and model land in HDFS, read back from h3. On one machine every daemon is at
127.0.0.1, so a client that reached the DataNode at the NameNode's host (or at its own)
would pass there; here it cannot."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.backends.spark.spark_cluster import missing
from tests.backends.yarn.hdfs_cluster import shares_read
from tests.conftest import ROOT
from tests.hosts.clusters import HdfsOnHosts, SparkOnHosts, finish, logs, placement, run_tfdist

if missing():
    pytest.skip(missing() or "", allow_module_level=True)

pytestmark = [pytest.mark.hosts, pytest.mark.spark, pytest.mark.yarn, pytest.mark.integration,
              pytest.mark.timeout(900)]

STEPS = 100
SRC = str(ROOT / "src")

#: Run on a host: put the files given in HDFS (argv: URI of the directory, files...), or
#: with --read print what a list of HDFS files holds (sizes, and the checkpoint state).
CLIENT = """
import json, sys
from tfdist.node import webhdfs
client, base = webhdfs.connect(sys.argv[2])
if sys.argv[1] == "put":
    for f in sys.argv[3:]:
        client.upload(f, base + "/" + f.rpartition("/")[2])
else:
    print(json.dumps({"checkpoint": client.read(base + "/checkpoints/checkpoint").decode(),
                      "files": {e.path.removeprefix(base + "/"): e.size for e in client.listdir(base + "/model")},
                      "saved_model": len(client.read(base + "/model/saved_model.pb"))}))
"""


@pytest.fixture(scope="module")
def clusters(host_bed):
    bed = host_bed
    h0, h1 = bed.host("h0"), bed.host("h1")
    hdfs = HdfsOnHosts(bed, h0, [bed.host("h2")])
    spark = SparkOnHosts(bed, h0, [h1], cores=2)
    try:
        try:
            hdfs.start()
        except (RuntimeError, OSError, subprocess.CalledProcessError) as err:
            pytest.skip(f"no HDFS on the test bed: {err}")
        spark.start()
        yield hdfs, spark
    finally:
        spark.stop()
        hdfs.stop()
        bed.restore()


def _client(bed, host, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = bed.run(host, [sys.executable, "-c", CLIENT, *args], env=env, stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return out


def test_a_task_on_a_host_that_never_had_the_data_trains_from_hdfs(host_bed, clusters) -> None:
    bed = host_bed
    hdfs, spark = clusters
    h0, h1, h3 = bed.host("h0"), bed.host("h1"), bed.host("h3")
    data = h0.workdir / "recsys-data"
    subprocess.run([sys.executable, str(ROOT / "examples" / "recsys" / "generate.py"), "--out", str(data),
                    "--quick", "--seed", "7"], check=True, capture_output=True, timeout=300)
    quick = f"{hdfs.url}/recsys/quick"
    _client(bed, h0, "put", quick, *sorted(str(f) for f in data.iterdir()))
    assert not list(h1.workdir.rglob("*.tfrecord"))  # h1 has none of it

    project = h3.workdir / "recsys"
    project.mkdir(exist_ok=True)
    for name in ("train.py", "model.py", "generate.py", "hdfs.yaml"):  # generate.py: its AUC
        (project / name).write_bytes((ROOT / "examples" / "recsys" / name).read_bytes())
    inputs = {"train": {"uris": [f"{quick}/train-*"], "shard": "file"},
              "heldout": {"uris": [f"{quick}/eval.tfrecord", f"{quick}/manifest.json"], "shard": "none"}}
    command = ["python", "train.py", "--loop", "fit", "--save", "--max-steps", str(STEPS), "--target-auc", "0.99"]
    proc = run_tfdist(bed, h3, ["run", "--json", "--quiet", *spark.args(), "--runs-dir", str(h3.workdir / "runs"),
                                str(project / "hdfs.yaml"), "--set", "name=hosts-hdfs", "--set", "roles.worker=1",
                                "--set", f"command={json.dumps(command)}", "--set", f"data={json.dumps(inputs)}",
                                "--set", f"outputs.model_dir={hdfs.url}/recsys/model"], cwd=h3.workdir)
    rc, result, err = finish(proc, 600)
    assert rc == 0, (result.get("root_cause"), logs(result).get("worker-0", "")[-4000:], err[-3000:])

    assert placement(result, "spark")["worker-0"]["hostname"] == "h1"
    log = logs(result)["worker-0"]
    assert "staged train: 8 files" in log and "(copied 8, cached 0" in log, log[-3000:]  # from h2, over the bed
    assert shares_read(log) == [{f"train-{i:05d}-of-00008.tfrecord" for i in range(8)}], log[-3000:]
    staged = sorted(p for p in h1.workdir.rglob("train-*.tfrecord") if "/tfdist-data/worker-0/inputs/train/" in str(p))
    assert len(staged) == 8 and all(p.read_bytes() == (data / p.name).read_bytes() for p in staged), staged
    assert result["metrics"]["auc"] > 0.6, result["metrics"]  # chance is 0.5

    kept = json.loads(_client(bed, h3, "read", f"{hdfs.url}/recsys/model"))  # from a host of neither
    assert kept["checkpoint"].startswith(f'model_checkpoint_path: "ckpt-{STEPS}"'), kept
    assert kept["saved_model"] > 0 and "model/variables" in kept["files"], kept
