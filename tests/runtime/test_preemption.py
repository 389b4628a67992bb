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

    The MultiWorkerMirrored jobs run 10 epochs (a few seconds: no per-step collective any
    more), so that a test process slowed down by a loaded machine still sends the signal
    while training is on."""
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
    return [p["epoch"] for p in rows
            if p["task"] == task and p["attempt"] == attempt and not p.get("final") and "epoch" in p]


def test_sigterm_saves_the_step_and_the_group_resumes_there(tmp_path: Path) -> None:
    result, logs = sigterm_after_epoch_1(tmp_path, "mwms.yaml", '[python, train_fit.py, --epochs, "10"]',
                                         "chief-0", "worker-0", "roles.worker.replicas=1")
    assert "worker-0 got SIGTERM; saving a backup if every worker reaches an agreed step" in logs["worker-0"]
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
    assert max(after) == 10


CUSTOM_SAVED = re.compile(r"tfdist: (\S+) preempted: saved a checkpoint at step (\d+); exiting")
CUSTOM_RESUMED = re.compile(r"(\S+): resumed from \S+ at step (\d+)")


def test_custom_loop_guard_saves_the_same_step_on_every_worker(tmp_path: Path) -> None:
    result, logs = sigterm_after_epoch_1(tmp_path, "mwms_custom_loop.yaml",
                                         '[python, train_custom_loop.py, --epochs, "10"]', "worker-0", "worker-1")
    assert "worker-1 got SIGTERM; saving a backup if every worker reaches an agreed step" in logs["worker-1"]
    saved = {m.group(1): int(m.group(2)) for text in logs.values() for m in CUSTOM_SAVED.finditer(text)}
    resumed = {m.group(1): int(m.group(2)) for text in logs.values() for m in CUSTOM_RESUMED.finditer(text)}
    assert set(saved) == {"worker-0", "worker-1"} and len(set(saved.values())) == 1, saved
    assert resumed == saved  # the restarted group starts at the saved step, mid-epoch
    after = epochs_of(result, "worker-0", 1)  # from the saved step's epoch on, not from epoch 1
    assert after and after[0] >= 2 and after == list(range(after[0], 11)), after


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


# Exact moments, from a program that SIGTERMs its own tasks (tests/runtime/preempt_program.py);
# each job chains several moments, one per attempt, to pay TensorFlow's start-up less often.

PROGRAM_SAVED = re.compile(r"tfdist: (\S+) preempted: (.*); exiting")


def run_program(tmp_path: Path, args: list[str], restarts: int) -> tuple[dict, dict[str, list[str]], list[dict]]:
    """Run preempt_program.py on two MWMS workers under the exit-code policy (only 143 is
    retried); return the summary, each task's log split by attempt, and the progress rows."""
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({
        "name": "preempt-moments", "strategy": "multi_worker_mirrored",
        "command": ["python", "preempt_program.py", *args], "workdir": str(ROOT / "tests" / "runtime"),
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2"}, "roles": {"worker": 2},
        "restart": {"policy": "exit-code", "max_restarts": restarts, "backoff_seconds": 0},
    }))
    out = subprocess.run([*TFDIST, "run", "-q", "--json", "--runs-dir", str(tmp_path / "runs"), str(job)],
                         capture_output=True, text=True, timeout=300)
    result = json.loads(out.stdout)
    run_dir = Path(result["run_dir"])
    logs = {p.stem: re.split(r"--- tfdist: \S+ attempt \d+ started[^\n]*\n", p.read_text())[1:]
            for p in (run_dir / "logs").glob("*.log")}
    assert out.returncode == 0, (json.dumps(result.get("root_cause")), {k: v[-1][-2000:] for k, v in logs.items()})
    assert result["restarts_used"] == restarts
    return result, logs, read_jsonl(run_dir / "progress.jsonl")


def said_by_attempt(logs: dict[str, list[str]]) -> dict[tuple[str, int], list[tuple[str, str]]]:
    return {(task, attempt): PROGRAM_SAVED.findall(text) for task, parts in logs.items()
            for attempt, text in enumerate(parts)}


def not_once(said: dict, logs: dict[str, list[str]], last: int) -> str:
    """What each attempt before ``last`` said, and the end of the log of any that did not
    say exactly once why it left (a str: pytest cuts a dict in an assertion message)."""
    odd = [k for k, s in said.items() if k[1] < last and len(s) != 1]
    return "\n".join([repr(said), *(f"--- {t} attempt {a}:\n{logs[t][a][-1500:]}" for t, a in odd)])


