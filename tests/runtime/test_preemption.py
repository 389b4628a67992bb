"""Preemption: SIGTERM to a task saves before it exits 143 (retryable), and the restarted
job resumes there.

- MultiWorkerMirrored ``fit``: every worker saves the step they agreed on; the group
  resumes at the next batch of that epoch instead of redoing the epoch.
- A MultiWorkerMirrored custom loop with ``runtime.preemption_guard()``: the same, with
  the loop's own checkpoint.
- A parameter-server chief (custom loop, and ``fit``): it finishes the epoch it is in,
  saves it, exits; the restarted chief resumes at the next epoch.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, TFDIST, read_jsonl

pytestmark = pytest.mark.integration

SAVED = re.compile(r"tfdist: (\S+) preempted: saved a backup at epoch (\d+), batch (\d+); exiting")
RESUMED = re.compile(r"tfdist: (\S+) resuming from backup saved at epoch (\d+), batch (\d+)")


def sigterm_after_epoch_1(tmp_path: Path, jobfile: str, command: str, reporter: str, victim: str,
                          *sets: str) -> tuple[dict, dict[str, str]]:
    """Run an example under the exit-code policy (143 retryable, nothing else), SIGTERM
    ``victim`` 0.3 s after ``reporter`` reported epoch 1; return the summary and the logs.

    The jobs run 4 epochs, so that a test process slowed down by a loaded machine still
    sends the signal while training is on."""
    runs = tmp_path / "runs"
    overrides = [f"command={command}", "restart={policy: exit-code, max_restarts: 2, backoff_seconds: 0}", *sets]
    proc = subprocess.Popen(
        [*TFDIST, "run", "-q", "--json", "--runs-dir", str(runs), str(ROOT / "examples/digits" / jobfile),
         *[x for o in overrides for x in ("--set", o)]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    sent = False
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline and not sent:
        run_dirs = list(runs.glob("*")) if runs.exists() else []
        if run_dirs and any(p["task"] == reporter and p.get("epoch") == 1 for p in read_jsonl(run_dirs[0] / "progress.jsonl")):
            time.sleep(0.3)  # into epoch 2
            pid = [e["pid"] for e in read_jsonl(run_dirs[0] / "events.jsonl") if e["task"] == victim and e.get("pid")][-1]
            subprocess.run(["kill", "-TERM", str(pid)], check=True)
            sent = True
        time.sleep(0.05)
    out, err = proc.communicate(timeout=300)
    assert sent, err[-2000:]
    result = json.loads(out)
    assert proc.returncode == 0, json.dumps(result.get("root_cause"))
    assert result["restarts_used"] == 1  # exit 143 is retryable even under exit-code
    logs = {p.stem: p.read_text() for p in (Path(result["run_dir"]) / "logs").glob("*.log")}
    return result, logs


def epochs_of(result: dict, task: str, attempt: int) -> list[int]:
    rows = read_jsonl(Path(result["run_dir"]) / "progress.jsonl")
    return [p["epoch"] for p in rows if p["task"] == task and p["attempt"] == attempt and not p.get("final")]


def test_sigterm_saves_the_step_and_the_group_resumes_there(tmp_path: Path) -> None:
    result, logs = sigterm_after_epoch_1(tmp_path, "mwms.yaml", '[python, train_fit.py, --epochs, "4"]',
                                         "chief-0", "worker-0", "roles.worker.replicas=1")
    assert "worker-0 got SIGTERM, saving before exiting" in logs["worker-0"]
    saved = {m.group(1): (int(m.group(2)), int(m.group(3))) for text in logs.values() for m in SAVED.finditer(text)}
    resumed = {m.group(1): (int(m.group(2)), int(m.group(3))) for text in logs.values() for m in RESUMED.finditer(text)}
    assert set(saved) == {"chief-0", "worker-0"}, saved
    assert len(set(saved.values())) == 1, f"workers saved different steps: {saved}"
    assert resumed == saved
    epoch, _batch = saved["chief-0"]
    chief = [p for p in read_jsonl(Path(result["run_dir"]) / "progress.jsonl") if p["task"] == "chief-0" and "epoch" in p]
    after = [p["epoch"] for p in chief if p["attempt"] == 1 and not p.get("final")]
    # resume in the saved epoch (or the next one, had the agreed step been its last batch)
    assert after and min(after) in (epoch, epoch + 1), f"the group redid work: {after} after saving epoch {epoch}"
    assert max(after) == 4


CUSTOM_SAVED = re.compile(r"tfdist: (\S+) preempted: saved a checkpoint at step (\d+); exiting")
CUSTOM_RESUMED = re.compile(r"(\S+): resumed from \S+ at step (\d+)")


def test_custom_loop_guard_saves_the_same_step_on_every_worker(tmp_path: Path) -> None:
    result, logs = sigterm_after_epoch_1(tmp_path, "mwms_custom_loop.yaml",
                                         '[python, train_custom_loop.py, --epochs, "4"]', "worker-0", "worker-1")
    assert "worker-1 got SIGTERM, saving before exiting" in logs["worker-1"]
    saved = {m.group(1): int(m.group(2)) for text in logs.values() for m in CUSTOM_SAVED.finditer(text)}
    resumed = {m.group(1): int(m.group(2)) for text in logs.values() for m in CUSTOM_RESUMED.finditer(text)}
    assert set(saved) == {"worker-0", "worker-1"} and len(set(saved.values())) == 1, saved
    assert resumed == saved  # the restarted group starts at the saved step, mid-epoch
    after = epochs_of(result, "worker-0", 1)  # from the saved step's epoch on, not from epoch 1
    assert after in ([2, 3, 4], [3, 4]), after


def test_parameter_server_chief_saves_its_epoch_and_resumes_after_it(tmp_path: Path) -> None:
    """A custom loop (runtime.Loop) with the guard: no agreement needed, only the chief runs it."""
    result, logs = sigterm_after_epoch_1(tmp_path, "pss_coordinator.yaml",
                                         '[python, train_pss_coordinator.py, --epochs, "4"]', "chief-0", "chief-0",
                                         "roles.worker.replicas=1", "roles.ps.replicas=1")
    assert re.search(r"tfdist: chief-0 preempted: epoch (\d) was saved; exiting", logs["chief-0"])
    saved = int(re.search(r"preempted: epoch (\d) was saved", logs["chief-0"]).group(1))
    assert f"at epoch {saved + 1}" in logs["chief-0"]  # "resumed from ... at epoch N+1"
    assert epochs_of(result, "chief-0", 0)[-1] == saved
    assert epochs_of(result, "chief-0", 1) == list(range(saved + 1, 5))


def test_parameter_server_fit_chief_leaves_after_the_epochs_backup(tmp_path: Path) -> None:
    result, logs = sigterm_after_epoch_1(tmp_path, "pss_fit.yaml", '[python, train_pss_fit.py, --epochs, "4"]',
                                         "chief-0", "chief-0", "roles.evaluator.replicas=0", "roles.worker.replicas=1")
    found = re.search(r"tfdist: chief-0 preempted: epoch (\d) was backed up; exiting", logs["chief-0"])
    assert found, logs["chief-0"][-3000:]
    saved = int(found.group(1))
    assert epochs_of(result, "chief-0", 1) == list(range(saved + 1, 5))  # BackupAndRestore resumed after it
