"""The recorder never blocks the supervisor: a writer thread batches, retries a locked store
and catches up; a finished job is never shown as lost (the run directory's record decides
when the store missed the end)."""

from __future__ import annotations

import json
import os
import pwd
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import tfdist
from tests.fakes import FakeBackend, FakeClock, exit
from tests.jobs.store_helpers import UNTIL_GO, LockHolder, wait_until
from tfdist.errors import StoreError
from tfdist.jobs.recorder import JobRecorder
from tfdist.jobs.records import JobRecord
from tfdist.jobs.store import JobRef, Store, op_create_job, op_task_transition
from tfdist.jobs.writer import StoreWriter
from tfdist.jobspec import load, model
from tfdist.states import JobState, TaskState
from tfdist.supervisor.logs import TaskLogs
from tfdist.supervisor.loop import Supervisor
from tfdist.supervisor.status import TaskStatus


def _job(workers: int = 2) -> model.JobSpec:
    return load.from_dict({"name": "rec", "command": ["train"], "roles": {"worker": workers}}, "test")


def test_the_supervisor_finishes_while_another_process_holds_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole job runs and ends while the store is locked (longer than the busy timeout);
    nothing is lost: once the lock goes, the writer catches up with every record."""
    monkeypatch.setenv("TFDIST_STORE_TIMEOUT", "0.2")
    store_path = Path(os.environ["TFDIST_HOME"]) / "jobs.db"
    Store(store_path).close()
    job = _job()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    clock = FakeClock()
    backend = FakeBackend(job, clock, {"worker-0": [(2, exit(0))], "worker-1": [(1, exit(0))]})
    backend.attach(run_dir)
    with LockHolder(store_path) as holder:
        recorder = JobRecorder.start(job, run_dir, "local")
        result = Supervisor(job, backend, run_dir, logs=TaskLogs(run_dir, quiet=True),
                            observer=recorder, clock=clock).run()
        assert result.state is JobState.SUCCEEDED
        assert holder.holding and Store().jobs() == []  # the job ended with nothing written yet
        error = wait_until(lambda: recorder.writer.last_error, what="a write to meet the lock")
        assert error.kind == "locked" and recorder.writer.pending > 0
        holder.release()
        assert recorder.close(timeout=60)
    [row] = Store().jobs()
    assert (row.state, row.recorded_state, row.exit_code) == (JobState.SUCCEEDED,) * 2 + (0,)
    tasks = {t.name: t.state for t in Store().tasks(row.id)}
    assert tasks == {"worker-0": TaskState.SUCCEEDED, "worker-1": TaskState.SUCCEEDED}
    states = [(t.task, t.state) for t in Store().transitions(row.id)]
    assert states.count(("worker-0", TaskState.PENDING)) == 1 and states[-1] == (None, JobState.SUCCEEDED)


def test_recording_a_1000_task_job_is_a_few_transactions(store_kind: str) -> None:
    """1,000 tasks x 3 transitions: every one recorded, in batches (not 3,000 transactions)."""
    store = Store()
    writer = StoreWriter(store)
    ref = JobRef()
    writer.submit(op_create_job("big", name="big", run_dir="/r/big", backend="local",
                                state=JobState.RUNNING, ref=ref))
    for state in (TaskState.PENDING, TaskState.RUNNING, TaskState.SUCCEEDED):
        for i in range(1000):
            task = TaskStatus(name=f"worker-{i}", role="worker", index=i, state=state, pid=1000 + i)
            writer.submit(op_task_transition(ref, task, 1.0, 0))
    assert writer.close(timeout=60)
    assert writer.written == 3001 and writer.dropped == 0
    assert writer.batches < 3001 // 10
    assert {t.state for t in store.tasks("big")} == {TaskState.SUCCEEDED}
    assert len(store.tasks("big")) == 1000 and len(store.transitions("big")) == 3001


def test_a_full_queue_drops_and_says_so_once_but_the_end_still_lands(tmp_path: Path) -> None:
    said: list[str] = []
    store = Store(tmp_path / "jobs.db", timeout=0.05)
    with LockHolder(tmp_path / "jobs.db") as holder:
        writer = StoreWriter(store, max_pending=5, warn=said.append)
        ref = JobRef()
        assert writer.submit(op_create_job("j", name="j", run_dir="/r/j", backend="local",
                                           state=JobState.RUNNING, ref=ref), final=True)
        wait_until(lambda: writer.last_error is not None, what="the first locked write")
        accepted = [writer.submit(op_task_transition(ref, TaskStatus(f"worker-{i}", "worker", i,
                                                                     TaskState.RUNNING), 1.0))
                    for i in range(20)]
        assert accepted.count(False) >= 10 and writer.dropped == accepted.count(False)
        assert writer.submit(op_task_transition(ref, TaskStatus("worker-0", "worker", 0,
                                                                TaskState.SUCCEEDED), 2.0), final=True)
        holder.release()
        assert not writer.close(timeout=60)  # something was dropped
    assert len([m for m in said if "dropping" in m]) == 1, said
    assert "locked by another process" in said[0]
    assert {t.name: t.state for t in store.tasks(ref.id or "")}["worker-0"] is TaskState.SUCCEEDED


def test_a_damaged_store_stops_the_recording_once_without_stopping_the_job(tmp_path: Path) -> None:
    said: list[str] = []
    store = Store(tmp_path / "jobs.db")

    def broken(db: sqlite3.Connection) -> None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    writer = StoreWriter(store, warn=said.append)
    writer.submit(broken)
    assert not writer.close(timeout=60)
    assert not writer.submit(broken)  # recording stopped
    assert len(said) == 1 and "is damaged" in said[0] and "mv " in said[0]


def _submit(tmp_path: Path, *args: str, env: dict | None = None) -> str:
    proc = tfdist("submit", "--runs-dir", str(tmp_path / "runs"), *args, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def _status(job: str) -> dict:
    proc = tfdist("status", job, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True,
                          text=True).stdout.strip().startswith("Z")


@pytest.mark.integration
def test_a_job_that_ends_while_the_store_is_locked_reads_succeeded_not_lost(tmp_path: Path) -> None:
    """The store is locked (longer than the busy timeout) from while the job runs until after
    its supervisor exited: status and list read the run's summary.json: succeeded, not lost."""
    env = {"TFDIST_STORE_TIMEOUT": "0.3"}
    job = _submit(tmp_path, "--workers", "2", "--name", "locked", "--", sys.executable, "-c", UNTIL_GO,
                  env=env)
    st = wait_until(lambda: (s := _status(job)) and [t["state"] for t in s["tasks"]] == ["running"] * 2
                    and s, what="both tasks running")
    run_dir, sup = Path(st["run_dir"]), st["supervisor_pid"]
    with LockHolder(Path(os.environ["TFDIST_HOME"]) / "jobs.db") as holder:
        (run_dir / "go").touch()
        wait_until(lambda: _gone(sup), what="the supervisor to exit")
        assert holder.holding
        st = json.loads(tfdist("status", job, "--json", env=env).stdout)  # reads work while locked
        assert (st["state"], st["recorded_state"], st["exit_code"]) == ("succeeded", "running", 0)
        assert [t["state"] for t in st["tasks"]] == ["succeeded", "succeeded"]
        [listed] = json.loads(tfdist("list", "--json", env=env).stdout)
        assert listed["state"] == "succeeded"
        shown = tfdist("status", job, env=env).stdout
        assert "succeeded" in shown and "lost" not in shown and "missed the end" in shown
    log = (run_dir / "supervisor.log").read_text()
    assert "were not written to the job store" in log and "is locked by another process" in log
    assert "Traceback" not in log
    assert _status(job)["state"] == "succeeded"


