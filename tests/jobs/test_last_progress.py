"""A task's last progress in the store is what ``status`` and the page show: the epoch and
its metrics with the latest step on top, never a goodput mark or a bare step report alone."""

from __future__ import annotations

from pathlib import Path

from tests.fakes import FakeBackend, FakeClock, exit, progress
from tfdist.cli.format import progress_text
from tfdist.jobs.recorder import JobRecorder
from tfdist.jobs.store import Store
from tfdist.jobspec import load
from tfdist.supervisor.logs import TaskLogs
from tfdist.supervisor.loop import Supervisor


def test_the_last_progress_keeps_the_epochs_metrics(tmp_path: Path) -> None:
    job = load.from_dict({"name": "p", "command": ["t"], "roles": {"worker": 1}}, "test")
    store = Store()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    recorder = JobRecorder.start(job, run_dir, "fake", store)
    plan = {("worker-0", 0): [
        (1, progress(mark="begin", step=0)),
        (2, progress(epoch=1, epochs=3, step=10, loss=0.5, metrics={"accuracy": 0.75})),
        (2.5, progress(mark="eval", seconds=0.2)),  # the last report: a mark with no step at all
        (3, exit(1))]}
    clock = FakeClock()
    backend = FakeBackend(job, clock, plan)
    backend.attach(run_dir)
    Supervisor(job, backend, run_dir, logs=TaskLogs(run_dir, quiet=True), observer=recorder, clock=clock).run()
    assert recorder.close(10)
    (task,) = Store().tasks(recorder.ref.id or "")
    assert progress_text(task.progress) == "epoch 1/3 step 10 loss 0.5000 accuracy 0.7500"
    assert len(Store().progress(recorder.ref.id or "")) == 3  # every report is still in the history


def test_a_step_report_updates_the_epochs_progress_without_dropping_its_metrics(tmp_path: Path) -> None:
    job = load.from_dict({"name": "p", "command": ["t"], "roles": {"worker": 1}}, "test")
    store = Store()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    recorder = JobRecorder.start(job, run_dir, "fake", store)
    plan = {("worker-0", 0): [
        (2, progress(epoch=1, epochs=3, step=10, loss=0.5, metrics={"accuracy": 0.75})),
        (3, progress(step=15, loss=0.4, steps_per_sec=5.0)),
        (4, exit(1))]}
    clock = FakeClock()
    backend = FakeBackend(job, clock, plan)
    backend.attach(run_dir)
    Supervisor(job, backend, run_dir, logs=TaskLogs(run_dir, quiet=True), observer=recorder, clock=clock).run()
    assert recorder.close(10)
    (task,) = Store().tasks(recorder.ref.id or "")
    assert progress_text(task.progress) == "epoch 1/3 step 15 loss 0.4000 accuracy 0.7500"
