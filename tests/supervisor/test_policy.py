"""The supervisor's rules as pure functions: success, restart, recovery group, teardown."""

from __future__ import annotations

import dataclasses

import pytest

from tfdist.cluster import task_ids
from tfdist.jobspec import load, model
from tfdist.states import TaskState, describe_exit
from tfdist.supervisor import policy
from tfdist.supervisor.policy import Fail, Ignore, Restart
from tfdist.supervisor.status import TaskStatus


def make(strategy: str = "multi_worker_mirrored", restart: dict | None = None, **roles) -> model.JobSpec:
    data = {"name": "j", "strategy": strategy, "command": ["x"], "roles": roles}
    if restart:
        data["restart"] = restart
    return load.from_dict(data)


def statuses(job: model.JobSpec, **states: TaskState) -> dict[str, TaskStatus]:
    out = {}
    for t in task_ids(job):
        out[t.name] = TaskStatus(t.name, t.role, t.index, state=TaskState.RUNNING)
    for name, state in states.items():
        set_(out, name.replace("_", "-"), state=state)
    return out


def set_(s: dict[str, TaskStatus], name: str, **changes: object) -> None:
    s[name] = dataclasses.replace(s[name], **changes)  # type: ignore[arg-type]


def failed(s: dict[str, TaskStatus], name: str, code: int) -> dict[str, TaskStatus]:
    set_(s, name, state=TaskState.FAILED, exit_code=code)
    return s


def test_success_is_the_chief_or_worker0() -> None:
    job = make(chief=1, worker=2)
    assert not policy.success_reached(job, statuses(job, worker_0=TaskState.SUCCEEDED))
    assert policy.success_reached(job, statuses(job, chief_0=TaskState.SUCCEEDED))
    chiefless = make(worker=2)
    assert policy.success_task(chiefless) == "worker-0"
    assert policy.success_reached(chiefless, statuses(chiefless, worker_0=TaskState.SUCCEEDED))


def test_success_all_workers() -> None:
    job = load.from_dict({"name": "j", "command": ["x"], "roles": {"chief": 1, "worker": 2},
                          "success": "all-workers"})
    s = statuses(job, chief_0=TaskState.SUCCEEDED, worker_0=TaskState.SUCCEEDED)
    assert not policy.success_reached(job, s)
    set_(s, "worker-1", state=TaskState.SUCCEEDED)
    assert policy.success_reached(job, s)


@pytest.mark.parametrize(
    ("name", "code", "expected"),
    [
        ("never", 137, False), ("on-failure", 1, True), ("always", 1, True),
        ("exit-code", 1, False), ("exit-code", 127, False), ("exit-code", 128, True),
        ("exit-code", 137, True), ("exit-code", -9, True), ("exit-code", -15, True),
    ],
)
def test_retryable(name: str, code: int, expected: bool) -> None:
    assert policy.retryable(name, code) is expected


def test_mwms_restarts_the_whole_group() -> None:
    job = make(chief=1, worker=2, evaluator=1)
    s = failed(statuses(job), "worker-1", -9)
    assert sorted(policy.restart_group(job, s, "worker-1")) == ["chief-0", "worker-0", "worker-1"]
    assert policy.restart_group(job, s, "evaluator-0") == ["evaluator-0"]


def test_pss_restarts_a_worker_alone_and_ps_with_chief() -> None:
    job = make("parameter_server", chief=1, worker=2, ps=2)
    s = statuses(job)
    assert policy.restart_group(job, s, "worker-1") == ["worker-1"]
    assert sorted(policy.restart_group(job, s, "ps-1")) == ["chief-0", "ps-0", "ps-1"]
    assert sorted(policy.restart_group(job, s, "chief-0")) == ["chief-0", "ps-0", "ps-1"]
    # where a down task's name stops resolving (Kubernetes), the workers come along: their
    # channels held the failed lookup; a worker still restarts alone
    everyone = ["chief-0", "ps-0", "ps-1", "worker-0", "worker-1"]
    assert sorted(policy.restart_group(job, s, "ps-1", addresses_vanish=True)) == everyone
    assert sorted(policy.restart_group(job, s, "chief-0", addresses_vanish=True)) == everyone
    assert policy.restart_group(job, s, "worker-1", addresses_vanish=True) == ["worker-1"]


