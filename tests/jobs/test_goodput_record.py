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


def test_a_running_jobs_goodput_is_stored_while_it_runs_and_shown_live(tmp_path: Path) -> None:
    """The supervisor tells its observers the goodput so far every GOODPUT_EVERY seconds;
    the recorder stores it with the job, so `status`, the job page and the jobs list show
    it while the job runs (once only the end's was stored), and the end's replaces it."""
    from starlette.testclient import TestClient

    from tfdist.jobs.location import location
    from tfdist.jobs.store import op_job_goodput
    from tfdist.supervisor.loop import GOODPUT_EVERY
    from tfdist.supervisor.observer import Observer, Observers
    from tfdist.ui.app import create_app

    class Seen(Observer):
        def __init__(self) -> None:
            self.live: list[tuple[float, dict]] = []
            self.ended = False

        def on_goodput(self, job, data) -> None:  # type: ignore[no-untyped-def]
            assert not self.ended
            self.live.append((clock.now, dict(data)))

        def on_finish(self, job, result) -> None:  # type: ignore[no-untyped-def]
            self.ended = True

    job = load.from_dict({"name": "live", "command": ["t"], "roles": {"worker": 1}}, "test")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store = Store()
    recorder = JobRecorder.start(job, run_dir, "fake", store)
    clock = FakeClock()
    steps = [(1, progress(mark="begin", step=0))] + [(2 + 3 * k, progress(step=10 * k)) for k in range(1, 12)]
    backend = FakeBackend(job, clock, {("worker-0", 0): [*steps, (40, progress(step=120, final=True)), (41, exit(0))]})
    backend.attach(run_dir)
    seen = Seen()
    result = Supervisor(job, backend, run_dir, logs=TaskLogs(run_dir, quiet=True), clock=clock,
                        observer=Observers(recorder, seen)).run()
    assert recorder.close(10) and result.goodput is not None
    times = [t for t, _ in seen.live]
    assert len(times) >= 3 and all(b - a >= GOODPUT_EVERY for a, b in zip(times, times[1:], strict=False))
    walls = [d["wall_seconds"] for _, d in seen.live]
    assert walls == sorted(walls) and all(goodput.SO_FAR in d["notes"] for _, d in seen.live)
    assert seen.live[-1][1]["goodput"] > seen.live[0][1]["goodput"]  # training counted as it ran
    assert Store().job(recorder.ref.id or "").goodput == result.goodput  # the end's replaced them

    # a running job's stored goodput is what status and the pages show, marked "so far"
    store = Store()
    store.create_job("r", name="r", run_dir=str(tmp_path), backend="local", state=JobState.SUBMITTED)
    store.set_supervisor("r", 1, None)  # pid 1 lives: the job counts as running
    store.write("update", lambda db: db.execute(
        "UPDATE jobs SET state = 'running', started_at = ? WHERE id = 'r'", (time.time() - 10,)))
    live = seen.live[-1][1]
    store.write("update", op_job_goodput("r", live))
    assert describe(store, "r", transitions=True).job.goodput == live  # stored, not computed again
    shown = tfdist("status", "r")
    assert shown.returncode == 0, shown.stderr
    assert goodput.summary_line(live) + " so far (--json: by cause and attempt)" in shown.stdout
    with TestClient(create_app(location(), "tok", stop=lambda s, j: None), base_url="http://127.0.0.1:8470") as c:
        c.headers["Authorization"] = "token tok"
        page = c.get("/jobs/r").text
        assert f'<p class="facts" id="goodput">{goodput.summary_line(live)} so far</p>' in page
        assert f'<td class="goodput">{100 * live["goodput"]:.1f}%</td>' in c.get("/").text
    store.write("update", op_job_finished("r", state=JobState.SUCCEEDED, exit_code=0, restarts_used=0,
                                          root_cause=None, metrics=None, goodput=result.goodput))
    store.write("update", op_job_goodput("r", live))  # a late one never replaces the end's
    assert Store().job("r").goodput == result.goodput
