"""Plan a job: which tasks exist, where they listen, and each task's environment.

Everything here is a pure function of the spec and the addresses a backend reserved, so the
same plan feeds local processes, Kubernetes manifests and Ray actors.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from tfdist import contract
from tfdist.contract import ROLES, TRAINING_ROLES
from tfdist.jobspec.model import JobSpec, StrategyOptions

__all__ = [
    "Task", "TaskId", "cluster_json", "cluster_map", "make_task", "plan", "task_env",
]


@dataclass(frozen=True)
class TaskId:
    """A task's role and index; its name follows Kubeflow: ``<role>-<index>``."""

    role: str
    index: int

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @staticmethod
    def parse(name: str) -> TaskId:
        role, _, index = name.rpartition("-")
        return TaskId(role, int(index))


@dataclass(frozen=True)
class Task:
    """One task ready to start: command, environment and address."""

    id: TaskId
    command: list[str]
    env: dict[str, str]
    address: str | None  # host:port in the training cluster; None for the evaluator
    gpus: int = 0
    cpus: float | None = None
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.id.name

    @property
    def role(self) -> str:
        return self.id.role


def task_ids(job: JobSpec) -> list[TaskId]:
    """All tasks of the job in a stable order: chief, workers, ps, evaluator."""
    return [TaskId(role, i) for role in ROLES for i in range(job.replicas(role))]


def needs_address(task: TaskId) -> bool:
    """Only training-cluster tasks listen; the evaluator never joins the cluster."""
    return task.role in TRAINING_ROLES


def cluster_map(job: JobSpec, addresses: Mapping[str, str]) -> dict[str, list[str]]:
    """The ``cluster`` of TF_CONFIG: training roles only, each list ordered by index."""
    cluster: dict[str, list[str]] = {}
    for role in TRAINING_ROLES:
        n = job.replicas(role)
        if n:
            cluster[role] = [addresses[TaskId(role, i).name] for i in range(n)]
    return cluster


def with_cluster(tf_config: str, cluster: Mapping[str, list[str]]) -> str:
    """A task's TF_CONFIG (JSON) with its cluster map replaced, the rest kept: what a task
    gets when its backend moved the job's tasks to other hosts (one died) after TF_CONFIG
    was first written."""
    config = json.loads(tf_config)
    config["cluster"] = {role: list(addrs) for role, addrs in cluster.items()}
    return json.dumps(config, separators=(",", ":"))


@functools.lru_cache(maxsize=4)
def _members_json(members: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    return json.dumps({r: list(a) for r, a in members}, separators=(",", ":"))


def cluster_json(cluster: Mapping[str, list[str]]) -> str:
    """The ``cluster`` part of TF_CONFIG as compact JSON, encoded once per cluster map."""
    return _members_json(tuple((r, tuple(a)) for r, a in cluster.items()))


@functools.lru_cache(maxsize=4)
def _options_json(options: StrategyOptions) -> str:
    return json.dumps(options.dump(), separators=(",", ":"))


def tf_config_json(members: str, role: str, index: str) -> str:
    """TF_CONFIG as compact JSON; ``members`` (the cluster JSON, or a ``$(VAR)``) and
    ``index`` (a number, or a ``$(VAR)``) are written as is."""
    return f'{{"cluster":{members},"task":{{"type":{json.dumps(role)},"index":{index}}}}}'


def task_env(
    job: JobSpec,
    task: TaskId,
    cluster: Mapping[str, list[str]],
    *,
    run_dir: str,
    restart_count: int = 0,
    index_ref: str | None = None,
    cluster_ref: str | None = None,
) -> dict[str, str]:
    """The environment tfdist adds for one task (job env and role env win last).

    This is the one place a task's environment is planned, for every backend. ``index_ref``
    is for a pod template shared by all tasks of a role: the task index in TF_CONFIG and
    TFDIST_TASK becomes that raw text (Kubernetes' ``$(VAR)`` expansion fills it per pod).
    ``cluster_ref`` likewise replaces TF_CONFIG's cluster map (then ``cluster`` is unused):
    supervised pods read the map from a ConfigMap instead of carrying it each.
    """
    index = str(task.index) if index_ref is None else index_ref
    members = cluster_json(cluster) if cluster_ref is None else cluster_ref
    env = {
        contract.TF_CONFIG: tf_config_json(members, task.role, index),
        contract.JOB_NAME: job.name,
        contract.TASK: f"{task.role}-{index}",
        contract.RESTART_COUNT: str(restart_count),
        contract.RUN_DIR: run_dir,
        contract.STRATEGY: job.strategy,
        contract.OPTIONS: _options_json(job.options),
        # how long a stopped task has before SIGKILL: the runtime's save window on SIGTERM
        contract.STOP_GRACE: f"{job.stop_grace_seconds:g}",
        "PYTHONUNBUFFERED": "1",
    }
    if job.legacy_keras is not False:  # null: here yes; Kubernetes pods leave it to the image
        env[contract.LEGACY_KERAS] = "1"
    env.update(job.env)
    env.update(job.role(task.role).env)
    return env


def make_task(
    job: JobSpec,
    tid: TaskId,
    cluster: Mapping[str, list[str]],
    addresses: Mapping[str, str],
    *,
    run_dir: str,
    restart_count: int = 0,
) -> Task:
    """One task ready to start, given the job's cluster map."""
    role = job.role(tid.role)
    return Task(
        id=tid,
        command=job.command_for(tid.role),
        env=task_env(job, tid, cluster, run_dir=run_dir, restart_count=restart_count),
        address=addresses.get(tid.name),
        gpus=role.resources.gpus,
        cpus=role.resources.cpus,
    )


def plan(
    job: JobSpec,
    addresses: Mapping[str, str],
    *,
    run_dir: str,
    restart_counts: Mapping[str, int] | None = None,
) -> list[Task]:
    """Every task of the job with its command, environment and address."""
    cluster = cluster_map(job, addresses)
    counts = restart_counts or {}
    return [
        make_task(job, tid, cluster, addresses, run_dir=run_dir, restart_count=counts.get(tid.name, 0))
        for tid in task_ids(job)
    ]
