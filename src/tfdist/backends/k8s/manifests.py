"""Kubernetes manifests for a job, as plain dicts (no I/O, no kubernetes import).

Three ways to run the same :class:`~tfdist.jobspec.model.JobSpec` on a cluster, chosen with
``render(job, as_=...)``:

``jobset``
    One JobSet (jobset.x-k8s.io/v1alpha2) with one replicatedJob per role. JobSet restarts
    the whole group on failure (what all-reduce training needs), ends the set when the
    success rule is met (so parameter servers do not outlive training) and gives every pod
    the stable DNS name ``<jobset>-<role>-0-<index>.<jobset>``.
``tfjob``
    A Kubeflow TFJob for clusters with the training operator. The operator writes
    TF_CONFIG itself, so tfdist adds only its own variables; ``cleanPodPolicy: Running``
    deletes parameter servers once the job is done (kubeflow/trainer #774).
``jobs``
    One Indexed Job per role plus a headless Service used as the pods' ``subdomain``, for
    clusters with neither; pods are ``<job>-<role>-<index>.<job>``.

Every mode also renders a NetworkPolicy: TensorFlow's gRPC servers have no authentication,
so only the job's own pods (by label) may reach the gRPC port.

**One pod template per role.** A Job (and so a JobSet replicatedJob) has one pod template
for all its pods, yet TF_CONFIG differs per pod by ``task.index``. Rather than one Job per
task (N Jobs, N times the API objects and a group that JobSet could no longer see as one
role), TF_CONFIG uses Kubernetes' own dependent-variable expansion: the Job controller
gives each pod of an Indexed Job its index in the pod annotation
``batch.kubernetes.io/job-completion-index``; we declare ``JOB_COMPLETION_INDEX`` from that
annotation first (the controller then does not add its own copy) and write
``"index":$(JOB_COMPLETION_INDEX)`` in TF_CONFIG. The kubelet expands it before the
process starts, so the task reads a literal TF_CONFIG, identical to the local backend's.
All literal strings (user env, commands) are escaped (:func:`literal`) so that they stay
literal on Kubernetes too, as they are on the local backend.

What :mod:`tfdist.backends.k8s.backend` creates when tfdist itself supervises the job
(bare pods, a ConfigMap with the cluster map) is built by :mod:`.supervised` from the
blocks here.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from tfdist import contract
from tfdist.backends.k8s import leave, workdir
from tfdist.backends.k8s.names import (
    LABEL_JOB,
    MODES,
    active_roles,
    addresses,
    check,
    labels,
    literal,
    metadata,
    pod_run_dir,
)
from tfdist.cluster import TaskId, cluster_map, task_env
from tfdist.errors import SpecError
from tfdist.jobspec import tfjob as tfjob_form
from tfdist.jobspec.model import JobSpec, RestartPolicyName
from tfdist.jobspec.tfjob import CONTAINER, LEAVE_VOLUME, WORKDIR_MOUNT
from tfdist.node import leave_program

INDEX_VAR = "JOB_COMPLETION_INDEX"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
JOBSET_RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"
#: Exit codes that mean "the program itself failed" under the exit-code policy (as in
#: Kubeflow's ExitCode policy and tfdist.supervisor.policy): not worth a restart.
PERMANENT_EXIT_CODES = list(range(1, 128))


# -- building blocks ----------------------------------------------------------------


def cpu_quantity(cpus: float) -> str:
    """``1.0`` -> ``"1"``, ``0.5`` -> ``"500m"`` (what kubectl shows)."""
    if float(cpus).is_integer():
        return str(int(cpus))
    return f"{round(cpus * 1000)}m"


def resources(job: JobSpec, role: str) -> dict[str, Any]:
    """Requests and limits. Memory is also a limit so that OOMKilled means what it says;
    CPU is only a request (a CPU limit throttles all-reduce steps unpredictably)."""
    spec = job.role(role).resources
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    if spec.cpus:
        requests["cpu"] = cpu_quantity(spec.cpus)
    if spec.memory:
        requests["memory"] = limits["memory"] = spec.memory
    if spec.gpus:
        limits["nvidia.com/gpu"] = spec.gpus
    found = {}
    if requests:
        found["requests"] = requests
    if limits:
        found["limits"] = limits
    return found


def env_list(env: dict[str, str], computed: dict[str, dict[str, Any]] | None = None) -> list:
    """Container ``env``: variables others refer to first, then the rest in order.

    ``computed`` holds entries that are not literals (downward API, ``$(VAR)`` expansion);
    they replace the literal of the same name and keep Kubernetes' rule that a
    ``$(VAR)`` can only refer to a variable defined earlier in the list.
    """
    computed = computed or {}
    refs = [name for name, entry in computed.items() if "valueFrom" in entry]
    items = [{"name": name, **computed[name]} for name in refs]
    for name, value in env.items():
        if name in refs:
            continue
        entry = computed.get(name, {"value": literal(value)})
        items.append({"name": name, **entry})
    for name, entry in computed.items():
        if name not in refs and name not in env:
            items.append({"name": name, **entry})
    return items


def _field(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


def role_env(job: JobSpec, role: str, as_: str) -> list[dict[str, Any]]:
    """The environment of a role's pod template (see the module docstring for the index)."""
    several = job.replicas(role) > 1
    index_var = tfjob_form.INDEX_VAR if as_ == "tfjob" else INDEX_VAR
    cluster = cluster_map(job, addresses(job, as_))
    env = task_env(job, TaskId(role, 0), cluster, run_dir=pod_run_dir(job),
                   index_ref=f"$({index_var})" if several else None)
    env = image_keras(job, role, env)
    computed: dict[str, dict[str, Any]] = {}
    if several:
        if as_ == "tfjob":
            source = f"labels['{tfjob_form.INDEX_LABEL}']"
        else:
            source = f"annotations['{INDEX_ANNOTATION}']"
        computed[index_var] = _field(f"metadata.{source}")
        user = {**job.env, **job.role(role).env}
        for name in (contract.TF_CONFIG, contract.TASK):
            if name not in user:  # ours, with a $(VAR) for Kubernetes to expand: no escaping
                computed[name] = {"value": env[name]}
    if as_ == "tfjob":
        env.pop(contract.TF_CONFIG)  # the training operator writes it
        computed.pop(contract.TF_CONFIG, None)
        if job.legacy_keras is False:  # so the choice survives a round trip (null: not set)
            env.setdefault(contract.LEGACY_KERAS, "0")
    elif as_ == "jobset":
        computed[contract.RESTART_COUNT] = _field(f"metadata.labels['{JOBSET_RESTART_LABEL}']")
    return env_list(env, computed)


