"""Every example runs as a real cluster on loopback through `tfdist run`, with few epochs.

Each test checks that the job learned (accuracy well above the 0.1 of chance for ten
digits), that only the chief's model directory holds a saved model and that no
temporary directory is left, and, for jobs with an evaluator, that it exited by itself.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TFDIST = Path(sys.executable).parent / "tfdist"
LEARNED = 0.6  # chance is 0.1


def run_example(tmp_path: Path, job: str, *overrides: str) -> tuple[dict, Path, Path]:
    """Run ``tfdist run --quiet --json``; return (summary, run_dir, the tasks' TMPDIR)."""
    tmpdir = tmp_path / "task-tmp"
    tmpdir.mkdir()
    sets = [x for o in (*overrides, f"env.TMPDIR={tmpdir}") for x in ("--set", o)]
    cmd = [str(TFDIST), "run", "--quiet", "--json", "--runs-dir", str(tmp_path / "runs")]
    out = subprocess.run([*cmd, str(EXAMPLES / job), *sets], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads(out.stdout[out.stdout.index("{") :])
    assert summary["state"] == "succeeded"
    return summary, Path(summary["run_dir"]), tmpdir


def progress(run_dir: Path, task: str) -> list[dict]:
    """The task's progress reports, as the launcher collected them in progress.jsonl (not the
    goodput marks beside them: rows with a "mark", which carry no step or epoch report)."""
    lines = (run_dir / "progress.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("task") == task and "mark" not in r]


def final_report(run_dir: Path, task: str) -> dict:
    reports = [r for r in progress(run_dir, task) if r.get("final")]
    assert reports, f"{task} sent no final progress report"
    return reports[-1]


def assert_only_chief_saved(run_dir: Path, tmpdir: Path) -> None:
    model = run_dir / "model"
    assert (model / "saved_model.pb").is_file()
    assert (model / "variables" / "variables.index").is_file()
    saved = {p.parent for p in run_dir.rglob("saved_model.pb")}
    saved |= {p.parent for p in tmpdir.rglob("saved_model.pb")}
    assert saved == {model}
    assert not list(run_dir.rglob("workertemp_*")), "a worker's temp directory was left"
    left = [p.name for p in tmpdir.iterdir() if p.name.startswith("tfdist-")]
    assert left == [], "a temporary save directory was left"


def task_states(summary: dict) -> dict[str, tuple[str, int]]:
    return {t["name"]: (t["state"], t["exit_code"]) for t in summary["tasks"]}


def test_mwms_fit(tmp_path):
    """MultiWorkerMirrored, chief + 2 workers, learns; every task has its own log."""
    summary, run_dir, tmpdir = run_example(
        tmp_path, "digits/mwms.yaml", 'command=[python, train_fit.py, --epochs, "2"]'
    )
    assert summary["metrics"]["accuracy"] > LEARNED
    final = final_report(run_dir, "chief-0")
    assert final["epoch"] == 2 and final["metrics"]["accuracy"] == summary["metrics"]["accuracy"]
    epochs = [r for r in progress(run_dir, "chief-0") if not r.get("final") and "epoch" in r]  # not step reports
    assert [r["epoch"] for r in epochs] == [1, 2]
    assert all(r["examples_per_sec"] > 0 for r in epochs)
    assert set(task_states(summary).values()) == {("succeeded", 0)}
    assert sorted(p.name for p in (run_dir / "logs").glob("*.log")) == ["chief-0.log", "worker-0.log", "worker-1.log"]
    assert_only_chief_saved(run_dir, tmpdir)
    # checkpoints for an evaluator: only the chief's, the workers' copies are removed
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("*.index")) == [
        "ckpt-001.index",
        "ckpt-002.index",
    ]


def test_tfjob_example_runs_locally_as_processes(tmp_path):
    """A cluster job debugged on a laptop: the Kubeflow TFJob file (examples/k8s) runs as a
    real local TF cluster, its command from the file's folder. (With the examples, not in the
    Kubernetes tests' group: it needs no control plane, which ``make test`` stops once that
    group is done.)"""
    summary, run_dir, tmpdir = run_example(
        tmp_path, "k8s/tfjob-digits.yaml", 'command=[python, ../digits/train_fit.py, --epochs, "2"]'
    )
    assert sorted(t["name"] for t in summary["tasks"]) == ["chief-0", "worker-0", "worker-1"]
    assert summary["metrics"]["accuracy"] > LEARNED
    assert_only_chief_saved(run_dir, tmpdir)


def test_pss_fit_with_sidecar_evaluator(tmp_path):
    """ParameterServer, chief + 2 workers + 1 ps + evaluator: it completes, the ps and the
    workers are torn down when training ends, the evaluator leaves by itself."""
    summary, run_dir, tmpdir = run_example(
        tmp_path, "digits/pss_fit.yaml", 'command=[python, train_pss_fit.py, --epochs, "2"]'
    )
    assert summary["metrics"]["accuracy"] > LEARNED
    states = task_states(summary)
    # the evaluator left by itself (succeeded), it was not stopped by the launcher
    assert states["evaluator-0"] == ("succeeded", 0)
    assert states["chief-0"] == ("succeeded", 0)
    # stopped by tfdist once training ended; the servers leave promptly with 128 + SIGTERM
    assert states["ps-0"] == ("stopped", 143) and states["worker-0"] == ("stopped", 143)
    evaluations = [r for r in progress(run_dir, "evaluator-0") if not r.get("final")]
    assert evaluations and evaluations[-1]["checkpoint"] == "ckpt-002"
    final = final_report(run_dir, "evaluator-0")
    assert final["metrics"]["accuracy"] > LEARNED and "gave_up" not in final
    assert_only_chief_saved(run_dir, tmpdir)


def test_pss_coordinator_partitioned_embedding(tmp_path):
    summary, run_dir, tmpdir = run_example(
        tmp_path,
        "digits/pss_coordinator.yaml",
        'command=[python, train_pss_coordinator.py, --epochs, "3", --report-every-steps, "10"]',
    )
    assert summary["metrics"]["accuracy"] > LEARNED
    final = final_report(run_dir, "chief-0")
    assert final["shards"] == 2  # options.partition split the table over both ps
    # runtime.Loop reports every scheduled call (10 steps) as it finishes, before the epoch's report
    rows = [r for r in progress(run_dir, "chief-0") if not r.get("final")]
    steps = [r["step"] for r in rows[: next(i for i, r in enumerate(rows) if "epoch" in r)]]
    assert len(steps) >= 2 and steps == list(range(10, 10 * len(steps) + 1, 10)), rows
    assert rows[len(steps)]["epoch"] == 1 and rows[len(steps)]["step"] == steps[-1]
    assert_only_chief_saved(run_dir, tmpdir)


def test_mirrored_single_task(tmp_path):
    summary, run_dir, tmpdir = run_example(
        tmp_path, "digits/mirrored.yaml", 'command=[python, train_fit.py, --epochs, "2"]'
    )
    assert summary["metrics"]["accuracy"] > LEARNED
    assert list(task_states(summary)) == ["chief-0"]
    assert_only_chief_saved(run_dir, tmpdir)


def test_plain_tf_config_script(tmp_path):
    source = (EXAMPLES / "plain_tf_config" / "train.py").read_text()
    assert not re.search(r"^\s*(import|from) tfdist", source, re.M), "must not import tfdist"
    summary, run_dir, tmpdir = run_example(
        tmp_path,
        "plain_tf_config/job.yaml",
        'command=[python, train.py, --epochs, "2"]',
        "roles.worker.replicas=2",
    )
    # no progress reports: the accuracy comes from Keras' own log of worker-0 (the chief)
    log = (run_dir / "logs" / "worker-0.log").read_text()
    accuracies = [float(a) for a in re.findall(r" accuracy: ([0-9.]+)", log)]
    assert len(accuracies) == 2 and accuracies[-1] > LEARNED
    assert_only_chief_saved(run_dir, tmpdir)


def test_mwms_fit_resumes_after_a_crash(tmp_path):
    """A worker dies after epoch 1; tfdist restarts the group and BackupAndRestore
    resumes at epoch 2 instead of starting over."""
    summary, run_dir, tmpdir = run_example(
        tmp_path,
        "digits/mwms.yaml",
        'command=[python, train_fit.py, --epochs, "2", --crash-once-at-epoch, "1"]',
        "roles.worker.replicas=1",
        "restart.policy=on-failure",
        "restart.backoff_seconds=0",
    )
    assert summary["restarts_used"] == 1
    assert summary["metrics"]["accuracy"] > LEARNED
    chief = [r for r in progress(run_dir, "chief-0") if "epoch" in r or r.get("final")]  # not step reports
    assert [(r["attempt"], r["epoch"]) for r in chief if not r["final"]] == [(0, 1), (1, 2)]
    assert chief[-1]["final"] and chief[-1]["step"] == 2 * chief[0]["step"]
    assert list((run_dir / "backup").iterdir()) == []  # removed after a finished fit
    assert_only_chief_saved(run_dir, tmpdir)


def test_mwms_custom_loop_learns_and_resumes_from_its_checkpoint(tmp_path):
    """The custom loop example, with worker-1 crashing once after epoch 1: the group
    restarts and resumes from the chief's epoch-1 checkpoint."""
    summary, run_dir, tmpdir = run_example(
        tmp_path,
        "digits/mwms_custom_loop.yaml",
        'command=[python, train_custom_loop.py, --epochs, "2", --crash-once-at-epoch, "1"]',
        "restart.backoff_seconds=0",
    )
    assert summary["restarts_used"] == 1
    assert summary["metrics"]["accuracy"] > LEARNED
    chief = [r for r in progress(run_dir, "worker-0") if not r["final"]]
    assert [(r["attempt"], r["epoch"]) for r in chief] == [(0, 1), (1, 2)]
    assert "resumed from" in (run_dir / "logs" / "worker-0.log").read_text()
    # both workers computed the same all-reduced numbers
    assert final_report(run_dir, "worker-1")["loss"] == final_report(run_dir, "worker-0")["loss"]
    assert (run_dir / "checkpoints" / "ckpt-002.index").is_file()
    assert_only_chief_saved(run_dir, tmpdir)


def test_sync_ps_backup_workers(tmp_path):
    """examples/sync_ps: K = 2 of 3 workers per step; every gradient sent is accounted for.
    With ``TF_NUM_INTEROP_THREADS=1`` (as on a shared machine, or what a one-CPU container
    gets by default): the workers' servers take 2 and say so; with 1 the loops hung."""
    summary, run_dir, _ = run_example(tmp_path, "sync_ps/job.yaml", 'command=[python, train.py, --steps, "60"]',
                                      "env.TF_NUM_INTEROP_THREADS=1")
    states = task_states(summary)
    assert states["chief-0"] == ("succeeded", 0)
    assert {states[t][0] for t in ("ps-0", "worker-0", "worker-1", "worker-2")} == {"stopped"}
    log = (run_dir / "logs" / "chief-0.log").read_text()
    result = json.loads(next(line for line in log.splitlines() if line.startswith('{"mode"')))
    assert (result["mode"], result["replicas_to_aggregate"], result["workers"]) == ("backup", 2, 3)
    for worker in ("worker-0", "worker-1", "worker-2"):
        assert "runs 2 inter-op threads" in (run_dir / "logs" / f"{worker}.log").read_text()
    assert result["steps"] == 60 and result["taken"] >= 2 * 60
    assert result["attempts"] >= result["taken"] + result["dropped"]
    assert result["test_accuracy"] > LEARNED
