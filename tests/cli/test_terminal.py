"""What ``tfdist run`` prints while a real job runs: the tasks' own lines and the job's
progress, not TensorFlow's start-up lines or each task's Keras progress bar."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN, TFDIST

pytestmark = pytest.mark.integration


def test_the_terminal_shows_the_jobs_progress_and_the_scripts_lines_not_keras_bars(tmp_path: Path) -> None:
    """Two workers fit with Keras's default bar. Piped, the terminal gets one ``tfdist:`` line
    per report of worker-0 (step reports within the epochs too: each once landed on the bar's
    line and was lost), every line the script printed (the traceback on stderr too), and no
    bar; each task's log keeps its bars."""
    proc = subprocess.run([*TFDIST, "run", "--runs-dir", str(tmp_path), "--workers", "2", "--",
                           "python", str(BIN / "keras_bars.py")],
                          capture_output=True, text=True, timeout=240)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "\r" not in out and "\x08" not in out and "[====" not in out and "Epoch 1/2" not in out, out
    assert "TFDIST_PROGRESS" not in out and "oneDNN" not in out
    for task in ("worker-0", "worker-1"):
        for said in ("starts", "in the middle of an epoch", "done"):
            assert f"[{task}] script: {task} {said}\n" in out
    assert "[worker-1] Traceback (most recent call last):\n" in out
    assert "[worker-1] ValueError: a handled error, printed\n" in out
    assert out.count("Keras progress bars are folded away") == 1
    progress = [line for line in out.splitlines() if line.startswith("tfdist: worker")]
    assert progress and all(line.startswith("tfdist: worker-0 ") for line in progress)  # the job's, one line each
    assert any(" step " in line and " epoch " not in line for line in progress)  # a step report's
    assert any(line.startswith("tfdist: worker-0 epoch 2/2 step 40 ") for line in progress)
    run_dir = next(tmp_path.glob("*/progress.jsonl")).parent
    reports = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    for task in ("worker-0", "worker-1"):
        steps = [r for r in reports if r["task"] == task and "epoch" not in r and "mark" not in r and not r["final"]]
        assert steps, f"{task}: no step report reached tfdist"
        log = (run_dir / "logs" / f"{task}.log").read_bytes().decode()  # as written: \r kept
        assert "Epoch 1/2" in log and "20/20 [====" in log and "\x08\r" in log
