"""Detached jobs through the real CLI: submit -> list -> status -> logs -> stop, lost
supervisors, 20 concurrent submits, clean, and the Python handle."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from tests.conftest import BIN, TFDIST, tfdist
from tfdist.backends.base import BackendOptions
from tfdist.states import JobState

pytestmark = pytest.mark.integration


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def status(job: str) -> dict:
    return json.loads(ok(tfdist("status", job, "--json")).stdout)


def wait_for(job: str, predicate, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = status(job)
        if predicate(st):
            return st
        assert time.monotonic() < deadline, f"timed out; last status: {json.dumps(st)[:2000]}"
        time.sleep(0.3)


def alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


_SUBMITTED: list[str] = []


def submit(tmp_path: Path, *args: str) -> str:
    proc = ok(tfdist("submit", "--runs-dir", str(tmp_path / "runs"), *args, cwd=tmp_path))
    job = proc.stdout.strip().splitlines()[-1]  # the job id is the last line
    _SUBMITTED.append(job)
    return job


@pytest.fixture(autouse=True)
def _no_job_outlives_its_test():
    """A test that fails half-way must not leave its detached job running (one did: a
    ``hang.py`` job that ran on for 40 minutes after its test failed)."""
    yield
    if not _SUBMITTED:
        return
    listed = tfdist("list", "--json")
    live = ({j["id"] for j in json.loads(listed.stdout or "[]") if JobState(j["state"]).active}
            if listed.returncode == 0 else set(_SUBMITTED))
    for job in set(_SUBMITTED) & live:
        tfdist("stop", job)
    _SUBMITTED.clear()


def test_submit_list_status_logs_follow_stop(tmp_path: Path, store_kind: str) -> None:
    job = submit(tmp_path, "--workers", "2", "--name", "life", "--", "python", str(BIN / "hang.py"))
    assert job.startswith("life-")
    # the job's own row turns running just after its tasks' (the store's writer thread: seen
    # "submitted" with both tasks running on PostgreSQL), so wait for both
    st = wait_for(job, lambda s: s["state"] == "running"
                  and [t["state"] for t in s["tasks"]] == ["running", "running"])
    assert st["detached"] == 1
    sup = st["supervisor_pid"]
    tasks = {t["name"]: t for t in st["tasks"]}
    assert all(t["pid"] and t["address"].startswith("127.0.0.1:") for t in tasks.values())

    listed = json.loads(ok(tfdist("list", "--json")).stdout)
    assert [(j["id"], j["state"], j["task_count"]) for j in listed] == [(job, "running", 2)]
    assert job in ok(tfdist("list")).stdout

    # logs: one task, every task (prefixed), the tail; wait for the pid line to be written
    wait_for(job, lambda s: "pid" in tfdist("logs", job, "--task", "worker-1").stdout)
    one = ok(tfdist("logs", job[:8], "--task", "worker-1")).stdout  # a unique prefix works
    assert f"worker-1 pid {tasks['worker-1']['pid']}" in one and "worker-0 pid" not in one
    every = ok(tfdist("logs", job)).stdout
    assert "[worker-0] worker-0 pid" in every and "[worker-1] worker-1 pid" in every
    assert len(ok(tfdist("logs", job, "--task", "worker-0", "--tail", "1")).stdout.splitlines()) == 1
    bad = tfdist("logs", job, "--task", "worker-7")
    assert bad.returncode == 2 and "has no task 'worker-7'" in bad.stderr

    follower = subprocess.Popen([*TFDIST, "logs", job, "--follow"], stdout=subprocess.PIPE, text=True)
    followed: list[str] = []
    reading = threading.Thread(target=lambda: followed.extend(follower.stdout or ()), daemon=True)
    reading.start()
    # following a running job stays and prints what is written after it started (shown by a
    # line appended now, not by a sleep: a follower that had not blocked would miss it)
    deadline = time.monotonic() + 60
    while not any("worker-1 pid" in line for line in followed):
        assert follower.poll() is None and time.monotonic() < deadline, followed
        time.sleep(0.05)
    with open(Path(st["run_dir"]) / "logs" / "worker-1.log", "a") as log:
        log.write("appended while followed\n")
    while not any("appended while followed" in line for line in followed):
        assert follower.poll() is None and time.monotonic() < deadline, followed
        time.sleep(0.05)

    stopped = ok(tfdist("stop", job))
    assert f"job {job} stopped" in stopped.stdout
    st = status(job)
    assert st["state"] == "stopped"
    assert {t["state"] for t in st["tasks"]} == {"stopped"}
    assert {t["exit_code"] for t in st["tasks"]} == {-signal.SIGTERM}
    assert not alive([sup, *(t["pid"] for t in st["tasks"])])
    states = [(t["task"], t["state"]) for t in st["transitions"]]
    assert (None, "submitted") in states and (None, "running") in states and states[-1] == (None, "stopped")
    assert ("worker-0", "stopping") in states
    attempts = {(a["task"], a["attempt"]): a for a in st["attempts"]}  # the restart history
    assert sorted(attempts) == [("worker-0", 0), ("worker-1", 0)]
    assert attempts[("worker-1", 0)]["pid"] == tasks["worker-1"]["pid"]
    assert attempts[("worker-1", 0)]["exit_code"] == -signal.SIGTERM

    follower.wait(15)  # follow ends with the job
    reading.join(15)
    assert follower.returncode == 0 and any(ln.startswith("[worker-1] worker-1 pid") for ln in followed)
    assert "[worker-1] appended while followed\n" in followed
    summary = ok(tfdist("logs", job, "--task", "supervisor")).stdout  # its summary: stopped, as status says
    assert re.search(r"^job life\s+stopped\s+in ", summary, re.M) and "interrupted  in" not in summary, summary
    again = ok(tfdist("stop", job))
    assert "is not running (stopped)" in again.stdout


def test_stop_kills_a_supervisor_that_outlasts_the_grace(tmp_path: Path) -> None:
    """The task ignores SIGTERM and the job gives it 60 s: `stop --grace 1` kills the
    supervisor, whose guardian takes the task down; the job is recorded as stopped."""
    spec = tmp_path / "stubborn.yaml"
    spec.write_text(f"name: stubborn\nstop_grace_seconds: 60\n"
                    f"command: [python, {BIN / 'ignore_sigterm.py'}]\nroles: {{worker: 1}}\n")
    job = submit(tmp_path, str(spec))
    wait_for(job, lambda s: "ignoring SIGTERM" in tfdist("logs", job).stdout)
    st = status(job)
    pids = [st["supervisor_pid"], st["tasks"][0]["pid"]]
    stopped = ok(tfdist("stop", job, "--grace", "1"))
    assert f"{job} did not stop within 1s; killing it" in stopped.stderr
    assert f"job {job} stopped" in stopped.stdout
    st = status(job)
    assert st["state"] == "stopped" and st["transitions"][-1]["reason"] == "killed by tfdist stop"
    deadline = time.monotonic() + 10  # the guardian takes the task down with the supervisor
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pids)


def test_supervisor_killed_with_sigkill_shows_lost(tmp_path: Path) -> None:
    job = submit(tmp_path, "--workers", "2", "--name", "victim", "--", "python", str(BIN / "hang.py"))
    st = wait_for(job, lambda s: [t["state"] for t in s["tasks"]] == ["running", "running"])
    pids = [t["pid"] for t in st["tasks"]]
    os.kill(st["supervisor_pid"], signal.SIGKILL)
    st = wait_for(job, lambda s: s["state"] != "running", timeout=10)
    assert st["state"] == "lost" and st["recorded_state"] == "running"
    assert {t["state"] for t in st["tasks"]} == {"lost"}
    listed = ok(tfdist("list")).stdout
    assert "lost" in listed and "running" not in listed
    assert "supervisor (pid" in ok(tfdist("status", job)).stdout
    deadline = time.monotonic() + 10  # the guardian takes the tasks down with it
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pids)
    # stop on a lost job is harmless; clean removes it with its run directory
    assert "is not running (lost)" in ok(tfdist("stop", job)).stdout
    run_dir = Path(st["run_dir"])
    assert run_dir.is_dir()
    assert "would remove 1 job" in ok(tfdist("clean", "--older-than", "0", "--dry-run")).stdout
    assert run_dir.is_dir()
    assert "removed 1 job" in ok(tfdist("clean", "--older-than", "0")).stdout
    assert not run_dir.exists()
    assert json.loads(ok(tfdist("list", "--json")).stdout) == []


def test_20_concurrent_submits_lose_nothing(tmp_path: Path) -> None:
    def one(i: int) -> str:
        return submit(tmp_path, "--workers", "1", "--name", "many", "--", "python", str(BIN / "ok.py"))

    with ThreadPoolExecutor(20) as pool:
        ids = list(pool.map(one, range(20)))
    assert len(set(ids)) == 20
    deadline = time.monotonic() + 90
    while True:
        jobs = json.loads(ok(tfdist("list", "--json")).stdout)
        if all(j["state"] == "succeeded" for j in jobs) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert sorted(j["id"] for j in jobs) == sorted(ids)
    assert [j["state"] for j in jobs] == ["succeeded"] * 20
    assert all(j["task_count"] == 1 for j in jobs)
    # every run directory is the job's own
    assert sorted(p.name for p in (tmp_path / "runs").iterdir() if p.name != "pending") == sorted(ids)


def test_python_api_handle(tmp_path: Path) -> None:
    import tfdist as tfdist_api
    from tfdist.jobspec import load

    job = load.quick(["python", str(BIN / "ok.py")], name="api", workers=2)
    handle = tfdist_api.submit(job, options=BackendOptions(runs_root=tmp_path / "runs"))
    final = handle.wait(timeout=60)
    assert final["state"] == "succeeded" and final["exit_code"] == 0
    states = {t["name"]: t["state"] for t in final["tasks"]}
    assert states == {"worker-0": "succeeded", "worker-1": "succeeded"}
    assert "ok from worker-1" in handle.logs("worker-1")
    assert "[worker-0] ok from worker-0" in handle.logs()

    hang = tfdist_api.submit(load.quick(["python", str(BIN / "hang.py")], name="apihang", workers=1),
                         options=BackendOptions(runs_root=tmp_path / "runs"))
    with pytest.raises(TimeoutError):
        hang.wait(timeout=1)
    assert hang.state in ("submitted", "running")
    assert hang.stop()["state"] == "stopped"
    listed = {j["id"]: j["state"] for j in json.loads(ok(tfdist("list", "--json")).stdout)}
    assert listed == {handle.id: "succeeded", hang.id: "stopped"}


def test_python_api_dict_spec_runs_in_the_callers_directory(tmp_path: Path, monkeypatch) -> None:
    """A relative workdir is the caller's, though the detached run reads job.yaml elsewhere."""
    import tfdist as tfdist_api

    (tmp_path / "here.py").write_text("import os\nprint('cwd', os.getcwd())\n")
    monkeypatch.chdir(tmp_path)
    job = {"name": "rel", "command": ["python", "here.py"], "roles": {"worker": 1}}
    handle = tfdist_api.submit(job, options=BackendOptions(runs_root="runs"))
    final = handle.wait(timeout=60)
    assert final["state"] == "succeeded", handle.logs()
    assert f"cwd {tmp_path.resolve()}" in handle.logs("worker-0")


