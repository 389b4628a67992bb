"""Every supervisor path on a FakeBackend and a fake clock: restarts (group and single task),
backoff, the budget, hangs, the deadline, drain, the evaluator's own budget, interrupts.
Each test runs in milliseconds; the real-process tests prove the real thing once."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import active, exit, line, progress, run_fake
from tfdist.jobspec import load, model
from tfdist.states import JobState, TaskState
from tfdist.supervisor.observer import JobSnapshot, Observer
from tfdist.supervisor.status import TaskStatus


def job(**changes: Any) -> model.JobSpec:
    data: dict[str, Any] = {"name": "fake", "command": ["train"], "roles": {"chief": 1, "worker": 2},
                            "restart": {"policy": "on-failure", "max_restarts": 2,
                                        "backoff_seconds": 1, "backoff_max_seconds": 30},
                            "stop_grace_seconds": 5, "drain_seconds": 10}
    for key, value in changes.items():
        data[key] = value
    return load.from_dict(data, "test")


def test_success_when_the_chief_exits_0(tmp_path: Path) -> None:
    result, backend, _ = run_fake(job(), tmp_path, {"chief-0": [(5, exit(0))],
                                                    "worker-0": [(5, exit(0))], "worker-1": [(5, exit(0))]})
    assert result.state is JobState.SUCCEEDED and result.exit_code == 0
    assert [t.state for t in result.tasks] == ["succeeded"] * 3
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["state"] == "succeeded"
    assert backend.closed


def test_all_reduce_failure_restarts_the_whole_group_after_backoff(tmp_path: Path) -> None:
    plan = {("worker-1", 0): [(3, exit(1))], "chief-0": [(10, exit(0))]}
    result, backend, _ = run_fake(job(), tmp_path, plan)
    assert result.state is JobState.SUCCEEDED and result.restarts_used == 1
    for task in ("chief-0", "worker-0", "worker-1"):
        assert backend.attempts(task) == [0, 1], task
    assert backend.start_times("worker-0")[1] == pytest.approx(3 + 1)  # backoff_seconds after the exit
    assert backend.envs[("worker-0", 1)]["TFDIST_RESTART_COUNT"] == "1"
    restart_stop = backend.stops[0]
    assert set(restart_stop[0]) == {"chief-0", "worker-0"}  # the survivors; worker-1 is over
    assert restart_stop[1] == 3.0  # MWMS survivors get the short restart grace


def test_parameter_server_worker_restarts_alone(tmp_path: Path) -> None:
    pss = job(strategy="parameter_server", roles={"chief": 1, "worker": 2, "ps": 1})
    plan = {("worker-1", 0): [(2, exit(1))], "chief-0": [(10, exit(0))]}
    result, backend, _ = run_fake(pss, tmp_path, plan)
    assert result.state is JobState.SUCCEEDED and result.restarts_used == 1
    assert backend.attempts("worker-1") == [0, 1]
    assert backend.attempts("worker-0") == [0] and backend.attempts("ps-0") == [0]
    # after success the ps and the workers (servers) are stopped at once
    assert set(backend.stops[-1][0]) == {"worker-0", "worker-1", "ps-0"}


def test_backoff_doubles_up_to_its_cap(tmp_path: Path) -> None:
    capped = job(roles={"worker": 1}, restart={"policy": "on-failure", "max_restarts": 4,
                                               "backoff_seconds": 2, "backoff_max_seconds": 5})
    result, backend, _ = run_fake(capped, tmp_path, {"worker-0": [(1, exit(1))]})
    assert result.state is JobState.FAILED
    starts = backend.start_times("worker-0")
    gaps = [round(b - a - 1, 6) for a, b in zip(starts, starts[1:], strict=False)]  # minus the 1 s run
    assert gaps == [2, 4, 5, 5]


def test_the_budget_runs_out_and_names_the_root_cause(tmp_path: Path) -> None:
    result, backend, _ = run_fake(job(), tmp_path, {"worker-0": [(1, line("boom")), (2, exit(3))]})
    assert result.state is JobState.FAILED and result.exit_code == 1
    assert result.restarts_used == 2 and len(backend.attempts("worker-0")) == 3
    cause = result.root_cause
    assert cause is not None and cause.task == "worker-0" and cause.exit_code == 3
    assert "restart budget is used up" in cause.message and cause.tail == ["boom"]


@pytest.mark.parametrize(("policy", "code", "restarted"), [
    ("never", 1, False), ("exit-code", 1, False), ("exit-code", 137, True), ("exit-code", -9, True),
])
def test_restart_policy_decides(tmp_path: Path, policy: str, code: int, restarted: bool) -> None:
    plan = {("worker-0", 0): [(1, exit(code))], "chief-0": [(5, exit(0))]}
    result, backend, _ = run_fake(job(restart={"policy": policy, "max_restarts": 3}), tmp_path, plan)
    assert (len(backend.attempts("worker-0")) == 2) is restarted
    assert result.state is (JobState.SUCCEEDED if restarted else JobState.FAILED)


def test_a_silent_task_is_failed_as_hung_but_any_output_keeps_it_alive(tmp_path: Path) -> None:
    hang = job(roles={"chief": 1, "worker": 1}, hang_timeout_seconds=10, restart={"policy": "never"})
    chatty = [(t, line("step")) for t in range(5, 60, 5)]
    redraws = [(t, active()) for t in range(5, 60, 5)]  # a \r progress bar, no newline
    reports = [(t, progress(step=t)) for t in range(5, 60, 5)]
    plan = {"chief-0": [*chatty, (60, exit(0))], "worker-0": [*redraws, (55, line("done"))]}
    ok, _, _ = run_fake(hang, tmp_path / "a", {**plan})
    assert ok.state is JobState.SUCCEEDED
    ok2, _, _ = run_fake(hang, tmp_path / "b", {"chief-0": [*reports, (60, exit(0))], "worker-0": redraws})
    assert ok2.state is JobState.SUCCEEDED
    bad, backend, _ = run_fake(hang, tmp_path / "c", {"chief-0": [*chatty, (60, exit(0))]})
    assert bad.state is JobState.FAILED
    assert bad.root_cause is not None and bad.root_cause.task == "worker-0"
    assert bad.root_cause.description.startswith("hung: no output or progress for 10s")
    assert backend.stops[0][0] == ("worker-0",)


def test_the_deadline_fails_the_job(tmp_path: Path) -> None:
    result, backend, _ = run_fake(job(deadline_seconds=30), tmp_path)
    assert result.state is JobState.FAILED
    assert result.root_cause is not None and result.root_cause.description == "deadline exceeded"
    assert result.duration == pytest.approx(30, abs=1.5)
    assert not backend.running  # every task stopped


def test_drain_gives_the_evaluator_time_then_stops_it(tmp_path: Path) -> None:
    with_eval = job(roles={"chief": 1, "worker": 1, "evaluator": 1}, drain_seconds=10)
    plan = {"chief-0": [(5, exit(0))], "worker-0": [(5, exit(0))]}
    result, backend, _ = run_fake(with_eval, tmp_path, plan)
    assert result.state is JobState.SUCCEEDED
    (_, _, when), *_ = [s for s in backend.stops if "evaluator-0" in s[0]]
    assert when == pytest.approx(15)  # drain_seconds after the chief's success
    finishing, _, _ = run_fake(with_eval, tmp_path / "b", {**plan, "evaluator-0": [(8, exit(0))]})
    assert [t.state for t in finishing.tasks if t.name == "evaluator-0"] == ["succeeded"]


def test_a_crashing_evaluator_has_its_own_budget(tmp_path: Path) -> None:
    with_eval = job(roles={"chief": 1, "worker": 1, "evaluator": 1})
    plan = {"evaluator-0": [(1, exit(1))], "chief-0": [(100, exit(0))], "worker-0": [(100, exit(0))]}
    result, backend, _ = run_fake(with_eval, tmp_path, plan)
    assert result.state is JobState.SUCCEEDED
    assert result.restarts_used == 0  # training's budget untouched
    assert backend.attempts("evaluator-0") == [0, 1, 2]  # its own max_restarts (2)
    assert backend.attempts("chief-0") == [0]


def test_stubborn_task_is_killed_after_the_grace(tmp_path: Path) -> None:
    result, backend, _ = run_fake(job(deadline_seconds=20), tmp_path, ignores_sigterm=("worker-1",))
    states = {t.name: (t.state, t.exit_code) for t in result.tasks}
    assert states["worker-1"] == ("stopped", -signal.SIGKILL)
    assert states["worker-0"] == ("stopped", -signal.SIGTERM)


def test_an_interrupt_stops_everything_and_still_writes_the_record(tmp_path: Path) -> None:
    from tests import fakes

    clock = fakes.FakeClock()
    backend = fakes.FakeBackend(job(), clock)

    def ctrl_c() -> None:
        raise KeyboardInterrupt

    clock.schedule(7, ctrl_c)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    from tfdist.supervisor.logs import TaskLogs
    from tfdist.supervisor.loop import Supervisor

    result = Supervisor(job(), backend, run_dir, logs=TaskLogs(run_dir, quiet=True), clock=clock).run()
    assert result.state is JobState.INTERRUPTED and result.exit_code == 130
    assert not backend.running
    assert {t.state for t in result.tasks} == {"stopped"}
    assert json.loads((run_dir / "summary.json").read_text())["state"] == "interrupted"


def test_observers_get_frozen_snapshots_and_a_broken_one_is_dropped(tmp_path: Path, capsys) -> None:
    seen: list[tuple[str, TaskState]] = []

    class Watcher(Observer):
        def on_transition(self, job: JobSnapshot, task: TaskStatus, when: float) -> None:
            with pytest.raises(AttributeError):
                task.state = TaskState.FAILED  # type: ignore[misc]
            seen.append((task.name, task.state))

    class Broken(Observer):
        def on_transition(self, job: JobSnapshot, task: TaskStatus, when: float) -> None:
            raise RuntimeError("display gone")

    from tests import fakes
    from tfdist.supervisor.logs import TaskLogs
    from tfdist.supervisor.loop import Supervisor
    from tfdist.supervisor.observer import Observers

    clock = fakes.FakeClock()
    one = job(roles={"worker": 1})
    backend = fakes.FakeBackend(one, clock, {"worker-0": [(1, exit(0))]})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    observers = Observers(Broken(), Watcher())
    result = Supervisor(one, backend, run_dir, logs=TaskLogs(run_dir, quiet=True), observer=observers,
                        clock=clock).run()
    assert result.state is JobState.SUCCEEDED
    assert seen == [("worker-0", TaskState.PENDING), ("worker-0", TaskState.RUNNING),
                    ("worker-0", TaskState.SUCCEEDED)]
    assert "Broken stopped: display gone" in capsys.readouterr().err


def test_one_failure_among_1000_all_reduce_tasks_is_one_group_restart(tmp_path: Path) -> None:
    big = job(roles={"worker": 1000}, restart={"policy": "on-failure", "max_restarts": 1, "backoff_seconds": 0})
    plan = {("worker-517", 0): [(2, exit(1))], "worker-0": [(5, exit(0))]}
    result, backend, _ = run_fake(big, tmp_path, plan)
    assert result.state is JobState.SUCCEEDED and result.restarts_used == 1
    assert sum(1 for _, attempt, _ in backend.starts if attempt == 1) == 1000
    assert len(backend.stops[0][0]) == 999 and backend.stops[0][2] == 2  # the survivors, stopped once


def test_one_failure_among_1000_parameter_server_workers_restarts_one(tmp_path: Path) -> None:
    big = job(strategy="parameter_server", roles={"chief": 1, "worker": 1000, "ps": 4},
              restart={"policy": "on-failure", "max_restarts": 1, "backoff_seconds": 0})
    plan = {("worker-517", 0): [(2, exit(1))], "chief-0": [(5, exit(0))]}
    result, backend, _ = run_fake(big, tmp_path, plan)
    assert result.state is JobState.SUCCEEDED
    assert [n for n, attempt, _ in backend.starts if attempt == 1] == ["worker-517"]


def test_a_step_report_updates_the_last_epoch_report(tmp_path: Path) -> None:
    plan = {"worker-0": [(1, progress(epoch=1, epochs=3, loss=0.9, metrics={"accuracy": 0.5})),
                         (2, progress(step=40, loss=0.7, steps_per_sec=20.0)), (3, exit(0))]}
    seen: list[dict[str, Any]] = []

    class Watcher(Observer):
        def on_progress(self, job: JobSnapshot, task: TaskStatus, when: float, data: Any) -> None:
            seen.append(dict(task.progress))

    from tests import fakes
    from tfdist.supervisor.logs import TaskLogs
    from tfdist.supervisor.loop import Supervisor

    clock = fakes.FakeClock()
    one = job(roles={"worker": 1})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = Supervisor(one, fakes.FakeBackend(one, clock, plan), run_dir, logs=TaskLogs(run_dir, quiet=True),
                        observer=Watcher(), clock=clock).run()
    assert seen[-1] == {"epoch": 1, "epochs": 3, "loss": 0.7, "metrics": {"accuracy": 0.5}, "step": 40,
                        "steps_per_sec": 20.0}
    assert result.metrics == {"accuracy": 0.5}


def test_lines_a_task_prints_while_it_is_stopped_at_the_end_reach_its_log(tmp_path: Path) -> None:
    from tests import fakes

    class SaysGoodbye(fakes.FakeBackend):
        def stop(self, names: list[str], grace: float) -> None:
            from tfdist.backends.base import Output

            for name in names:
                if name in self.running:
                    self.events.put(Output(name, self.running[name], self.clock.time(), "checkpoint saved"))
            super().stop(names, grace)

    clock = fakes.FakeClock()
    backend = SaysGoodbye(job(deadline_seconds=5), clock)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    from tfdist.supervisor.logs import TaskLogs
    from tfdist.supervisor.loop import Supervisor

    Supervisor(job(deadline_seconds=5), backend, run_dir, logs=TaskLogs(run_dir, quiet=True), clock=clock).run()
    assert "checkpoint saved" in (run_dir / "logs" / "worker-1.log").read_text()


def test_a_restart_still_waiting_when_training_succeeds_is_cancelled_and_not_counted(tmp_path: Path) -> None:
    # worker-1 fails at 2 s; its restart waits out a 5 s backoff, but the chief succeeds at 3 s
    pss = job(strategy="parameter_server", roles={"chief": 1, "worker": 2, "ps": 1},
              restart={"policy": "on-failure", "max_restarts": 2, "backoff_seconds": 5})
    plan = {("worker-1", 0): [(2, exit(1))], "chief-0": [(3, exit(0))]}
    result, backend, _ = run_fake(pss, tmp_path, plan)
    assert result.state is JobState.SUCCEEDED
    assert backend.attempts("worker-1") == [0]  # never restarted ...
    assert result.restarts_used == 0  # ... so no restart is counted


def test_work_deferred_to_the_launch_sees_the_whole_job_after_every_first_start(tmp_path: Path) -> None:
    """The job store's record is made on ``on_launched`` (see supervisor.observer.Deferred): by
    then every task of the first round has been started, and the record still gets every
    transition, in order, from the first."""
    from tests import fakes
    from tfdist.supervisor.logs import TaskLogs
    from tfdist.supervisor.loop import Supervisor
    from tfdist.supervisor.observer import Deferred

    calls: list[str] = []
    clock = fakes.FakeClock()
    two = job(roles={"worker": 2})
    backend = fakes.FakeBackend(two, clock, {"worker-0": [(1, exit(0))], "worker-1": [(1, exit(0))]})

    class Record(Observer):
        def __init__(self) -> None:
            calls.append(f"made after {len(backend.starts)} starts")

        def on_start(self, job: JobSnapshot, tasks: tuple[TaskStatus, ...]) -> None:
            calls.append(f"start {len(tasks)}")

        def on_transition(self, job: JobSnapshot, task: TaskStatus, when: float) -> None:
            calls.append(f"{task.name} {task.state.value}")

        def on_launched(self, job: JobSnapshot) -> None:
            calls.append("launched")

        def on_finish(self, job: JobSnapshot, result: Any) -> None:
            calls.append(f"finish {result.state.value}")

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = Supervisor(two, backend, run_dir, logs=TaskLogs(run_dir, quiet=True),
                        observer=Deferred(Record), clock=clock).run()
    assert result.state is JobState.SUCCEEDED
    assert calls[:5] == ["made after 2 starts", "start 2", "worker-0 pending", "worker-1 pending", "launched"]
    assert calls[-1] == "finish succeeded"
    assert calls.count("worker-0 succeeded") == calls.count("worker-1 succeeded") == 1


def test_deferred_work_is_done_even_when_the_job_ends_before_any_task_starts(tmp_path: Path) -> None:
    from tests import fakes
    from tfdist.supervisor.logs import TaskLogs
    from tfdist.supervisor.loop import Supervisor
    from tfdist.supervisor.observer import Deferred

    finished: list[JobState] = []

    class Record(Observer):
        def on_finish(self, job: JobSnapshot, result: Any) -> None:
            finished.append(result.state)

    clock = fakes.FakeClock()
    one = job(roles={"worker": 1})
    backend = fakes.FakeBackend(one, clock)

    def no_ports(tasks: Any) -> dict[str, str]:
        raise KeyboardInterrupt  # Ctrl-C while ports are reserved, before the first start

    backend.reserve = no_ports  # type: ignore[method-assign]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    late = Deferred(Record)
    result = Supervisor(one, backend, run_dir, logs=TaskLogs(run_dir, quiet=True), observer=late,
                        clock=clock).run()
    assert result.state is JobState.INTERRUPTED
    assert finished == [JobState.INTERRUPTED] and not backend.starts
    nothing = Deferred(lambda: None)  # nothing to make: calls go nowhere, nothing breaks
    nothing.on_transition(result, None, 0.0)  # type: ignore[arg-type]
    assert nothing.made() is None and nothing.made() is None


def test_a_deferred_make_cut_short_by_ctrl_c_is_made_at_the_end() -> None:
    from tfdist.supervisor.observer import Deferred

    tries: list[int] = []
    seen: list[str] = []

    class Record(Observer):
        def on_transition(self, job: JobSnapshot, task: TaskStatus, when: float) -> None:
            seen.append(task.name)

    def make() -> Observer:
        tries.append(1)
        if len(tries) == 1:
            raise KeyboardInterrupt  # Ctrl-C while the store was being opened
        return Record()

    late = Deferred(make)
    snap = TaskStatus("worker-0", "worker", 0, TaskState.PENDING)
    late.on_transition(None, snap, 0.0)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        late.on_launched(None)  # type: ignore[arg-type]
    assert isinstance(late.made(), Record) and seen == ["worker-0"] and len(tries) == 2


def test_the_backend_is_told_the_job_s_outcome_before_it_closes(tmp_path: Path) -> None:
    """Backend.job_ended: what YARN's job application finishes with (state, one-line cause)."""
    done = {"chief-0": [(5, exit(0))], "worker-0": [(5, exit(0))], "worker-1": [(5, exit(0))]}
    _, backend, _ = run_fake(job(), tmp_path / "good", done)
    assert backend.outcome == (JobState.SUCCEEDED, "", False)
    once = job(restart={"policy": "never"})
    _, backend, _ = run_fake(once, tmp_path / "bad", {"worker-1": [(2, exit(3))]})
    assert backend.outcome == (JobState.FAILED, "worker-1: exit code 3", False)


def test_an_error_ending_the_run_is_the_outcome_s_cause(tmp_path: Path) -> None:
    from tests import fakes
    from tfdist.errors import BackendError

    class CannotReserve(fakes.FakeBackend):
        def reserve(self, tasks: Any) -> dict[str, str]:
            raise BackendError("yarn: the tasks did not all start\nsecond line")

    backend = CannotReserve(job(), fakes.FakeClock())
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    from tfdist.supervisor.logs import TaskLogs
    from tfdist.supervisor.loop import Supervisor

    with pytest.raises(BackendError):
        Supervisor(job(), backend, run_dir, logs=TaskLogs(run_dir, quiet=True), clock=backend.clock).run()
    assert backend.outcome == (JobState.FAILED, "yarn: the tasks did not all start", False)
    assert backend.closed