def test_on_failure_restarts_within_budget_then_fails() -> None:
    job = make(restart={"policy": "on-failure", "max_restarts": 2, "backoff_seconds": 1}, worker=2)
    s = failed(statuses(job), "worker-1", 1)
    first = policy.on_failure(job, s, "worker-1", restarts_used=0)
    assert isinstance(first, Restart) and first.delay == 1.0
    assert isinstance(policy.on_failure(job, s, "worker-1", restarts_used=1), Restart)
    last = policy.on_failure(job, s, "worker-1", restarts_used=2)
    assert isinstance(last, Fail) and "budget is used up (2 of 2)" in last.reason


def test_exit_code_policy_treats_1_as_permanent() -> None:
    job = make(restart={"policy": "exit-code", "max_restarts": 5}, worker=1)
    decision = policy.on_failure(job, failed(statuses(job), "worker-0", 1), "worker-0", 0)
    assert isinstance(decision, Fail) and "does not retry" in decision.reason
    decision = policy.on_failure(job, failed(statuses(job), "worker-0", 137), "worker-0", 0)
    assert isinstance(decision, Restart)


def test_never_policy_fails_at_once_with_root_cause() -> None:
    job = make(worker=2)
    decision = policy.on_failure(job, failed(statuses(job), "worker-1", -9), "worker-1", 0)
    assert isinstance(decision, Fail)
    assert decision.cause == "worker-1" and "killed by SIGKILL" in decision.reason


def test_evaluator_death_never_fails_training() -> None:
    job = make(chief=1, worker=1, evaluator=1)
    decision = policy.on_failure(job, failed(statuses(job), "evaluator-0", 1), "evaluator-0", 0)
    assert isinstance(decision, Ignore)


def test_evaluator_restarts_do_not_use_up_trainings_budget() -> None:
    job = make(chief=1, worker=1, evaluator=1, restart={"policy": "on-failure", "max_restarts": 2})
    s = failed(statuses(job), "evaluator-0", 1)
    # training has used its whole budget; the evaluator still has its own
    assert isinstance(policy.on_failure(job, s, "evaluator-0", restarts_used=2), Restart)
    set_(s, "evaluator-0", restarts=2)  # ...until it has used that up too
    assert isinstance(policy.on_failure(job, s, "evaluator-0", restarts_used=0), Ignore)
    s = failed(statuses(job), "worker-0", 1)
    set_(s, "evaluator-0", restarts=2)  # evaluator restarts cost training nothing
    assert isinstance(policy.on_failure(job, s, "worker-0", restarts_used=0), Restart)


def test_backoff_doubles_up_to_the_cap() -> None:
    job = make(restart={"policy": "on-failure", "backoff_seconds": 1, "backoff_max_seconds": 5}, worker=1)
    assert [policy.backoff(job, n) for n in (1, 2, 3, 4, 5)] == [1, 2, 4, 5, 5]


def test_teardown_after_success() -> None:
    pss = make("parameter_server", chief=1, worker=2, ps=1, evaluator=1)
    now, drain = policy.stop_at_success(pss, statuses(pss, chief_0=TaskState.SUCCEEDED))
    assert sorted(now) == ["ps-0", "worker-0", "worker-1"] and drain == ["evaluator-0"]
    mwms = make(chief=1, worker=2)
    now, drain = policy.stop_at_success(mwms, statuses(mwms, chief_0=TaskState.SUCCEEDED))
    assert now == [] and sorted(drain) == ["worker-0", "worker-1"]


