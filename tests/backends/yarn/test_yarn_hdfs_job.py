"""The recommendation example trained on ``--backend yarn`` from the real HDFS beside the
YARN test cluster (yarn/yarn.sh): its quick-size shards in HDFS, each worker staging and
reading only its own, its checkpoints and model kept in HDFS. One job (each costs an AM, two
containers and TensorFlow's start-ups), broken twice:

- once the first checkpoint is in HDFS, worker-1's task SIGKILLed and a DataNode stopped: the
  task restarts in its container, resumes from the HDFS checkpoint with the same files, and
  nothing is lost with replication 2;
- once the restarted job runs and a checkpoint after its resume is in HDFS, worker-0's whole
  container SIGKILLed (its agent, which copies its saves to HDFS, with it): YARN relaunches
  the container, and the job resumes from what reached HDFS, same files."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.backends.yarn.hdfs_cluster import Hdfs, recsys_in_hdfs, shares_read
from tests.backends.yarn.yarn_cluster import ROOT, Cluster, task_process
from tests.conftest import TFDIST
from tfdist.node import webhdfs

pytestmark = [pytest.mark.yarn, pytest.mark.integration]

RECSYS = ROOT / "examples" / "recsys"
LEARNED = 0.65  # chance is 0.5; the quick data's attainable AUC is ~0.87
STEPS = 400
JOB = "recsys-hdfs"  # examples/recsys/hdfs.yaml's name


@dataclass
class Run:
    """A recsys job on YARN reading the quick shards from HDFS (``quick``, the hdfs:/// URI of
    ``base``/quick) and keeping its model in ``base``/model."""

    proc: subprocess.Popen[str]
    client: webhdfs.WebHdfs
    base: str
    quick: str
    data: Path

    def await_checkpoint(self) -> None:
        """Until a checkpoint state file is in HDFS (the first evaluation's save, copied)."""
        deadline = time.monotonic() + 400
        while self.client.status(f"{self.base}/model/checkpoints/checkpoint") is None:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                pytest.fail(f"tfdist ended (exit {self.proc.returncode}) before a checkpoint reached HDFS: {err[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail("no checkpoint reached HDFS within 400 s")
            time.sleep(0.3)

    def ended(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The run's --json result (it succeeded) and each worker's log."""
        out, err = self.proc.communicate(timeout=600)
        try:
            result = json.loads(out)
            run_dir = Path(result["run_dir"])
            logs = {w: (run_dir / "logs" / f"{w}.log").read_text() for w in ("worker-0", "worker-1")}
        except (ValueError, KeyError, OSError) as why:
            pytest.fail(f"tfdist exit {self.proc.returncode}, no summary or logs ({why}): {out[-2000:]} {err[-3000:]}")
        if self.proc.returncode != 0:
            tails = "\n".join(f"--- {w}:\n" + "\n".join(log.splitlines()[-15:]) for w, log in logs.items())
            pytest.fail(f"tfdist exit {self.proc.returncode}: {result.get('root_cause')}\n{tails}\n{err[-2000:]}")
        return result, logs

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _start(hdfs: Hdfs, tmp_path: Path) -> Run:
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
    return Run(proc, client, base, quick, data)


def _same_files_every_start(run: Run, result: dict[str, Any], logs: dict[str, str]) -> None:
    """Each worker read only its own 4 files, as tfdist dealt them, the same ones at its first
    start and at each of its two restarts, each start staging them first."""
    dealt = json.loads((Path(result["run_dir"]) / "data.json").read_text())["tasks"]
    shares = {}
    for worker, log in logs.items():
        lines = shares_read(log)
        assert len(lines) == 3 and lines[0] == lines[1] == lines[2], (worker, lines)  # the first start, two restarts
        shares[worker] = lines[0]
        assert shares[worker] == {Path(u).name for u in dealt[worker]["train"]}
        assert all(u.startswith(f"{run.quick}/") for u in dealt[worker]["train"])
        assert len(re.findall(r"staged train: 4 files", log)) == 3, log[-3000:]
    assert len(shares["worker-0"]) == len(shares["worker-1"]) == 4
    assert shares["worker-0"].isdisjoint(shares["worker-1"])
    assert shares["worker-0"] | shares["worker-1"] == {f"train-{i:05d}-of-00008.tfrecord" for i in range(8)}


def _resumed_from_hdfs(logs: dict[str, str]) -> list[int]:
    """Both workers went on, at each of their two restarts, from the same step > 0, later the
    second time, and worker-1 (whose own saves are never kept, so its output directory holds
    only what came from HDFS) restored it from HDFS: the steps they resumed at."""
    assert re.search(r"output model_dir: \d+ files .* restored from hdfs:///", logs["worker-1"]), logs["worker-1"][-3000:]
    resumed = {w: [int(n) for n in re.findall(r"resumed from \S+/checkpoints/ckpt-\d+ at step (\d+)", log)]
               for w, log in logs.items()}
    assert len(resumed["worker-0"]) == 2 and resumed["worker-0"] == resumed["worker-1"], resumed
    assert 50 <= resumed["worker-0"][0] < resumed["worker-0"][1] < STEPS, resumed
    return resumed["worker-0"]


def _kept_whole(run: Run, result: dict[str, Any]) -> None:
    """A sane model; it and the last checkpoint are in HDFS, every file there readable whole,
    no half-copied file left; the inputs read back whole."""
    assert result["metrics"]["auc"] > LEARNED, result["metrics"]
    model = f"{run.base}/model"
    assert run.client.read(f"{model}/checkpoints/checkpoint").startswith(f'model_checkpoint_path: "ckpt-{STEPS}"'.encode())
    kept = {e.path.removeprefix(f"{model}/"): e.size for e in _walk(run.client, model)}
    assert {"model/saved_model.pb", f"checkpoints/ckpt-{STEPS}.index"} <= set(kept), sorted(kept)
    assert not [p for p in kept if p.endswith(("._COPYING_", ".tfdist-tmp"))], sorted(kept)
    for path, size in kept.items():
        assert len(run.client.read(f"{model}/{path}")) == size, path
    for f in run.data.iterdir():
        assert run.client.read(f"{run.base}/quick/{f.name}") == f.read_bytes(), f.name


def _checkpoint_step(run: Run) -> int:
    """The step of the latest checkpoint whose state file is in HDFS together with the files
    it names (0: none yet). The state file alone is not enough: killed while the copier
    copied ckpt-N, a container left the state naming ckpt-N without its files once in three
    runs, and the other worker's restart then could not resume ("Couldn't match files for
    checkpoint"), which the test is not about (left as a question for the output copier)."""
    checkpoints = f"{run.base}/model/checkpoints"
    state = run.client.read(f"{checkpoints}/checkpoint") if run.client.status(f"{checkpoints}/checkpoint") else b""
    found = re.match(rb'model_checkpoint_path: "ckpt-(\d+)"', state)
    if not found:
        return 0
    names = {Path(e.path).name for e in run.client.listdir(checkpoints)}
    step = int(found.group(1))
    has = {f"ckpt-{step}.index"} <= names and any(n.startswith(f"ckpt-{step}.data-") for n in names)
    return step if has else 0


def _await_resumed(run: Run, runs: Path) -> int:
    """Until worker-0's restart (its log in the run directory, written as the job runs) has
    said which files its input pipeline reads and the step it resumed at: that step."""
    deadline = time.monotonic() + 400
    while True:
        log = "".join(p.read_text() for p in runs.glob(f"{JOB}-*/logs/worker-0.log"))
        resumed = re.findall(r"resumed from \S+/checkpoints/ckpt-\d+ at step (\d+)", log)
        if resumed and len(shares_read(log)) == 2:
            return int(resumed[0])
        if run.proc.poll() is not None:
            err = run.proc.stderr.read() if run.proc.stderr else ""
            pytest.fail(f"tfdist ended (exit {run.proc.returncode}) before worker-0 resumed: {err[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"worker-0 did not resume within 400 s: {log[-3000:]}")
        time.sleep(0.3)


def _await_checkpoint_after(run: Run, step: int) -> None:
    """Until the checkpoint in HDFS is of a step after ``step``."""
    deadline = time.monotonic() + 400
    while _checkpoint_step(run) <= step:
        if run.proc.poll() is not None:
            err = run.proc.stderr.read() if run.proc.stderr else ""
            pytest.fail(f"tfdist ended (exit {run.proc.returncode}) before a checkpoint after step {step}: {err[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no checkpoint after step {step} reached HDFS within 400 s")
        time.sleep(0.3)


@pytest.mark.restarts_cluster
def test_recsys_on_yarn_from_hdfs_resumes_there_after_a_killed_task_and_a_killed_container(
        yarn_env: Cluster, hdfs: Hdfs, tmp_path: Path) -> None:
    """First, worker-1's task SIGKILLed and DataNode dn-1 stopped once the first checkpoint is
    in HDFS: the task restarts in its container (its staged files cached) and resumes from the
    HDFS checkpoint. Then, once worker-0's restart reads its files and a checkpoint after the
    step it resumed at is in HDFS, worker-0, the writer, SIGKILLed with its agent (the whole
    container, as a NodeManager or the OOM killer would): its copier dies with it, so what
    survives is what had reached HDFS. YARN relaunches the container in place, its new agent
    stages the same files, the job resumes from the HDFS checkpoint at a later step and
    succeeds, with everything it kept in HDFS readable on dn-0 alone."""
    run = _start(hdfs, tmp_path)
    stopped = False
    try:
        run.await_checkpoint()
        os.kill(task_process("worker-1", time.monotonic() + 400, job=JOB, cli=run.proc), signal.SIGKILL)
        hdfs.datanode("stop", "dn-1")
        stopped = True

        # the second fault once worker-0's restart runs (it read its files) and a checkpoint
        # after the step it resumed at is in HDFS, so that the second resume is at a later step
        _await_checkpoint_after(run, _await_resumed(run, tmp_path / "runs"))
        task = task_process("worker-0", time.monotonic() + 400, job=JOB, cli=run.proc, attempt=1)
        agent = psutil.Process(task).ppid()
        assert "tfdist_boot.py" in " ".join(psutil.Process(agent).cmdline())
        for pid in (agent, task):  # the agent first: it cannot report its task's end
            os.kill(pid, signal.SIGKILL)
        result, logs = run.ended()

        _same_files_every_start(run, result, logs)
        for log in logs.values():  # the first restart, in the same container, copied nothing again
            assert "(copied 0, cached 4)" in log, log[-3000:]
        assert "runs in a relaunched container" in logs["worker-0"], logs["worker-0"][-3000:]
        tasks = {t["name"]: t for t in result["tasks"]}
        assert tasks["worker-1"]["restarts"] == 2 and tasks["worker-1"]["state"] == "succeeded", tasks
        assert tasks["worker-0"]["restarts"] == 2 and tasks["worker-0"]["state"] == "succeeded", tasks
        _resumed_from_hdfs(logs)
        _kept_whole(run, result)  # with dn-1 down: every block had its copy on dn-0
    finally:
        run.stop()
        if stopped:
            hdfs.datanode("start", "dn-1")
            hdfs.wait_ready()
        run.client.delete(run.base, recursive=True)


def _walk(client: webhdfs.WebHdfs, path: str) -> list[webhdfs.Entry]:
    """Every file under ``path``."""
    found = []
    for entry in client.listdir(path):
        found.extend(_walk(client, entry.path) if entry.is_dir else [entry])
    return found