@pytest.mark.integration
def test_the_recorder_catches_up_when_the_lock_goes_while_the_job_runs(tmp_path: Path) -> None:
    job = _submit(tmp_path, "--workers", "2", "--name", "catchup", "--set", "success=all-workers",
                  "--", sys.executable, "-c", UNTIL_GO)
    st = wait_until(lambda: (s := _status(job)) and [t["state"] for t in s["tasks"]] == ["running"] * 2
                    and s, what="both tasks running")
    run_dir = Path(st["run_dir"])
    with LockHolder(Path(os.environ["TFDIST_HOME"]) / "jobs.db") as holder:
        (run_dir / "go-worker-1").touch()  # worker-1 ends while the store is locked
        wait_until(lambda: "worker-1 done" in (run_dir / "logs" / "worker-1.log").read_text(),
                   what="worker-1 to end")
        holder.release()
    # worker-0 still runs: the writer caught up on its own, not at the job's end
    st = wait_until(lambda: (s := _status(job)) and s["tasks"][1]["state"] == "succeeded" and s,
                    what="the store to catch up")
    assert st["recorded_state"] == "running" and st["tasks"][0]["state"] == "running"
    (run_dir / "go").touch()
    st = wait_until(lambda: (s := _status(job)) and s["recorded_state"] == "succeeded" and s,
                    what="the end to be recorded")
    assert st["state"] == "succeeded"
    assert "not written" not in (run_dir / "supervisor.log").read_text()