def image_keras(job: JobSpec, role: str, env: dict[str, str]) -> dict[str, str]:
    """``legacy_keras: null`` (a TFJob that does not set it): the image decides, so no
    TF_USE_LEGACY_KERAS unless the user's own env sets it (an image without tf_keras fails)."""
    if job.legacy_keras is None and contract.LEGACY_KERAS not in {**job.env, **job.role(role).env}:
        env.pop(contract.LEGACY_KERAS, None)
    return env


def container(
    job: JobSpec, role: str, env: list[dict[str, Any]], port_name: str, command: list[str],
    workdir_map: str | None = None, program_map: str | None = None,
) -> dict[str, Any]:
    """The task's container; with ``workdir_map`` (the ConfigMap of the shipped workdir, see
    :mod:`.workdir`) its command unpacks the workdir first and starts there; with
    ``program_map`` (the leave program's ConfigMap, :mod:`.leave`) a MultiWorkerMirrored
    chief's or worker's script runs through the program, mounted from it."""
    found: dict[str, Any] = {"name": CONTAINER, "image": job.image_for(role)}
    leaves = leave.plan(job, role, command) if program_map else None
    if command:
        command = leave_program.launch(command, leaves)
        found["command"] = [literal(part) for part in (workdir.command(command) if workdir_map else command)]
    elif job.role(role).kubernetes.args:  # the image's entrypoint runs (only --as tfjob)
        found["args"] = [literal(part) for part in job.role(role).kubernetes.args or []]
    found["env"] = env
    if role != "evaluator":
        found["ports"] = [{"name": port_name, "containerPort": job.kubernetes.port, "protocol": "TCP"}]
    if workdir_map:
        found["workingDir"] = WORKDIR_MOUNT
    elif job.kubernetes.working_dir:
        found["workingDir"] = job.kubernetes.working_dir
    if job.kubernetes.image_pull_policy:
        found["imagePullPolicy"] = job.kubernetes.image_pull_policy
    found_resources = resources(job, role)
    if found_resources:
        found["resources"] = found_resources
    mounts = workdir.mounts() if workdir_map else []
    if leaves:
        mounts.append(leave.mount())
    if job.kubernetes.model_volume_claim:
        mounts.insert(0, {"name": "model", "mountPath": job.kubernetes.model_mount_path})
    if mounts:
        found["volumeMounts"] = mounts
    return found


