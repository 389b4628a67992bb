"""What the tfdist supervisor creates itself on Kubernetes (``--backend kubernetes``).

Bare pods, one per task attempt (``restartPolicy: Never``: the supervisor, not a Job
controller, decides restarts), plus the run's headless Service, NetworkPolicy and one
ConfigMap with the cluster map.

**Why a ConfigMap.** TF_CONFIG lists every task's address, ~39 KB at 1,000 tasks; carried
in every pod's env, that is N² bytes which the API server, etcd, the scheduler, the
kubelets and tfdist's own watch encode or decode at every change of every pod. So the map
is stored once per run (:func:`cluster_config_map`) and each pod declares
``TFDIST_CLUSTER`` from it (``valueFrom.configMapKeyRef``) *before* TF_CONFIG, whose value
is ``{"cluster":$(TFDIST_CLUSTER),"task":{...}}``: the kubelet expands it before the
process starts, as it does the task index of the rendered forms (:mod:`.manifests`), so
the task reads a literal TF_CONFIG identical to the local backend's. The reference is
required (not ``optional``): a pod whose ConfigMap is gone fails to start, it never runs
with a wrong TF_CONFIG. A TF_CONFIG set in the job's own env stays a literal, as anywhere.
"""

from __future__ import annotations

import math
import re
from typing import Any

from tfdist import contract
from tfdist.backends.k8s import leave, workdir
from tfdist.backends.k8s.manifests import (
    container,
    env_list,
    headless_service,
    image_keras,
    network_policy,
    pod_spec,
)
from tfdist.backends.k8s.names import (
    LABEL_ATTEMPT,
    LABEL_RUN,
    LABEL_TASK,
    addresses,
    check,
    metadata,
    pod_run_dir,
)
from tfdist.cluster import Task, cluster_json, cluster_map, task_env
from tfdist.errors import SpecError
from tfdist.jobspec.model import JobSpec

#: The variable each pod reads the cluster map into, listed before TF_CONFIG.
CLUSTER_VAR = "TFDIST_CLUSTER"
#: The ConfigMap's key holding the cluster map (compact JSON).
CLUSTER_KEY = "cluster"
#: What the API server accepts in one ConfigMap's data (keys and values together).
CONFIG_MAP_LIMIT = 1 << 20


def config_map_name(run_id: str, what: str = "cluster") -> str:
    """The run's ConfigMap: a DNS subdomain (lower case, at most 253 characters) made from
    the run id (at most 63), so two runs of one job never share it; ``what`` is ``cluster``
    (the cluster map), ``workdir`` (the shipped workdir, :mod:`.workdir`) or ``program``
    (the leave program, :mod:`.leave`)."""
    base = re.sub(r"[^a-z0-9.-]", "-", run_id.lower()).strip("-.") or "run"
    return f"{base}-{what}"


def workdir_map(job: JobSpec, run_id: str) -> str | None:
    """The run's ConfigMap of the shipped workdir, or None when the job does not ship it."""
    return config_map_name(run_id, "workdir") if workdir.ships(job) else None


def program_map(job: JobSpec, run_id: str) -> str | None:
    """The run's ConfigMap of the leave program, or None when no task runs it."""
    return config_map_name(run_id, "program") if leave.needed(job) else None


def cluster_config_map(job: JobSpec, run_id: str, limit: int = CONFIG_MAP_LIMIT) -> dict[str, Any]:
    """The ConfigMap with the job's cluster map; a job whose map would not fit is refused
    (a SpecError, one line) before anything is created."""
    data = {CLUSTER_KEY: cluster_json(cluster_map(job, addresses(job, "pods")))}
    size = sum(len(k.encode()) + len(v.encode()) for k, v in data.items())
    if size > limit:
        tasks = sum(job.replicas(r) for r in job.roles)
        raise SpecError(
            f"roles: {tasks} tasks make a cluster map (TF_CONFIG) of {size} bytes, over the "
            f"{limit} bytes a Kubernetes ConfigMap holds; run fewer tasks or give the job a shorter name"
        )
    meta = metadata(job, config_map_name(run_id))  # run_objects labels it with the run
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def run_objects(job: JobSpec, run_id: str, archive: bytes | None = None) -> list[dict[str, Any]]:
    """What outlives single pods during a supervised run, in the order to create them: the
    ConfigMaps first (pods refer to them: the cluster map, the workdir's ``archive`` when
    the job ships it, packed by :func:`.workdir.pack` if not given, and the leave program
    when a task runs it), the Service and the NetworkPolicy."""
    check(job, "pods")
    objs = [cluster_config_map(job, run_id)]
    shipped = workdir_map(job, run_id)
    if shipped:
        archive = workdir.pack(job) if archive is None else archive
        objs.append(workdir.config_map(job, shipped, archive, metadata(job, shipped)))
    program = program_map(job, run_id)
    if program:
        objs.append(leave.config_map(program, metadata(job, program)))
    objs += [headless_service(job), network_policy(job)]
    for obj in objs:
        obj["metadata"]["labels"][LABEL_RUN] = run_id
    return objs


def pod_name(job: JobSpec, task: str, attempt: int) -> str:
    return f"{job.name}-{task}-a{attempt}"


def pod_env(job: JobSpec, task: Task, run_id: str) -> list[dict[str, Any]]:
    """The container env of a task's pod: the task's plan (:func:`tfdist.cluster.task_env`,
    with the cluster map by reference) but the run directory, which is a path in the pod."""
    env = task_env(job, task.id, {}, run_dir=pod_run_dir(job), cluster_ref=f"$({CLUSTER_VAR})")
    env[contract.RESTART_COUNT] = task.env[contract.RESTART_COUNT]  # the supervisor's count
    env = image_keras(job, task.role, env)
    computed: dict[str, dict[str, Any]] = {}
    if contract.TF_CONFIG not in {**job.env, **job.role(task.role).env}:
        ref = {"name": config_map_name(run_id), "key": CLUSTER_KEY}
        computed[CLUSTER_VAR] = {"valueFrom": {"configMapKeyRef": ref}}
        computed[contract.TF_CONFIG] = {"value": env[contract.TF_CONFIG]}  # ours: no escaping
    return env_list(env, computed)


def task_pod(job: JobSpec, task: Task, attempt: int, run_id: str) -> dict[str, Any]:
    """One attempt of one task as a bare pod (a new pod per attempt, same hostname so
    TF_CONFIG stays valid)."""
    shipped, program = workdir_map(job, run_id), program_map(job, run_id)
    main = container(job, task.role, pod_env(job, task, run_id), "grpc", task.command, shipped, program)
    spec = pod_spec(job, main, "Never", shipped, program)
    spec["hostname"] = f"{job.name}-{task.name}"
    spec["subdomain"] = job.name
    spec["terminationGracePeriodSeconds"] = math.ceil(job.stop_grace_seconds)
    meta = metadata(job, pod_name(job, task.name, attempt), task.role)
    meta["labels"].update({LABEL_TASK: task.name, LABEL_RUN: run_id, LABEL_ATTEMPT: str(attempt)})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