def exits(result: dict) -> list[tuple[str, int, int]]:
    rows = read_jsonl(Path(result["run_dir"]) / "events.jsonl")
    return sorted((e["task"], e["attempt"], e["exit_code"]) for e in rows if "exit_code" in e)


def test_fit_two_workers_at_once_an_epoch_boundary_and_the_last_step(tmp_path: Path) -> None:
    """3 epochs of 8 steps. Attempt 0: both workers SIGTERMed at epoch 1 batch 3. Attempt 1:
    worker-1 at the end of epoch 2 (between epochs). Attempt 2: worker-0 at the very last
    batch, so the agreed step lies beyond the end. Every time: one agreed step on both,
    exit 143 (no hang), and the next attempt resumes there. Step reports arrive mid-epoch."""
    kills = ["0:worker-0:1:3", "0:worker-1:1:3", "1:worker-1:2:end", "2:worker-0:3:8"]
    result, logs, rows = run_program(tmp_path, [x for k in kills for x in ("--kill", k)], restarts=3)
    said = said_by_attempt(logs)
    assert all(len(s) == 1 for k, s in said.items() if k[1] < 3), not_once(said, logs, 3)  # but the last
    # attempt 0: SIGTERM after batch 3 (count 3) on both -> both propose 5; one insert wins
    assert {s[0][1] for k, s in said.items() if k[1] == 0} == {"saved a backup at epoch 1, batch 5"}, repr(said)
    # attempt 1: resumed at epoch 1 batch 6; SIGTERM between epochs 2 and 3 -> first batch check of
    # epoch 3 proposes 2 steps on: batch 3 of epoch 3 on both
    assert all("resuming from backup saved at epoch 1, batch 5" in logs[t][1] for t in logs)
    assert {s[0][1] for k, s in said.items() if k[1] == 1} == {"saved a backup at epoch 3, batch 3"}, repr(said)
    # attempt 2: SIGTERM at the last batch: found at the end by both, the final backup kept
    assert all("resuming from backup saved at epoch 3, batch 3" in logs[t][2] for t in logs)
    assert {s[0][1] for k, s in said.items() if k[1] == 2} == {"training ended; kept the backup of epoch 3"}, repr(said)
    # attempt 3: nothing left to train
    assert all("resuming from backup saved at epoch 3, batch 8" in logs[t][3] and "training done" in logs[t][3]
               for t in logs)
    assert exits(result) == sorted([(t, a, 143) for t in logs for a in range(3)] + [(t, 3, 0) for t in logs])
    # step reports (every 3 steps: 11 and 14 in epoch 2 of attempt 1) arrive before that epoch's report
    # (goodput marks, rows with a "mark", are not step or epoch reports)
    mine = [r for r in rows if r["attempt"] == 1 and r["task"] == "worker-0" and "mark" not in r]
    order = [r["step"] if "epoch" not in r else f"epoch {r['epoch']}" for r in mine if not r["final"]]
    assert order[order.index(11):order.index("epoch 2") + 1] == [11, 14, "epoch 2"], order
    assert all(r["steps_per_sec"] > 0 and "loss" in r for r in mine if r["step"] in (11, 14) and "epoch" not in r)


def test_custom_loop_guard_two_workers_at_once_and_the_last_step(tmp_path: Path) -> None:
    """The guard, 24 steps. Attempt 0: both workers SIGTERMed after step 5: both save step
    7. Attempt 1: worker-1 after the last step: ``at_end()`` finds it on both, which save
    the end; attempt 2 has nothing left to train."""
    kills = ["0:worker-0:1:5", "0:worker-1:1:5", "1:worker-1:1:24"]
    result, logs, _ = run_program(tmp_path, ["--loop", *[x for k in kills for x in ("--kill", k)]], restarts=2)
    said = said_by_attempt(logs)
    assert all(len(s) == 1 for k, s in said.items() if k[1] < 2), not_once(said, logs, 2)
    assert {s[0][1] for k, s in said.items() if k[1] == 0} == {"saved a checkpoint at step 7"}, repr(said)
    assert all("resumed at step 7" in logs[t][1] for t in logs)
    assert {s[0][1] for k, s in said.items() if k[1] == 1} == {"saved the end at step 24"}, repr(said)
    assert all("resumed at step 24" in logs[t][2] and "training done" in logs[t][2] for t in logs)
    assert exits(result) == sorted([(t, a, 143) for t in logs for a in range(2)] + [(t, 2, 0) for t in logs])
