"""The supervisor's phase in the job store: recorded as the job goes, shown by ``status``
(text and JSON) beside a running job's state, read back safely from a shared store."""

from __future__ import annotations

import time
from pathlib import Path

from tests.conftest import tfdist
from tests.fakes import FakeBackend, FakeClock, exit
from tfdist.jobs.manage import describe
from tfdist.jobs.recorder import JobRecorder
from tfdist.jobs.store import Store, op_job_phase
from tfdist.jobspec import load
from tfdist.states import JobState, PhaseState
from tfdist.supervisor.logs import TaskLogs
from tfdist.supervisor.loop import Supervisor
from tfdist.supervisor.observer import JobSnapshot, Observers


class Watch(JobRecorder):
    """The recorder, which also waits for each phase to land in the store and reads it back."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.read: list[PhaseState | None] = []

    def on_phase(self, job: JobSnapshot, when: float) -> None:
        super().on_phase(job, when)
        assert self.writer.flush(10)
        self.read.append(Store().job(self.ref.id or "").phase)


def test_the_recorder_keeps_the_phase_the_supervisor_is_in(tmp_path: Path) -> None:
    job = load.from_dict({"name": "p", "command": ["t"], "roles": {"worker": 1},
                          "restart": {"policy": "on-failure", "max_restarts": 1, "backoff_seconds": 1}},
                         "test")
    store = Store()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    recorder = Watch.start(job, run_dir, "fake", store)
    assert isinstance(recorder, Watch)
    clock = FakeClock()
    backend = FakeBackend(job, clock, {("worker-0", 0): [(1, exit(1))], ("worker-0", 1): [(1, exit(0))]})
    backend.attach(run_dir)
    result = Supervisor(job, backend, run_dir, logs=TaskLogs(run_dir, quiet=True),
                        observer=Observers(recorder), clock=clock).run()
    assert result.state is JobState.SUCCEEDED
    assert recorder.close(10)
    assert recorder.read == [PhaseState.RUNNING, PhaseState.RESTARTING, PhaseState.STARTING,
                             PhaseState.RUNNING, PhaseState.DRAINING, PhaseState.ENDED]
    assert Store().job(recorder.ref.id or "").phase is PhaseState.ENDED


def _running(store: Store, job_id: str) -> None:
    store.create_job(job_id, name=job_id, run_dir="/nowhere", backend="local", state=JobState.SUBMITTED)
    store.set_supervisor(job_id, 1, None)  # pid 1 lives: the job counts as running
    store.write("update", lambda db: db.execute(
        "UPDATE jobs SET state = 'running', started_at = ? WHERE id = ?", (time.time() - 10, job_id)))


def test_status_shows_a_running_jobs_phase(tmp_path: Path) -> None:
    store = Store()
    _running(store, "r")
    store.write("update", op_job_phase("r", PhaseState.DRAINING))
    assert describe(store, "r").to_dict()["phase"] == "draining"
    shown = tfdist("status", "r")
    assert shown.returncode == 0, shown.stderr
    assert "running (draining)" in shown.stdout
    store.write("update", op_job_phase("r", PhaseState.RUNNING))  # "running (running)" says nothing
    assert describe(store, "r").job.shown_phase is None
    assert "running  (r," in tfdist("status", "r").stdout


def test_a_phase_that_is_not_one_reads_as_none(tmp_path: Path) -> None:
    store = Store()
    _running(store, "x")
    store.write("update", lambda db: db.execute("UPDATE jobs SET phase = 'warp-speed' WHERE id = 'x'"))
    job = store.job("x")
    assert job.phase is None and job.shown_phase is None and job.to_dict()["phase"] is None