def pod_spec(
    job: JobSpec, main: dict[str, Any], restart_policy: str, workdir_map: str | None = None,
    program_map: str | None = None,
) -> dict[str, Any]:
    """The pod around ``main``: its volumes are the ConfigMaps its container mounts (the
    program's only where :func:`container` runs the command through it) and the claim."""
    spec: dict[str, Any] = {"restartPolicy": restart_policy, "containers": [main]}
    k8s = job.kubernetes
    if k8s.service_account:
        spec["serviceAccountName"] = k8s.service_account
    if k8s.node_selector:
        spec["nodeSelector"] = dict(k8s.node_selector)
    if k8s.tolerations:
        spec["tolerations"] = [dict(t) for t in k8s.tolerations]
    volumes = workdir.volumes(workdir_map) if workdir_map else []
    if program_map and any(m["name"] == LEAVE_VOLUME for m in main.get("volumeMounts", [])):
        volumes.append(leave.volume(program_map))
    if k8s.model_volume_claim:
        volumes.insert(0, {"name": "model", "persistentVolumeClaim": {"claimName": k8s.model_volume_claim}})
    if volumes:
        spec["volumes"] = volumes
    return spec


def workdir_map_name(job: JobSpec) -> str | None:
    """The rendered forms' ConfigMap of the shipped workdir (:mod:`.workdir`), or None."""
    return f"{job.name}-workdir" if workdir.ships(job) else None


def program_map_name(job: JobSpec) -> str | None:
    """The rendered forms' ConfigMap of the leave program (:mod:`.leave`), or None."""
    return f"{job.name}-program" if leave.needed(job) else None


def restart_settings(job: JobSpec, role: str, *, in_group: bool = True) -> tuple[str, int, bool]:
    """(pod restartPolicy, Job backoffLimit, exit-code rule?) for a role's Job.

    Under ParameterServerStrategy a worker may restart alone (the coordinator reschedules
    its closures), so it restarts in place. Every other failure restarts the group (JobSet
    ``failurePolicy``) or, for plain Jobs, recreates the pod with the same index and name.

    In a group (``in_group``, JobSet) the evaluator restarts in place on a budget of its
    own (``max_restarts``), as under the tfdist supervisor: its failures must not restart
    training. Two limits of JobSet remain: an evaluator that uses up its budget fails its
    Job, which JobSet (having no rule to ignore a child Job) answers with its failure
    policy; and under ``exit-code`` its permanent codes are retried too, since a rule that
    failed its Job would fail the whole set. Plain Jobs have no group: there the evaluator's
    Job simply fails alone.
    """
    policy: RestartPolicyName = job.restart_policy_for(role)
    if policy == "never":
        return "Never", 0, False
    if role == "evaluator" and in_group:
        return "OnFailure", job.restart.max_restarts, False
    if job.strategy == "parameter_server" and role == "worker" and policy in ("on-failure", "always"):
        return "OnFailure", job.restart.max_restarts, False
    return "Never", job.restart.max_restarts, policy == "exit-code"