def test_status_falls_back_to_the_run_directory_when_the_store_missed_records(tmp_path: Path) -> None:
    """A job the store has as running, whose supervisor is gone: its summary.json says it
    succeeded, so it is succeeded; without a summary, events.jsonl gives the tasks' states."""
    from tfdist.jobs.manage import describe

    store = Store()
    done, dead = tmp_path / "done", tmp_path / "dead"
    for d in (done, dead):
        d.mkdir()
        store.create_job(d.name, name=d.name, run_dir=str(d), backend="local", state=JobState.RUNNING,
                         supervisor_pid=2 ** 22 + 7, supervisor_start=1.0)
    store.write("update", op_task_transition("done", TaskStatus("worker-0", "worker", 0, TaskState.RUNNING), 1.0))
    (done / "summary.json").write_text(json.dumps({
        "name": "done", "state": "succeeded", "started_at": 1.0, "ended_at": 5.0, "restarts_used": 0,
        "tasks": [{"name": "worker-0", "state": "succeeded", "exit_code": 0}],
        "root_cause": None, "metrics": {"accuracy": 0.9}}))
    (dead / "events.jsonl").write_text(
        '{"time": 2.0, "task": "worker-0", "attempt": 0, "state": "running", "pid": 12}\n'
        '{"time": 3.0, "task": "worker-0", "attempt": 0, "state": "failed", "exit_code": 3}\n'
        '{"time": 3.5, "task": "worker-1", "attempt": 0, "state": "runn\n')  # half-written
    states = {j.id: j.state for j in store.jobs()}
    assert states == {"done": JobState.SUCCEEDED, "dead": JobState.LOST}
    shown = describe(store, "done")
    assert shown.job.exit_code == 0 and dict(shown.job.metrics or {}) == {"accuracy": 0.9}
    assert [(t.name, t.state, t.exit_code) for t in shown.tasks] == [("worker-0", TaskState.SUCCEEDED, 0)]
    lost = describe(store, "dead").to_dict()
    assert [(t["name"], t["state"], t["exit_code"]) for t in lost["tasks"]] == [("worker-0", "failed", 3)]


def test_store_records_and_their_json_keys(tmp_path: Path, store_kind: str) -> None:
    """--json and JobHandle.status() keep the keys scripts read (records become dicts there)."""
    store = Store()
    store.create_job("k", name="k", run_dir=str(tmp_path), backend="local", state=JobState.SUCCEEDED)
    store.write("update", op_task_transition("k", TaskStatus("worker-0", "worker", 0, TaskState.SUCCEEDED, exit_code=0), 1.0))
    [job] = store.jobs()
    assert isinstance(job, JobRecord) and job.state is JobState.SUCCEEDED
    listed = job.to_dict(counts=True)
    assert list(listed) == ["id", "name", "state", "backend", "run_dir", "detached", "supervisor_pid",
                            "supervisor_start", "submitted_at", "started_at", "ended_at", "exit_code",
                            "restarts_used", "max_restarts", "root_cause", "metrics", "stop_requested",
                            "tensorboard_url", "user", "goodput", "phase", "labels", "task_count",
                            "tasks_running", "recorded_state"]
    assert listed["detached"] == 0 and listed["task_count"] == 1
    assert listed["user"] == pwd.getpwuid(os.getuid()).pw_name  # who submitted it
    from tfdist.jobs.manage import describe

    [task] = describe(store, "k").to_dict()["tasks"]
    assert list(task) == ["job_id", "name", "role", "idx", "state", "attempt", "restarts",
                                    "pid", "host", "address", "exit_code", "reason", "started_at",
                                    "ended_at", "progress", "updated_at", "usage"]  # usage: schema 5
    with pytest.raises(StoreError, match="no job 'nope'"):
        store.job("nope")
