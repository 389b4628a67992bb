"""Names, labels and addresses of a job's Kubernetes objects, and the checks that keep
them valid (DNS-1035 names within 63 characters, the namespace, label keys and values,
quantities).

Pure functions of the job spec: the renderers (:mod:`.manifests`) and the backend
(:mod:`.backend`) agree on every name through this module.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tfdist.backends.k8s import workdir
from tfdist.cluster import TaskId
from tfdist.contract import ROLES
from tfdist.errors import SpecError
from tfdist.jobspec import labels as label_rules
from tfdist.jobspec.model import JobSpec
from tfdist.pyenv.plan import refuse_on_image

MODES: tuple[str, ...] = ("jobset", "tfjob", "jobs")
LABEL_JOB = "tfdist.io/job"
LABEL_ROLE = "tfdist.io/role"
LABEL_TASK = "tfdist.io/task"
LABEL_RUN = "tfdist.io/run"
LABEL_ATTEMPT = "tfdist.io/attempt"
MANAGED_BY = {"app.kubernetes.io/managed-by": "tfdist"}
#: Longest hostname tail per mode, for a role index of up to 999 (1,000 replicas).
_DNS_LABEL = 63
_LONGEST_ROLE = max(ROLES, key=len)
_DOLLAR = re.compile(r"\$(?=[$(])")
_DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # always fullmatch, at most 63


# -- names and addresses ------------------------------------------------------------


def _host_tail(as_: str, index_digits: int = 3) -> str:
    """What follows the job name in the longest name that must fit in 63 characters.

    That is the pod hostname, except under JobSet: its webhook refuses a JobSet unless
    the pod *names* fit, which the Job controller makes of the hostname and a random
    5-character suffix.
    """
    if as_ == "jobset":
        return f"-{_LONGEST_ROLE}-0-{'9' * index_digits}-xxxxx"
    return f"-{_LONGEST_ROLE}-{'9' * index_digits}"


def max_name_length(as_: str, replicas: int = 1000) -> int:
    """The longest job name whose pod hostnames fit in 63 characters.

    The limit is computed for the longest role name and ``replicas`` tasks per role (1,000
    by default), so it does not change when a job grows from 2 to 200 workers.
    """
    digits = max(3, len(str(max(replicas, 1) - 1)))
    return _DNS_LABEL - len(_host_tail(as_, digits))


def check(job: JobSpec, as_: str) -> None:
    """Raise a one-line SpecError for what Kubernetes would reject, before rendering."""
    if as_ not in MODES and as_ != "pods":
        raise SpecError(f"--as: unknown form '{as_}'; choose one of {', '.join(MODES)}")
    refuse_on_image(job)  # python.requirements: the image provides the environment
    workdir.check(job, active_roles(job))  # kubernetes.ship_workdir
    for role in active_roles(job):
        if not job.image_for(role):
            raise SpecError(
                "kubernetes.image: give the container image the tasks run in, "
                "e.g. --set kubernetes.image=tensorflow/tensorflow:2.21.0"
            )
    if as_ != "tfjob":  # only a TFJob can say "the image's own entrypoint"
        job.require_commands()
    if not job.name[0].isalpha():
        raise SpecError(
            f"name: '{job.name}' must start with a letter on Kubernetes (Service names are DNS-1035 labels)"
        )
    most = max((job.replicas(r) for r in ROLES), default=1)
    limit = max_name_length("jobs" if as_ in ("tfjob", "pods") else as_, max(most, 1000))
    if len(job.name) > limit:
        example = job.name[:limit] if limit > 0 else "a shorter name"
        raise SpecError(
            f"name: '{job.name}' is {len(job.name)} characters; on Kubernetes ({_form(as_)}) "
            f"the maximum is {limit}, so that pod {'names' if as_ == 'jobset' else 'hostnames'} like "
            f"<name>{_host_tail(as_)} fit in 63 characters (try '{example}')"
        )
    namespace = job.kubernetes.namespace  # in every object's API path and every task's hostname
    if len(namespace) > _DNS_LABEL or not _DNS_1123_LABEL.fullmatch(namespace):
        raise SpecError(
            f"kubernetes.namespace: {namespace[:80]!r} is not a Kubernetes namespace name (at most 63 "
            "lower-case letters, digits and '-', starting and ending with a letter or a digit)"
        )
    for where, mapping in (
        ("kubernetes.labels", job.kubernetes.labels),
        ("kubernetes.node_selector", job.kubernetes.node_selector),
    ):
        for key, value in mapping.items():
            said = label_rules.problem(where, key, value)
            if said:
                raise SpecError(said)


def _form(as_: str) -> str:
    return "--backend kubernetes" if as_ == "pods" else f"--as {as_}"


def hostnames(job: JobSpec, as_: str) -> dict[str, str]:
    """Stable DNS name of every task (``host.subdomain``), by task name."""
    names = {}
    for tid in _tasks(job):
        if as_ == "jobset":
            host = f"{job.name}-{tid.role}-0-{tid.index}"
        elif as_ == "tfjob":
            host = f"{job.name}-{tid.role}-{tid.index}"  # the operator's Service per pod
            names[tid.name] = f"{host}.{job.kubernetes.namespace}.svc"
            continue
        else:  # jobs, pods
            host = f"{job.name}-{tid.role}-{tid.index}"
        names[tid.name] = f"{host}.{job.name}"
    return names


def addresses(job: JobSpec, as_: str) -> dict[str, str]:
    """``host:port`` of every task, the input of :func:`tfdist.cluster.cluster_map`."""
    port = job.kubernetes.port
    return {name: f"{host}:{port}" for name, host in hostnames(job, as_).items()}


def pod_run_dir(job: JobSpec) -> str:
    """TFDIST_RUN_DIR inside a pod: the model volume when there is one (it outlives pods)."""
    if job.kubernetes.model_volume_claim:
        return job.kubernetes.model_mount_path
    return "/tmp/tfdist-run"


def unshared_saves(job: JobSpec) -> str | None:
    """Why a parameter-server job's saves fail in pods without a shared volume, or None.

    Under ParameterServerStrategy the variables live on the ps tasks, and TensorFlow writes
    each task's share of a checkpoint, backup or SavedModel on that task, into the path the
    chief names. Without ``kubernetes.model_volume_claim`` that path (the run directory of
    :func:`pod_run_dir`) is in every pod's own filesystem, so the chief's first save fails
    with ``NOT_FOUND`` for a ``_temp`` file the ps wrote elsewhere, and so does every
    restart. A warning, not a refusal: whether the script saves there is the script's
    choice (one that saves only to a bucket of its own runs fine), and the spec does not say.
    """
    if job.strategy != "parameter_server" or job.kubernetes.model_volume_claim:
        return None
    return (f"kubernetes.model_volume_claim: not set, so each pod's run directory ({pod_run_dir(job)}) "
            "is its own, and under parameter_server the ps tasks write their share of every "
            "checkpoint, backup and saved model the chief puts there into their own (the first "
            "save fails with NOT_FOUND ..._temp); name a claim every pod can mount "
            "(ReadWriteMany), or save only to shared storage from the script")


def _tasks(job: JobSpec) -> list[TaskId]:
    return [TaskId(role, i) for role in ROLES for i in range(job.replicas(role))]


def active_roles(job: JobSpec) -> list[str]:
    return [role for role in ROLES if job.replicas(role) > 0]


def literal(value: str) -> str:
    """Escape Kubernetes' ``$(VAR)`` expansion so a string reaches the task unchanged.

    The kubelet turns ``$$`` into ``$`` and ``$(VAR)`` into VAR's value; doubling each
    ``$`` that precedes ``$`` or ``(`` undoes exactly that and leaves ``$HOME`` readable.
    """
    return _DOLLAR.sub("$$", value)


def labels(job: JobSpec, role: str | None = None, **extra: str) -> dict[str, str]:
    found = {**job.kubernetes.labels, **MANAGED_BY, LABEL_JOB: job.name}
    if role:
        found[LABEL_ROLE] = role
    found.update(extra)
    return found


def metadata(job: JobSpec, name: str, role: str | None = None) -> dict[str, Any]:
    return {"name": name, "namespace": job.kubernetes.namespace, "labels": labels(job, role)}


def run_id_of(run_dir: Path) -> str:
    """A label value naming this run: the run directory's name, made label-safe.

    A name over 63 characters is cut and ends with a digest of the whole name. Cutting alone
    lost the end of the name, where runs differ: with a 48-character job name ``-<time>``
    lost its seconds, so two runs ten seconds apart shared a label, and the reaper of the
    first (it deletes by label) would have deleted the pods of the second.
    """
    name = Path(run_dir).name
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", name).strip("-_.") or "run"
    if len(value) <= _DNS_LABEL:
        return value
    import hashlib

    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:10]
    return f"{value[: _DNS_LABEL - 11].rstrip('-_.')}-{digest}"