def _deadline(job: JobSpec) -> int | None:
    return math.ceil(job.deadline_seconds) if job.deadline_seconds else None


def job_spec(job: JobSpec, role: str, as_: str, *, group_restarts: bool) -> dict[str, Any]:
    """An Indexed Job's spec for one role (used by both ``jobset`` and ``jobs``)."""
    n = job.replicas(role)
    restart_policy, backoff, exit_code_rule = restart_settings(job, role, in_group=group_restarts)
    if group_restarts and restart_policy == "Never":
        backoff = 0  # JobSet restarts the whole group instead
    shipped, program = workdir_map_name(job), program_map_name(job)
    main = container(job, role, role_env(job, role, as_), "grpc", job.command_for(role), shipped, program)
    pod = pod_spec(job, main, restart_policy, shipped, program)
    if as_ == "jobs":
        pod["subdomain"] = job.name
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": n,
        "parallelism": n,
        "backoffLimit": backoff,
    }
    if exit_code_rule:
        spec["podFailurePolicy"] = {
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": CONTAINER,
                        "operator": "In",
                        "values": PERMANENT_EXIT_CODES,
                    },
                    # required (possibly empty) by the schema of Kubernetes <= 1.28
                    "onPodConditions": [],
                }
            ]
        }
    deadline = _deadline(job)
    if deadline:
        spec["activeDeadlineSeconds"] = deadline
    spec["template"] = {"metadata": {"labels": labels(job, role)}, "spec": pod}
    return spec


def success_targets(job: JobSpec) -> list[str]:
    """The roles whose completion makes the job succeed (JobSet successPolicy)."""
    if job.success == "all-workers":
        return [r for r in ("chief", "worker") if job.replicas(r)]
    return ["chief"] if job.has_chief else ["worker"]


def network_policy(job: JobSpec) -> dict[str, Any]:
    """Only the job's own pods may reach its gRPC port; every other port stays as it was.

    A NetworkPolicy that selects pods denies whatever it does not allow, so the second rule
    re-opens all other TCP ports, UDP and SCTP: the policy narrows the gRPC port and nothing
    else. Trust is by label: any pod in the namespace labelled ``tfdist.io/job: <job name>``
    is one of "the job's own pods", whoever created it. The ranges use ``endPort``
    (Kubernetes 1.25+); a network plugin that ignores it would re-open only each range's
    first port.
    """
    port = job.kubernetes.port
    own = {"podSelector": {"matchLabels": {LABEL_JOB: job.name}}}
    others: list[dict[str, Any]] = []
    if port > 1:
        others.append({"protocol": "TCP", "port": 1, "endPort": port - 1})
    if port < 65535:
        others.append({"protocol": "TCP", "port": port + 1, "endPort": 65535})
    others.append({"protocol": "UDP", "port": 1, "endPort": 65535})
    others.append({"protocol": "SCTP", "port": 1, "endPort": 65535})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(job, f"{job.name}-grpc"),
        "spec": {
            "podSelector": {"matchLabels": {LABEL_JOB: job.name}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [own], "ports": [{"protocol": "TCP", "port": port}]},
                {"ports": others},
            ],
        },
    }


