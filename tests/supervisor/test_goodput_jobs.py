"""Goodput of real TensorFlow jobs with a task SIGKILLed mid-training: the breakdown adds up
to the wall time, the restored step is the last backup's, and the work after it is lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import tfdist

PROGRAM = Path(__file__).with_name("goodput_program.py")
RESTART = "restart={policy: on-failure, max_restarts: 2, backoff_seconds: 0}"


def run(tmp_path: Path, *args: str) -> dict:
    proc = tfdist("run", "-q", "--json", "--runs-dir", str(tmp_path), "--set", RESTART, *args,
                  timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def adds_up(g: dict, result: dict) -> None:
    assert sum(g["seconds"].values()) == pytest.approx(g["wall_seconds"], abs=0.01)
    assert g["wall_seconds"] == pytest.approx(result["duration"], abs=0.01)
    for a in g["attempts"]:
        assert sum(a["seconds"].values()) == pytest.approx(a["end"] - a["start"], abs=0.01)


@pytest.mark.integration
def test_mwms_fit_with_a_worker_killed_after_an_epoch(tmp_path: Path) -> None:
    # 30 steps an epoch, the backup at each epoch's end: killed at step 50, resumed from 30
    result = run(tmp_path, "--workers", "2", "--", "python", str(PROGRAM), "--kill", "worker-1:50")
    g = result["goodput"]
    assert result["restarts_used"] == 1 and g is not None, result
    adds_up(g, result)
    a0, a1 = g["attempts"]
    assert a1["restored_step"] == 30 and a0["kept_step"] == 30 and a0["last_step"] >= 30
    assert a0["seconds"]["lost"] > 0 and a1["seconds"]["restart"] > 0 and a0["seconds"]["startup"] > 0
    assert g["seconds"]["checkpoint"] > 0 and g["checkpoint_saves"] >= 4
    assert g["steps_kept"] == 120 and 0 < g["goodput"] < 1


@pytest.mark.integration
def test_pss_custom_loop_with_the_chief_killed(tmp_path: Path) -> None:
    # saves every 30 steps (6 calls of 5): the chief dies at step 60 before saving it, so the
    # restarted chief (and ps) resume from step 30 and steps 31-60 are done again
    result = run(tmp_path, "--chief", "--workers", "1", "--ps", "1", "--", "python", str(PROGRAM),
                 "--loop", "--epochs", "3", "--kill", "chief-0:60")
    g = result["goodput"]
    assert result["restarts_used"] == 1 and g is not None, result
    adds_up(g, result)
    a0, a1 = g["attempts"]
    assert a0["restored_step"] == 0 and a1["restored_step"] == 30 and a0["kept_step"] == 30
    # (steps 31-60 may all fall between two throttled step reports: lost seconds, not steps)
    assert 30 <= a0["last_step"] <= 60 and g["steps_kept"] == 90
    assert a0["seconds"]["lost"] > 0 and a1["seconds"]["restart"] > 0
    assert g["checkpoint_saves"] >= 3 and g["seconds"]["checkpoint"] > 0
