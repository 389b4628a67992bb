"""The supervisor's phases: each transition as a pure function, then the phases a job goes
through on the FakeBackend as the observers (the job store, status, the dashboard) see them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import fakes
from tests.fakes import exit
from tfdist.jobspec import load, model
from tfdist.states import JobState, PhaseState, TaskState
from tfdist.supervisor import phase as phases
from tfdist.supervisor.logs import TaskLogs
from tfdist.supervisor.loop import Supervisor
from tfdist.supervisor.observer import JobSnapshot, Observer
from tfdist.supervisor.result import JobResult
from tfdist.supervisor.status import TaskStatus


def job(**changes: Any) -> model.JobSpec:
    data: dict[str, Any] = {"name": "fake", "command": ["train"], "roles": {"chief": 1, "worker": 2},
                            "restart": {"policy": "on-failure", "max_restarts": 2,
                                        "backoff_seconds": 1, "backoff_max_seconds": 30},
                            "stop_grace_seconds": 5, "drain_seconds": 10}
    data.update(changes)
    return load.from_dict(data, "test")


def statuses(**states: TaskState) -> dict[str, TaskStatus]:
    return {name.replace("_", "-"): TaskStatus(name.replace("_", "-"), name.split("_")[0], 0, state)
            for name, state in states.items()}


# -- the transitions, pure --------------------------------------------------------------------


def test_settle_is_starting_while_a_task_is_pending_then_running() -> None:
    P, R, F = TaskState.PENDING, TaskState.RUNNING, TaskState.FAILED
    assert phases.settle(statuses(chief_0=R, worker_0=P)) == phases.Starting()
    assert phases.settle(statuses(chief_0=R, worker_0=R)) == phases.Running()
    # an evaluator that failed for good is over: it keeps nobody starting
    assert phases.settle(statuses(chief_0=R, evaluator_0=F)) == phases.Running()


def test_settle_is_restarting_while_restarts_wait() -> None:
    found = phases.settle(statuses(worker_0=TaskState.FAILED), {"worker-0": 4.0}, (frozenset({"worker-0"}),))
    assert found == phases.Restarting({"worker-0": 4.0}, (frozenset({"worker-0"}),))
    assert found.state is PhaseState.RESTARTING and not found.terminal


def test_a_restart_decided_adds_its_tasks_and_counts_its_decision() -> None:
    first = phases.restart(phases.Running(), ["chief-0", "worker-0"], 5.0, counted=True)
    assert first == phases.Restarting({"chief-0": 5.0, "worker-0": 5.0}, (frozenset({"chief-0", "worker-0"}),))
    second = phases.restart(first, ["evaluator-0"], 7.0, counted=False)  # the evaluator's own budget
    assert second.due == {"chief-0": 5.0, "worker-0": 5.0, "evaluator-0": 7.0}
    assert second.unstarted == first.unstarted
    assert first.due == {"chief-0": 5.0, "worker-0": 5.0}  # phases are values: the first is unchanged


def test_due_now_is_the_due_tasks_whose_attempt_is_over_soonest_first() -> None:
    restarting = phases.Restarting({"worker-1": 6.0, "worker-0": 5.0, "chief-0": 5.5})
    tasks = statuses(worker_0=TaskState.FAILED, worker_1=TaskState.STOPPED, chief_0=TaskState.STOPPING)
    assert phases.due_now(restarting, tasks, 6.0) == ["worker-0", "worker-1"]  # chief-0 still stopping
    assert phases.due_now(restarting, tasks, 4.0) == []
    assert phases.due_now(phases.Running(), tasks, 100.0) == []


def test_a_started_task_is_no_longer_due_and_its_decision_cannot_be_given_back() -> None:
    restarting = phases.Restarting({"worker-0": 5.0, "worker-1": 5.0},
                                   (frozenset({"worker-0", "worker-1"}), frozenset({"chief-0"})))
    after = phases.started(restarting, "worker-0")
    assert after.due == {"worker-1": 5.0} and after.unstarted == (frozenset({"chief-0"}),)
    assert phases.cancelled(after) == 1 and phases.cancelled(restarting) == 2
    assert phases.cancelled(phases.Running()) == 0


def test_the_deadline() -> None:
    assert not phases.past_deadline(job(), 0.0, 1e9)  # none set
    assert not phases.past_deadline(job(deadline_seconds=30), 10.0, 39.9)
    assert phases.past_deadline(job(deadline_seconds=30), 10.0, 40.0)


def test_draining_ends_when_every_task_has_or_stops_the_rest_when_its_time_is_over() -> None:
    draining = phases.drain(job(drain_seconds=10), 5.0)
    assert draining == phases.Draining(15.0) and draining.state is PhaseState.DRAINING
    left = statuses(chief_0=TaskState.SUCCEEDED, evaluator_0=TaskState.RUNNING)
    assert phases.drained(draining, left, 14.0) == (draining, [])
    assert phases.drained(draining, left, 15.0) == (phases.Ended(JobState.SUCCEEDED), ["evaluator-0"])
    done = statuses(chief_0=TaskState.SUCCEEDED, evaluator_0=TaskState.STOPPED)
    ended, stop = phases.drained(draining, done, 6.0)
    assert ended == phases.Ended(JobState.SUCCEEDED) and stop == [] and ended.terminal


def test_the_loop_waits_for_the_nearest_timer_of_its_phase() -> None:
    plain = job()
    assert phases.timeout(phases.Running(), plain, 0.0, 3.0) is None  # only an event can change anything
    assert phases.timeout(phases.Restarting({"w": 7.0, "c": 9.0}), plain, 0.0, 3.0) == 4.0
    assert phases.timeout(phases.Draining(13.0), plain, 0.0, 3.0) == 10.0
    assert phases.timeout(phases.Draining(13.0), job(deadline_seconds=5), 0.0, 3.0) == 2.0
    assert phases.timeout(phases.Running(), job(hang_timeout_seconds=2), 0.0, 3.0) == 0.5
    assert phases.timeout(phases.Restarting({"w": 1.0}), plain, 0.0, 3.0) == 0.0  # overdue: at once


# -- the phases of a job on the FakeBackend ------------------------------------------------------


class Phases(Observer):
    """What an observer (the job store's recorder) is told of the phases."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []
        self.snapshots: list[PhaseState] = []

    def on_start(self, job: JobSnapshot, tasks: tuple[TaskStatus, ...]) -> None:
        self.seen.append((job.phase.value, -1.0))

    def on_phase(self, job: JobSnapshot, when: float) -> None:
        self.seen.append((job.phase.value, round(when - fakes.FakeClock.EPOCH, 3)))

    def on_transition(self, job: JobSnapshot, task: TaskStatus, when: float) -> None:
        self.snapshots.append(job.phase)

    def on_finish(self, job: JobSnapshot, result: JobResult) -> None:
        self.seen.append((f"finish {job.phase.value}", -1.0))


def run(spec: model.JobSpec, tmp_path: Path, plan: dict[Any, Any], **kwargs: Any
        ) -> tuple[JobResult, list[tuple[str, float]], Supervisor, fakes.FakeBackend]:
    clock = fakes.FakeClock()
    backend = fakes.FakeBackend(spec, clock, plan, **kwargs)
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    backend.attach(run_dir)
    seen = Phases()
    sup = Supervisor(spec, backend, run_dir, logs=TaskLogs(run_dir, quiet=True), observer=seen, clock=clock)
    result = sup.run()
    return result, seen.seen, sup, backend


def test_a_job_that_succeeds_starts_runs_drains_and_ends(tmp_path: Path) -> None:
    plan = {"chief-0": [(5, exit(0))], "worker-0": [(5, exit(0))], "worker-1": [(5, exit(0))]}
    result, seen, sup, _ = run(job(), tmp_path, plan)
    assert result.state is JobState.SUCCEEDED
    assert seen == [("starting", -1.0), ("running", 0.0), ("draining", 5.0), ("ended", 5.0),
                    ("finish ended", -1.0)]
    assert sup.phase == phases.Ended(JobState.SUCCEEDED)


def test_a_group_restart_goes_through_restarting_and_starting_again(tmp_path: Path) -> None:
    plan = {("worker-1", 0): [(3, exit(1))], "chief-0": [(10, exit(0))]}
    result, seen, _, _ = run(job(), tmp_path, plan)
    assert result.state is JobState.SUCCEEDED and result.restarts_used == 1
    names = [name for name, _ in seen]
    assert names == ["starting", "running", "restarting", "starting", "running", "draining", "ended",
                     "finish ended"]
    times = dict(zip(names[:5], [t for _, t in seen[:5]], strict=True))
    assert times["restarting"] == 3.0  # the failure
    assert [t for n, t in seen if n == "starting"][-1] == 4.0  # backoff_seconds later


def test_a_restart_cancelled_by_success_leaves_restarting_for_draining(tmp_path: Path) -> None:
    pss = job(strategy="parameter_server", roles={"chief": 1, "worker": 2, "ps": 1},
              restart={"policy": "on-failure", "max_restarts": 2, "backoff_seconds": 5})
    plan = {("worker-1", 0): [(2, exit(1))], "chief-0": [(3, exit(0))]}
    result, seen, _, _ = run(pss, tmp_path, plan)
    assert result.restarts_used == 0
    assert [n for n, _ in seen] == ["starting", "running", "restarting", "draining", "ended", "finish ended"]


def test_a_failure_with_no_restart_ends_the_job_from_running(tmp_path: Path) -> None:
    result, seen, sup, _ = run(job(restart={"policy": "never"}), tmp_path, {"worker-0": [(2, exit(3))]})
    assert result.state is JobState.FAILED
    assert [n for n, _ in seen] == ["starting", "running", "ended", "finish ended"]
    assert sup.phase == phases.Ended(JobState.FAILED)


def test_the_deadline_ends_the_job(tmp_path: Path) -> None:
    result, seen, _, _ = run(job(deadline_seconds=30), tmp_path, {})
    assert result.state is JobState.FAILED
    assert seen[-2] == ("ended", 30.0)


def test_a_drain_that_runs_out_ends_the_job_and_stops_the_rest(tmp_path: Path) -> None:
    with_eval = job(roles={"chief": 1, "worker": 1, "evaluator": 1}, drain_seconds=10)
    result, seen, _, backend = run(with_eval, tmp_path, {"chief-0": [(5, exit(0))], "worker-0": [(5, exit(0))]})
    assert result.state is JobState.SUCCEEDED
    assert seen[2:4] == [("draining", 5.0), ("ended", 15.0)]
    assert backend.stops[-2][0] == ("evaluator-0",)


def test_a_task_still_pending_keeps_the_job_starting(tmp_path: Path) -> None:
    """A task whose start the backend has not confirmed (a pod not scheduled yet) keeps the
    phase at starting; every transition's snapshot carries the phase it happened in."""

    class SlowStart(fakes.FakeBackend):
        def start(self, task: Any, attempt: int) -> None:
            if task.name != "worker-1":
                super().start(task, attempt)
                return
            self.clock.schedule(4, lambda: fakes.FakeBackend.start(self, task, attempt))

    spec = job(roles={"chief": 1, "worker": 2})
    clock = fakes.FakeClock()
    backend = SlowStart(spec, clock, {"chief-0": [(10, exit(0))]})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    backend.attach(run_dir)
    seen = Phases()
    Supervisor(spec, backend, run_dir, logs=TaskLogs(run_dir, quiet=True), observer=seen, clock=clock).run()
    assert seen.seen[:3] == [("starting", -1.0), ("running", 4.0), ("draining", 10.0)]
    assert seen.snapshots[0] is PhaseState.STARTING and PhaseState.DRAINING in seen.snapshots


def test_an_interrupt_ends_the_job(tmp_path: Path) -> None:
    class Interrupted(Phases):
        def on_phase(self, job: JobSnapshot, when: float) -> None:
            super().on_phase(job, when)
            if job.phase is PhaseState.RUNNING:
                raise KeyboardInterrupt

    spec = job()
    clock = fakes.FakeClock()
    backend = fakes.FakeBackend(spec, clock, {})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    backend.attach(run_dir)
    seen = Interrupted()
    sup = Supervisor(spec, backend, run_dir, logs=TaskLogs(run_dir, quiet=True), observer=seen, clock=clock)
    assert sup.run().state is JobState.INTERRUPTED
    assert [n for n, _ in seen.seen] == ["starting", "running", "ended", "finish ended"]
    assert sup.phase == phases.Ended(JobState.INTERRUPTED)


@pytest.mark.parametrize("name", ["starting", "running", "restarting", "draining", "ended"])
def test_every_phase_has_its_name(name: str) -> None:
    made = {"restarting": phases.Restarting(), "draining": phases.Draining(1.0),
            "ended": phases.Ended(JobState.FAILED), "starting": phases.Starting(), "running": phases.Running()}
    assert made[name].state.value == name and made[name].terminal is (name == "ended")
