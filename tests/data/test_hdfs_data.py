"""hdfs:// inputs and outputs through tfdist.node.webhdfs, against the fake WebHDFS of
test_webhdfs_units (a NameNode and a DataNode on 127.0.0.1): listed on the driver, staged and
kept on the node, and a whole local-backend job. The real HDFS of the YARN test cluster is
the hdfs helper's; these check the wiring."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import BIN, tfdist
from tests.data.test_local_jobs import log_of, reports
from tests.data.test_webhdfs_units import FakeHdfs, fake  # noqa: F401 - the fixture
from tfdist import contract
from tfdist.data import plan as data_plan
from tfdist.errors import SpecError
from tfdist.jobspec.load import from_dict
from tfdist.node import staging


@pytest.fixture
def hdfs(fake: tuple[FakeHdfs, str], monkeypatch: pytest.MonkeyPatch) -> FakeHdfs:  # noqa: F811
    fs, address = fake
    monkeypatch.setenv("TFDIST_WEBHDFS", address)  # every hdfs:// authority goes to the fake
    for i in range(4):
        fs.add(f"/clicks/part-{i}", bytes([65 + i]) * (100 * (i + 1)))
    fs.add("/clicks/_SUCCESS", b"")
    return fs


def job(**extra: object):
    return from_dict({"name": "h", "command": "python t.py", "roles": {"worker": 2}, **extra})


def test_globs_are_listed_with_sizes_and_shared_by_bytes(hdfs: FakeHdfs) -> None:
    plan = data_plan.make(job(data={"train": {"uris": ["hdfs://nn:8020/clicks/part-*"]}}))
    assert plan is not None
    shares = {t: [(f.uri, f.size) for f in s["train"]] for t, s in plan.shares.items()}
    assert sorted(sum(shares.values(), [])) == [(f"hdfs://nn:8020/clicks/part-{i}", 100 * (i + 1))
                                                for i in range(4)]
    assert sorted(sum(size for _, size in s) for s in shares.values()) == [500, 500]
    whole = data_plan.make(job(data={"train": {"uris": ["hdfs://nn:8020/clicks"]}}))
    assert whole is not None and len(whole.files["train"]) == 4  # _SUCCESS left out


def test_nothing_matched_and_a_namenode_that_is_down_are_one_line(hdfs: FakeHdfs,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SpecError, match="'hdfs://nn:8020/none-\\*' matches no file"):
        data_plan.make(job(data={"train": {"uris": ["hdfs://nn:8020/none-*"]}}))
    from tests.data.test_webhdfs_units import _closed_port

    monkeypatch.setenv("TFDIST_WEBHDFS", f"127.0.0.1:{_closed_port()}")
    for extra, field in [({"data": {"train": {"uris": ["hdfs://nn:8020/clicks"]}}}, "data.train.uris.0"),
                         ({"outputs": {"model_dir": "hdfs://nn:8020/m"}}, "outputs.model_dir")]:
        with pytest.raises(SpecError) as err:
            data_plan.make(job(**extra))
        assert str(err.value).startswith(f"{field}: cannot ") and "\n" not in str(err.value)


def test_staged_from_hdfs_and_outputs_kept_there(hdfs: FakeHdfs, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    hdfs.add("/models/ctr/checkpoint", b"old")
    monkeypatch.setenv("HADOOP_USER_NAME", "alice")
    plan = data_plan.make(job(data={"train": {"uris": ["hdfs://nn:8020/clicks/part-*"]}},
                              outputs={"model_dir": "hdfs://nn:8020/models/ctr"}))
    assert plan is not None
    # The node reaches the NameNode at the address and as the user tfdist listed the files
    # with, whatever its own environment says: a YARN container has no TFDIST_WEBHDFS and
    # (unless the NodeManager passes it on) no HADOOP_CONF_DIR, so on its own it would ask
    # nn:9870, and act as the NodeManager's user.
    address = os.environ["TFDIST_WEBHDFS"]
    node_plan = json.loads(plan.task_env("worker-0")[contract.DATA_PLAN])
    assert node_plan["stores"] == {"hdfs://nn:8020": {"http": address, "user": "alice"}}
    monkeypatch.delenv("TFDIST_WEBHDFS")
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.setenv("HADOOP_USER_NAME", "mallory")
    asked = len(hdfs.requests)
    lines: list[str] = []
    prepared = staging.prepare(plan.task_env("worker-0"), str(tmp_path / "node"), lines.append)
    paths = json.loads(prepared.env["TFDIST_DATA_TRAIN"])
    assert [Path(p).read_bytes() for p in paths] == [hdfs.files[f"/clicks/{Path(p).name}"] for p in paths]
    local = Path(prepared.env["TFDIST_OUTPUT_MODEL_DIR"])
    assert (local / "checkpoint").read_bytes() == b"old"  # filled from the URI
    (local / "ckpt-1.index").write_bytes(b"new")
    (local / "checkpoint").write_bytes(b"ckpt-1")
    prepared.close()
    assert hdfs.files["/models/ctr/ckpt-1.index"] == b"new" and hdfs.files["/models/ctr/checkpoint"] == b"ckpt-1"
    again = staging.prepare(plan.task_env("worker-0"), str(tmp_path / "node"), lines.append)
    assert again.copied == 0
    assert {params["user.name"] for _, _, params in hdfs.requests[asked:]} == {"alice"}


@pytest.mark.integration
def test_a_local_job_reads_and_writes_hdfs(hdfs: FakeHdfs, tmp_path: Path) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(f"""
name: hdfs-job
command: {json.dumps(["python", str(BIN / "data_task.py")])}
roles: {{worker: 2}}
data:
  train: {{uris: ["hdfs://nn:8020/clicks/part-*"]}}
  raw: {{uris: ["hdfs://nn:8020/clicks"], mode: stream, shard: none}}
outputs:
  model_dir: hdfs://nn:8020/models/ctr
""")
    proc = tfdist("run", "--quiet", "--json", "--runs-dir", str(tmp_path / "runs"), str(job_file), timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run_dir = json.loads(proc.stdout)["run_dir"]
    got = {r["task"]: r for r in reports(run_dir)}
    names = sorted(Path(p).name for r in got.values() for p in r["inputs"]["train"])
    assert names == [f"part-{i}" for i in range(4)]
    assert got["worker-1"]["inputs"]["raw"] == [f"hdfs://nn:8020/clicks/part-{i}" for i in range(4)]
    assert "staged train: 2 files" in log_of(run_dir, "worker-0")
    assert hdfs.files["/models/ctr/worker-0-0.txt"] == b"worker-0"
    assert "/models/ctr/worker-1-0.txt" not in hdfs.files
