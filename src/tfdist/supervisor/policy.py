"""Success, restart and teardown rules as pure functions of task statuses.

No I/O and no clock: the loop passes ``now`` in. That keeps every rule testable in
isolation (tests/supervisor/test_policy.py) and lets every backend share them.

Restart counting, stated once: ``max_restarts`` is one budget for the training tasks of
the job; one *restart* is one decision to start tasks again, whether that is one
parameter-server worker or the whole all-reduce group. The evaluator's restarts are counted
apart, against the same number, so a failing sidecar never costs training a restart.
Status and summary show used and left.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tfdist.jobspec.model import JobSpec, RestartPolicyName
from tfdist.states import ENDED_TASK_STATES, TaskState, describe_exit
from tfdist.supervisor.status import TaskStatus


@dataclass(frozen=True)
class Restart:
    tasks: list[str]
    delay: float
    cause: str
    counted: bool = True  # spends training's budget (an evaluator restart has its own)


@dataclass(frozen=True)
class Fail:
    cause: str
    reason: str


@dataclass(frozen=True)
class Ignore:
    """A failure that does not affect training (an evaluator out of restarts)."""

    cause: str


Decision = Restart | Fail | Ignore


def success_task(job: JobSpec) -> str:
    """The task whose success is the job's success under ``success: chief``."""
    return "chief-0" if job.has_chief else "worker-0"


def training_tasks(statuses: Mapping[str, TaskStatus]) -> list[str]:
    return [n for n, s in statuses.items() if s.role in ("chief", "worker")]


def success_reached(job: JobSpec, statuses: Mapping[str, TaskStatus]) -> bool:
    """Has the job met its success rule?"""
    if job.success == "all-workers":
        names = training_tasks(statuses)
        return bool(names) and all(statuses[n].state is TaskState.SUCCEEDED for n in names)
    status = statuses.get(success_task(job))
    return status is not None and status.state is TaskState.SUCCEEDED


def retryable(policy: RestartPolicyName, exit_code: int | None) -> bool:
    """Does this restart policy retry a task that ended with ``exit_code``?

    ``exit-code``: 128 and above and deaths by signal are retryable (preemption, OOM kill,
    SIGTERM); 1 to 127 are the program's own verdict and permanent.
    """
    if policy == "never":
        return False
    if policy in ("on-failure", "always"):
        return True
    return exit_code is None or exit_code < 0 or exit_code >= 128


def restart_group(
    job: JobSpec, statuses: Mapping[str, TaskStatus], failed: str, *, addresses_vanish: bool = False
) -> list[str]:
    """The tasks that must start again when ``failed`` died, by strategy.

    All-reduce collectives cannot lose a member, so all training tasks restart together.
    Under parameter servers a worker restarts alone (the coordinator re-dispatches its work);
    a dead ps or chief loses the variables or the coordinator, so ps and chief restart and
    training resumes from the last checkpoint. The evaluator always restarts alone.

    ``addresses_vanish`` (the backend's, ``Backend.addresses_vanish``: Kubernetes): the
    workers restart with the ps and the chief too. While the ps was down its DNS name did
    not resolve, and the surviving workers' gRPC channels keep that failed lookup for
    their resolver's backoff: on real pods the restarted chief's first steps failed with
    the workers' "errors resolving <ps name>: Temporary failure in name resolution" even
    though the new ps already served (twice in a row on a loaded machine, using up the
    budget). New workers look the name up afresh.
    """
    role = statuses[failed].role
    if role == "evaluator":
        return [failed]
    if job.strategy == "parameter_server":
        if role == "worker":
            return [failed]
        group = ("chief", "ps", "worker") if addresses_vanish else ("chief", "ps")
        return [n for n, s in statuses.items() if s.role in group]
    return [n for n, s in statuses.items() if s.role in ("chief", "worker", "ps")]


def restart_grace(job: JobSpec) -> float:
    """Grace for stopping the survivors of a failure before a restart.

    Under all-reduce the group's collectives are already broken when a member died: the
    survivors have nothing left to save (their last backup stands), so a short grace gets
    the group back sooner; their SIGTERM notice promises no save window there
    (``tfdist.runtime.strategies.sigterm_notice``). Parameter-server restarts keep the full
    grace, the window a task announces.
    """
    if job.strategy == "multi_worker_mirrored":
        return min(job.stop_grace_seconds, 3.0)
    return job.stop_grace_seconds