def test_stops_are_never_failures() -> None:
    assert policy.exit_state("worker", -15, stopping=True) is TaskState.STOPPED
    assert policy.exit_state("worker", 0, stopping=False) is TaskState.SUCCEEDED
    assert policy.exit_state("worker", 2, stopping=False) is TaskState.FAILED


def test_a_ps_that_exits_cleanly_mid_training_is_unexpected() -> None:
    job = make("parameter_server", chief=1, worker=1, ps=1)
    s = statuses(job, ps_0=TaskState.SUCCEEDED)
    assert policy.unexpected_exit(job, s["ps-0"], success=False)
    assert not policy.unexpected_exit(job, s["ps-0"], success=True)
    set_(s, "worker-0", state=TaskState.SUCCEEDED)  # PSS workers serve until stopped
    assert policy.unexpected_exit(job, s["worker-0"], success=False)
    mwms = make(chief=1, worker=1)
    w = statuses(mwms, worker_0=TaskState.SUCCEEDED)["worker-0"]
    assert not policy.unexpected_exit(mwms, w, success=False)  # all-reduce workers finish


def test_hung_tasks() -> None:
    job = load.from_dict({"name": "j", "command": ["x"], "roles": {"worker": 2, "chief": 1},
                          "hang_timeout_seconds": 10})
    s = statuses(job)
    activity = {name: 100.0 for name in s}
    activity["worker-1"] = 50.0
    assert policy.hung_tasks(job, s, activity, now=105.0) == ["worker-1"]
    assert policy.hung_tasks(make(worker=1), s, activity, now=1e9) == []


def test_parameter_server_workers_are_never_hung() -> None:
    """PSS workers are servers: silent by design, while the chief drives training."""
    job = load.from_dict({"name": "j", "command": ["x"], "strategy": "parameter_server",
                          "roles": {"chief": 1, "worker": 2, "ps": 1}, "hang_timeout_seconds": 10})
    s = statuses(job)
    assert policy.hung_tasks(job, s, dict.fromkeys(s, 0.0), now=100.0) == ["chief-0"]


def test_a_final_exit_is_never_restarted() -> None:
    """The backend says the task cannot run again (a Ray bundle moved to another IP)."""
    job = make(worker=2, restart={"policy": "on-failure", "max_restarts": 5})
    s = failed(statuses(job), "worker-1", -9)
    assert isinstance(policy.on_failure(job, s, "worker-1", restarts_used=0), Restart)
    set_(s, "worker-1", reason="node died; its bundle moved")
    decision = policy.on_failure(job, s, "worker-1", restarts_used=0, final=True)
    assert isinstance(decision, Fail) and "cannot be started again" in decision.reason
    assert "bundle moved" in decision.reason


def test_describe_exit() -> None:
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(-9) == "killed by SIGKILL"


def test_restart_grace_is_short_for_broken_all_reduce_groups() -> None:
    assert policy.restart_grace(make(worker=2)) == 3.0
    pss = make("parameter_server", chief=1, worker=1, ps=1)
    assert policy.restart_grace(pss) == pss.stop_grace_seconds == 10.0


def test_a_task_never_announces_more_time_than_a_restart_gives_it() -> None:
    """Under a group restart the chief said "saving before exiting (within 8s)" and was
    killed after 3: the window a task announces on SIGTERM (its stop grace less 2 s) must fit
    the grace of every stop the supervisor sends it, or not be announced."""
    import re

    from tfdist import contract
    from tfdist.runtime.preemption import save_window
    from tfdist.runtime.strategies import sigterm_notice

    for job in (make(worker=2), make(chief=1, worker=2), make("parameter_server", chief=1, worker=1, ps=1)):
        window = save_window({contract.STOP_GRACE: f"{job.stop_grace_seconds:g}"})
        notice = sigterm_notice("chief-0", window, job.strategy)
        announced = re.search(r"within (\d+(?:\.\d+)?)s", notice)
        assert "got SIGTERM" in notice
        if announced:
            assert float(announced.group(1)) + 2 <= min(policy.restart_grace(job), job.stop_grace_seconds), notice
