"""The goodput breakdown in the job store: recorded at the end, computed so far for a running
job, read from summary.json when the store missed the end, and a store made before the
column existed gains it when opened."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from tests.conftest import tfdist
from tests.fakes import FakeBackend, FakeClock, exit, progress, run_fake
from tfdist.jobs.manage import describe
from tfdist.jobs.recorder import JobRecorder
from tfdist.jobs.store import Store, op_job_finished, op_task_progress, op_task_transition
from tfdist.jobs.tables import SCHEMA_VERSION
from tfdist.jobspec import load
from tfdist.states import JobState, TaskState
from tfdist.supervisor import goodput
from tfdist.supervisor.logs import TaskLogs
from tfdist.supervisor.loop import Supervisor
from tfdist.supervisor.status import TaskStatus


def test_the_recorder_stores_the_breakdown_and_status_json_has_it_per_attempt(tmp_path: Path) -> None:
    job = load.from_dict({"name": "g", "command": ["t"], "roles": {"worker": 1},
                          "restart": {"policy": "on-failure", "max_restarts": 1, "backoff_seconds": 0}},
                         "test")
    store = Store()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    recorder = JobRecorder.start(job, run_dir, "fake", store)
    plan = {("worker-0", 0): [(1, progress(mark="begin", step=0)),
                              (2, progress(mark="checkpoint", step=10, seconds=0.1)), (3, exit(1))],
            ("worker-0", 1): [(1, progress(mark="begin", step=10)),
                              (2, progress(step=20, final=True)), (2.5, exit(0))]}
    clock = FakeClock()
    backend = FakeBackend(job, clock, plan)
    backend.attach(run_dir)
    result = Supervisor(job, backend, run_dir, logs=TaskLogs(run_dir, quiet=True), observer=recorder,
                        clock=clock).run()
    assert recorder.close(10)
    assert result.goodput is not None
    status = describe(Store(), recorder.ref.id or "", transitions=True).to_dict()
    assert status["goodput"] == result.goodput
    assert [a["attempt"] for a in status["goodput"]["attempts"]] == [0, 1]
    assert status["goodput"]["attempts"][0]["seconds"]["lost"] > 0
    shown = tfdist("status", recorder.ref.id or "")
    assert shown.returncode == 0, shown.stderr
    assert goodput.summary_line(result.goodput) + " (--json: by cause and attempt)" in shown.stdout


def test_a_running_job_shows_its_goodput_so_far(tmp_path: Path) -> None:
    store = Store()
    store.create_job("r", name="r", run_dir=str(tmp_path), backend="local", state=JobState.SUBMITTED)
    store.set_supervisor("r", 1, None)
    store.write("update", lambda db: db.execute(
        "UPDATE jobs SET state = 'running', started_at = ? WHERE id = 'r'", (time.time() - 10,)))
    now = time.time()
    store.write("update", op_task_transition("r", TaskStatus("worker-0", "worker", 0, TaskState.RUNNING), now - 9))
    store.write("update", op_task_progress("r", "worker-0", 0, now - 5, {"mark": "begin", "step": 0}))
    store.write("update", op_task_progress("r", "worker-0", 0, now - 1, {"step": 40}))
    shown = describe(store, "r", transitions=True)
    g = shown.job.goodput
    assert g is not None and "so far: the job is still running" in g["notes"]
    assert 4.0 < g["seconds"]["productive"] < 10.0 and g["seconds"]["startup"] > 4.0
    assert describe(store, "r").job.goodput is None  # only with the history (status reads it)


def test_the_summary_stands_in_when_the_store_missed_the_end(tmp_path: Path) -> None:
    job = load.from_dict({"name": "s", "command": ["t"], "roles": {"worker": 1}}, "test")
    result, _, _ = run_fake(job, tmp_path, {"worker-0": [(1, progress(mark="begin", step=0)),
                                                         (3, progress(step=9, final=True)), (4, exit(0))]})
    store = Store()
    store.create_job("m", name="s", run_dir=str(tmp_path / "run"), backend="local", state=JobState.RUNNING)
    store.set_supervisor("m", 2**22 + 12345, None)  # no such process: its supervisor is gone
    shown = describe(store, "m")
    assert shown.job.state is JobState.SUCCEEDED and shown.job.goodput == result.goodput


def test_a_store_made_before_the_goodput_column_gains_it(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY, name TEXT NOT NULL, state TEXT NOT NULL, "
               "backend TEXT, run_dir TEXT, detached INTEGER NOT NULL DEFAULT 0, supervisor_pid INTEGER, "
               "supervisor_start REAL, submitted_at REAL, started_at REAL, ended_at REAL, exit_code INTEGER, "
               "restarts_used INTEGER NOT NULL DEFAULT 0, max_restarts INTEGER, root_cause TEXT, "
               "metrics TEXT, stop_requested REAL, tensorboard_url TEXT)")
    db.execute("CREATE TABLE tasks (job_id TEXT NOT NULL, name TEXT NOT NULL, role TEXT, idx INTEGER, "
               "state TEXT, attempt INTEGER, restarts INTEGER, pid INTEGER, host TEXT, address TEXT, "
               "exit_code INTEGER, reason TEXT, started_at REAL, ended_at REAL, progress TEXT, "
               "updated_at REAL, PRIMARY KEY (job_id, name))")  # every store has had its tasks
    db.execute("INSERT INTO jobs (id, name, state) VALUES ('old', 'old', 'succeeded')")
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()
    store = Store(path)
    assert store.job("old").goodput is None
    store.write("update", op_job_finished("old", state=JobState.SUCCEEDED, exit_code=0, restarts_used=0,
                                          root_cause=None, metrics=None))
    store.write("update", lambda d: d.execute("UPDATE jobs SET goodput = ? WHERE id = 'old'",
                                              (json.dumps({"goodput": 0.5}),)))
    assert store.job("old").goodput == {"goodput": 0.5}
    store.close()
    again = sqlite3.connect(path)
    assert again.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    again.close()
    # damaged JSON in the column is said once and read as missing
    bad = sqlite3.connect(path)
    bad.execute("UPDATE jobs SET goodput = '{nope' WHERE id = 'old'")
    bad.commit()
    bad.close()
    assert Store(path).job("old").goodput is None


def test_report_times_count_from_the_supervisors_start_not_from_the_record(tmp_path: Path) -> None:
    """The job's record is made once its tasks have started (``Deferred``), and under load
    after their first reports: ``started_at`` was the record's own time, so ``tfdist
    metrics`` showed a report before it at a negative ``elapsed`` (seen: -0.349 s). The
    record keeps the supervisor's start, on the supervisor's clock, as the reports are."""
    from tfdist.jobs import metrics
    from tfdist.supervisor.observer import Deferred

    job = load.from_dict({"name": "e", "command": ["t"], "roles": {"worker": 1}}, "test")
    store = Store()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    clock = FakeClock()  # its wall clock is years before this record's own time
    backend = FakeBackend(job, clock, {("worker-0", 0): [(0.5, progress(step=1)),
                                                         (1, progress(step=2, final=True)), (1.5, exit(0))]})
    backend.attach(run_dir)
    late: Deferred[JobRecorder] = Deferred(lambda: JobRecorder.start(job, run_dir, "fake", store))
    Supervisor(job, backend, run_dir, logs=TaskLogs(run_dir, quiet=True), observer=late, clock=clock).run()
    recorder = late.made()
    assert recorder is not None and recorder.close(10) and recorder.ref.id
    record = Store().job(recorder.ref.id)
    assert record.started_at == FakeClock.EPOCH
    elapsed = [r["elapsed"] for r in metrics.flatten(Store().progress(recorder.ref.id), record.started_at)]
    assert elapsed == [0.5, 1.0]