def backoff(job: JobSpec, restart_number: int) -> float:
    """Seconds to wait before restart number ``restart_number`` (1-based), capped."""
    spec = job.restart
    return float(
        min(spec.backoff_max_seconds, spec.backoff_seconds * 2 ** max(0, restart_number - 1))
    )


def on_failure(
    job: JobSpec, statuses: Mapping[str, TaskStatus], failed: str, restarts_used: int,
    *, final: bool = False, addresses_vanish: bool = False,
) -> Decision:
    """What to do when task ``failed`` ended badly (``final``: its backend said it cannot
    be started again, see ``Exited.final``; ``addresses_vanish``: see
    :func:`restart_group`)."""
    status = statuses[failed]
    policy = job.restart_policy_for(status.role)
    # The evaluator has a budget of its own (its own restarts, up to max_restarts): a
    # crash-looping sidecar must not use up the restarts that training needs.
    counted = status.role != "evaluator"
    used = restarts_used if counted else status.restarts
    left = job.restart.max_restarts - used
    if retryable(policy, status.exit_code) and left > 0 and not final:
        group = restart_group(job, statuses, failed, addresses_vanish=addresses_vanish)
        return Restart(group, backoff(job, used + 1), failed, counted)
    if status.role == "evaluator":
        return Ignore(failed)
    what = status.reason or describe_exit(status.exit_code)
    if final:
        why = f"{failed} failed ({what}); it cannot be started again"
    elif not retryable(policy, status.exit_code):
        why = f"{failed} failed ({what}); restart policy '{policy}' does not retry it"
    else:
        why = (
            f"{failed} failed ({what}) and the restart budget is used up "
            f"({restarts_used} of {job.restart.max_restarts})"
        )
    return Fail(failed, why)


def exit_state(role: str, exit_code: int, stopping: bool) -> TaskState:
    """How an exit counts: asked-for stops are never failures."""
    if stopping:
        return TaskState.STOPPED
    return TaskState.SUCCEEDED if exit_code == 0 else TaskState.FAILED


def unexpected_exit(job: JobSpec, status: TaskStatus, success: bool) -> bool:
    """A clean exit that still breaks training: a ps that quit, a parameter-server worker
    that quit (they serve until stopped), or, under ``always``, an evaluator that ended
    before the job was done."""
    if success or status.state is not TaskState.SUCCEEDED:
        return False
    if status.role == "ps" or (status.role == "worker" and job.strategy == "parameter_server"):
        return True
    return job.restart_policy_for(status.role) == "always" and status.role == "evaluator"


def stop_at_success(
    job: JobSpec, statuses: Mapping[str, TaskStatus]
) -> tuple[list[str], list[str]]:
    """After success: (stop now, let drain).

    ps tasks (and workers under parameter servers) block in ``server.join()`` forever and
    are stopped at once; the evaluator and all-reduce workers may still be finishing their
    last evaluation or save, so they get ``drain_seconds`` before they are stopped.
    """
    now: list[str] = []
    drain: list[str] = []
    for name, s in statuses.items():
        if s.state in ENDED_TASK_STATES:
            continue
        if s.role == "ps" or (s.role == "worker" and job.strategy == "parameter_server"):
            now.append(name)
        else:
            drain.append(name)
    return now, drain


def hung_tasks(
    job: JobSpec, statuses: Mapping[str, TaskStatus], last_activity: Mapping[str, float], now: float
) -> list[str]:
    """Running tasks silent (no output, no progress) for longer than hang_timeout_seconds;
    ``last_activity`` is each task's last sign of life on the same clock as ``now``.

    Only the tasks that run the training loop are watched: every chief and worker under
    all-reduce, the chief alone under parameter-server training, where workers (like ps)
    are gRPC servers that execute the chief's steps and print nothing while they do."""
    limit = job.hang_timeout_seconds
    if limit is None:
        return []
    watched = ("chief",) if job.strategy == "parameter_server" else ("chief", "worker")
    return [
        n
        for n, s in statuses.items()
        if s.state is TaskState.RUNNING
        and s.role in watched
        and n in last_activity
        and now - last_activity[n] > limit
    ]