def headless_service(job: JobSpec, selector: dict[str, str] | None = None) -> dict[str, Any]:
    """The Service that gives pods DNS names ``<hostname>.<job>``.

    ``publishNotReadyAddresses``: TensorFlow tasks resolve each other while starting,
    before any readiness could be reported.
    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(job, job.name),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector or {LABEL_JOB: job.name},
            "ports": [
                {
                    "name": "grpc",
                    "port": job.kubernetes.port,
                    "targetPort": job.kubernetes.port,
                    "protocol": "TCP",
                }
            ],
        },
    }


# -- the three forms ----------------------------------------------------------------


def jobset(job: JobSpec) -> dict[str, Any]:
    # failure rule names: letters, digits, '_', ',' and ':' (JobSet's webhook refuses '-')
    # training's budget: the evaluator restarts in place (restart_settings), never the set
    failure: dict[str, Any] = {"maxRestarts": job.restart_budget}
    rules: list[dict[str, Any]] = []
    # a training role whose policy is never fails the job, as under the supervisor and a TFJob
    never = [r for r in active_roles(job) if r != "evaluator" and job.restart_policy_for(r) == "never"]
    if job.restart_budget and never:
        rules.append({"name": "never_restarted", "action": "FailJobSet", "targetReplicatedJobs": never})
    if any(restart_settings(job, r)[2] for r in active_roles(job)):
        permanent = {"name": "permanent_exit_code", "action": "FailJobSet"}
        rules.append({**permanent, "onJobFailureReasons": ["PodFailurePolicy"]})
    if rules:
        failure["rules"] = rules
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata(job, job.name),
        "spec": {
            "network": {"enableDNSHostnames": True, "subdomain": job.name},
            "failurePolicy": failure,
            "successPolicy": {"operator": "All", "targetReplicatedJobs": success_targets(job)},
            "replicatedJobs": [
                {
                    "name": role,
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": labels(job, role)},
                        "spec": job_spec(job, role, "jobset", group_restarts=True),
                    },
                }
                for role in active_roles(job)
            ],
        },
    }


def tfjob(job: JobSpec) -> dict[str, Any]:
    """The TFJob form: each role's pod template, in the TFJob :mod:`tfdist.jobspec.tfjob` writes."""
    templates = {}
    shipped, program = workdir_map_name(job), program_map_name(job)
    for role in active_roles(job):
        env = role_env(job, role, "tfjob")
        main = container(job, role, env, tfjob_form.PORT_NAME, job.command_for(role), shipped, program)
        templates[role] = {
            "metadata": {"labels": labels(job, role)},
            # the operator sets the pod's restartPolicy from the replica spec
            "spec": {k: v for k, v in pod_spec(job, main, "Never", shipped, program).items()
                     if k != "restartPolicy"},
        }
    return tfjob_form.manifest(job, metadata(job, job.name), templates)


def indexed_jobs(job: JobSpec) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata(job, f"{job.name}-{role}", role),
            "spec": job_spec(job, role, "jobs", group_restarts=False),
        }
        for role in active_roles(job)
    ]


def render(job: JobSpec, as_: str = "jobset") -> list[dict[str, Any]]:
    """Every object to apply for ``job`` in form ``as_`` (jobset, tfjob or jobs)."""
    if as_ not in MODES:
        raise SpecError(f"--as: unknown form '{as_}'; choose one of {', '.join(MODES)}")
    check(job, as_)
    shipped, program = workdir_map_name(job), program_map_name(job)
    first = [workdir.config_map(job, shipped, workdir.pack(job), metadata(job, shipped))] if shipped else []
    if program:
        first.append(leave.config_map(program, metadata(job, program)))
    if as_ == "jobset":
        return [*first, network_policy(job), jobset(job)]
    if as_ == "tfjob":
        return [*first, network_policy(job), tfjob(job)]
    return [*first, headless_service(job), network_policy(job), *indexed_jobs(job)]


class _Dumper(yaml.SafeDumper):
    """Block style, no ``&id001`` anchors for repeated values, lists of numbers on one line."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = bool(data) and all(isinstance(v, int) and not isinstance(v, bool) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def to_yaml(objs: list[dict[str, Any]]) -> str:
    """A multi-document YAML stream, keys in the order built (for review and GitOps)."""
    return yaml.dump_all(objs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1 << 16)
