"""Ctrl-C, SIGTERM and SIGKILL of tfdist, and stubborn tasks: no process is ever left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import BIN, TFDIST, still_alive

pytestmark = pytest.mark.integration


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*TFDIST, "run", "--runs-dir", str(tmp_path), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def wait_for_pids(proc: subprocess.Popen[str], count: int, timeout: float = 30) -> list[int]:
    """Read the console until ``count`` tasks printed their pid and their child's pid."""
    pids: list[int] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while len(pids) < 2 * count and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"pid (\d+) child (\d+)", line)
        if m:
            pids += [int(m.group(1)), int(m.group(2))]
    assert len(pids) == 2 * count, f"tasks did not start: {pids}"
    return pids


def gone(pids: list[int], timeout: float = 10) -> list[int]:
    """The pids still alive after ``timeout`` seconds (zombies count as gone)."""
    return still_alive(pids, timeout)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_every_task_and_exits_130(tmp_path: Path, sig: signal.Signals) -> None:
    proc = start(tmp_path, "--chief", "--workers", "2", "--", "python", str(BIN / "hang.py"))
    pids = wait_for_pids(proc, 3)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "interrupted" in out
    assert gone(pids) == []
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert summary["state"] == "interrupted"
    assert {t["state"] for t in summary["tasks"]} == {"stopped"}


def test_sigkill_of_tfdist_takes_its_tasks_and_their_children(tmp_path: Path) -> None:
    proc = start(tmp_path, "--workers", "2", "--ps", "1", "--chief", "--", "python", str(BIN / "hang.py"))
    pids = wait_for_pids(proc, 4)
    proc.kill()
    proc.wait(timeout=10)
    assert gone(pids) == []
    events = (next(tmp_path.glob("*/events.jsonl"))).read_text().splitlines()
    assert any(json.loads(e)["state"] == "running" for e in events)  # the record survived


def test_task_ignoring_sigterm_is_killed_after_grace(tmp_path: Path) -> None:
    job = tmp_path / "stubborn.yaml"
    job.write_text(
        f"name: stubborn\nstrategy: parameter_server\nstop_grace_seconds: 1\n"
        "roles:\n  chief: {replicas: 1, command: [python, "  # ends once both ignore SIGTERM
        f"{BIN / 'wait_for_logs.py'}, ignoring SIGTERM, '1', worker-0, ps-0]}}\n"
        f"  worker: {{replicas: 1, command: [python, {BIN / 'ignore_sigterm.py'}]}}\n"
        f"  ps: {{replicas: 1, command: [python, {BIN / 'ignore_sigterm.py'}]}}\n"
    )
    started = time.monotonic()
    proc = subprocess.run([*TFDIST, "run", "-q", "--json", "--runs-dir", str(tmp_path / "r"), str(job)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    codes = {t["name"]: t["exit_code"] for t in result["tasks"]}
    assert codes["ps-0"] == -signal.SIGKILL and codes["worker-0"] == -signal.SIGKILL
    assert time.monotonic() - started < 60
    for t in result["tasks"]:
        assert not psutil.pid_exists(t["pid"]) or psutil.Process(t["pid"]).status() == psutil.STATUS_ZOMBIE


def test_no_task_outlives_a_normal_job(tmp_path: Path) -> None:
    proc = subprocess.run([*TFDIST, "run", "--runs-dir", str(tmp_path), "--workers", "2", "--",
                           "python", str(BIN / "hang.py"), "0.5"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout
    pids = [int(p) for pair in re.findall(r"pid (\d+) child (\d+)", proc.stdout) for p in pair]
    assert len(pids) == 4
    assert gone(pids) == []  # grandchildren included


def test_hung_task_is_failed_with_reason(tmp_path: Path) -> None:
    job = tmp_path / "hang.yaml"
    job.write_text(f"name: hung\nhang_timeout_seconds: 1.5\nstop_grace_seconds: 1\n"
                   f"command: [python, {BIN / 'hang.py'}]\nroles: {{worker: 1}}\n")
    proc = subprocess.run([*TFDIST, "run", "-q", "--json", "--runs-dir", str(tmp_path / "r"), str(job)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    cause = json.loads(proc.stdout)["root_cause"]
    assert cause["task"] == "worker-0" and cause["description"].startswith("hung: no output")


def test_a_progress_bar_redrawn_with_carriage_returns_is_activity(tmp_path: Path) -> None:
    """Keras' fit(verbose=1) redraws its bar with \\r and no newline for a whole epoch; that is
    output, so the task is alive (the hang detector once counted only whole lines)."""
    job = tmp_path / "redraw.yaml"
    job.write_text(f"name: redraw\nhang_timeout_seconds: 1.5\nstop_grace_seconds: 1\n"
                   f"command: [python, {BIN / 'redraw.py'}, '4']\nroles: {{worker: 1}}\n")
    proc = subprocess.run([*TFDIST, "run", "-q", "--json", "--runs-dir", str(tmp_path / "r"), str(job)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = next((tmp_path / "r").glob("redraw-*/logs/worker-0.log")).read_text()
    assert "step 10" in log and "done" in log


@pytest.mark.parametrize("mode", ["keep", "close"])
def test_a_daemonised_grandchild_dies_with_its_job(tmp_path: Path, mode: str) -> None:
    """A process that left the task's group with setsid is still the job's: it carries the
    job's token in its environment and is killed when the task ends (it once survived the job
    and, holding the output pipe, held up every job end)."""
    proc = subprocess.run([*TFDIST, "run", "--runs-dir", str(tmp_path), "--workers", "1", "--",
                           "python", str(BIN / "daemonize.py"), mode],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pid = int(re.search(r"daemon pid (\d+)", proc.stdout).group(1))
    assert gone([pid]) == []


SHOW_FDS = ("import os; fds = sorted(int(f) for f in os.listdir('/proc/self/fd')); "
            "print('FDS', fds[:3], [f for f in fds[3:] if os.path.exists(f'/proc/self/fd/{f}')])")


def test_a_task_gets_no_descriptor_but_its_own_three(tmp_path: Path) -> None:
    """A descriptor given to tfdist (here a pipe, like a shell's 3>file) or opened by it (the
    store, logs, held ports, other tasks' pipes) never reaches a task."""
    r, w = os.pipe()
    try:
        proc = subprocess.run(
            [*TFDIST, "run", "-q", "--runs-dir", str(tmp_path), "--workers", "2", "--",
             sys.executable, "-c", SHOW_FDS],
            pass_fds=(r, w), capture_output=True, text=True, timeout=120,
        )
    finally:
        os.close(r)
        os.close(w)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    logs = next(tmp_path.iterdir()) / "logs"
    for name in ("worker-0", "worker-1"):
        shown = next(ln for ln in (logs / f"{name}.log").read_text().splitlines() if ln.startswith("FDS "))
        assert shown == "FDS [0, 1, 2] []"  # the listing's own descriptor is gone when checked
