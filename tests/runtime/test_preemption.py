"""Preemption under MultiWorkerMirrored: SIGTERM to one worker mid-epoch makes every
worker save the step they agreed on and exit 143; tfdist restarts the group, which resumes
at the next batch of that epoch instead of redoing the epoch."""

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


def test_sigterm_saves_the_step_and_the_group_resumes_there(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [*TFDIST, "run", "-q", "--json", "--runs-dir", str(runs), str(ROOT / "examples/digits/mwms.yaml"),
         "--set", 'command=[python, train_fit.py, --epochs, "3"]',
         "--set", "restart={policy: exit-code, max_restarts: 2, backoff_seconds: 0}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    sent = False
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline and not sent:
        run_dirs = list(runs.glob("*")) if runs.exists() else []
        if run_dirs and any(p["task"] == "chief-0" and p.get("epoch") == 1 for p in read_jsonl(run_dirs[0] / "progress.jsonl")):
            time.sleep(0.3)  # into epoch 2
            pid = [e["pid"] for e in read_jsonl(run_dirs[0] / "events.jsonl") if e["task"] == "worker-1" and e.get("pid")][-1]
            subprocess.run(["kill", "-TERM", str(pid)], check=True)
            sent = True
        time.sleep(0.05)
    out, err = proc.communicate(timeout=300)
    assert sent, err[-2000:]
    result = json.loads(out)
    assert proc.returncode == 0, json.dumps(result.get("root_cause"))
    assert result["restarts_used"] == 1  # exit 143 is retryable even under exit-code
    logs = {p.stem: p.read_text() for p in (Path(result["run_dir"]) / "logs").glob("*.log")}
    assert "worker-1 got SIGTERM, saving a backup" in logs["worker-1"]
    saved = {m.group(1): (int(m.group(2)), int(m.group(3))) for text in logs.values() for m in SAVED.finditer(text)}
    resumed = {m.group(1): (int(m.group(2)), int(m.group(3))) for text in logs.values() for m in RESUMED.finditer(text)}
    assert set(saved) == {"chief-0", "worker-0", "worker-1"}, saved
    assert len(set(saved.values())) == 1, f"workers saved different steps: {saved}"
    assert resumed == saved
    epoch, _batch = saved["chief-0"]
    chief = [p for p in read_jsonl(Path(result["run_dir"]) / "progress.jsonl") if p["task"] == "chief-0" and "epoch" in p]
    after = [p["epoch"] for p in chief if p["attempt"] == 1 and not p.get("final")]
    # resume in the saved epoch (or the next one, had the agreed step been its last batch)
    assert after and min(after) in (epoch, epoch + 1), f"the group redid work: {after} after saving epoch {epoch}"
    assert max(after) == 3