def test_submit_bad_input_starts_nothing(tmp_path: Path) -> None:
    proc = tfdist("submit", "--runs-dir", str(tmp_path / "runs"), "--workers", "1", "--",
                  "no-such-program-xyz", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert json.loads(ok(tfdist("list", "--json")).stdout) == []


def test_status_shows_the_restart_history(tmp_path: Path) -> None:
    proc = tfdist("run", "-q", "--runs-dir", str(tmp_path / "runs"), "--workers", "2", "--name", "hist",
                  "--set", "restart={policy: on-failure, max_restarts: 1, backoff_seconds: 0}",
                  "--", "python", str(BIN / "fail.py"), "3", "worker-1")
    assert proc.returncode == 1, proc.stderr
    (job,) = json.loads(ok(tfdist("list", "--json")).stdout)
    shown = ok(tfdist("status", job["id"])).stdout
    assert "restarts 1 of 1 used, 0 left" in shown
    assert "earlier attempts:\n  worker-0 attempt 0: stopped, exit SIGTERM\n  worker-1 attempt 0: failed, exit 3\n" in shown
    attempts = [(a["task"], a["attempt"], a["exit_code"]) for a in status(job["id"])["attempts"]]
    assert ("worker-1", 0, 3) in attempts and ("worker-1", 1, 3) in attempts


def test_a_detached_jobs_supervisor_log_has_its_events(tmp_path: Path) -> None:
    """``supervisor.log`` of a submitted job has the lines a foreground run prints as it goes
    (a task failed; restarting), each with its time, not only the final summary."""
    job = submit(tmp_path, "--workers", "2", "--name", "ev", "--set", "restart.policy=on-failure",
                 "--set", "restart.max_restarts=1", "--set", "restart.backoff_seconds=0", "--",
                 "python", str(BIN / "fail.py"), "3", "worker-1")
    wait_for(job, lambda s: not JobState(s["state"]).active, timeout=120)
    log = ok(tfdist("logs", job, "--task", "supervisor")).stdout
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d tfdist: worker-1 failed \(exit code 3\); restarting ",
                     log, re.M), log
    assert re.search(r"^job ev\s+failed\s+in ", log, re.M), log  # and the summary, as before
