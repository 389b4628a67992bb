"""The chief's and workers' leave program in pods (:mod:`tfdist.node.leave_program`).

A ``multi_worker_mirrored`` job's chief and workers run their script through the program so
that they leave together (docs/local.md, "Leaving together"): on the other backends the
program is a file of the installed tfdist or its text travels with the task. A pod starts
from its image, which need not hold tfdist, so every form (the supervised pods, JobSet,
TFJob, plain Jobs) carries the program in a ConfigMap of its own, mounted read-only in the
pods of the roles that run it, and their command becomes ``<python> PATH SECONDS <script...>``
(the paths and names are :mod:`tfdist.jobspec.tfjob`'s ``LEAVE_*``, so that a rendered TFJob
reads back as the job's own command). A ConfigMap rather than ``python -c SOURCE``: the
program's text then appears once per run, not in every pod's command, and the manifests a
user reads show a short command.
"""

from __future__ import annotations

from typing import Any

from tfdist.jobspec.model import JobSpec
from tfdist.jobspec.tfjob import LEAVE_KEY, LEAVE_MOUNT, LEAVE_PATH, LEAVE_VOLUME
from tfdist.node import leave_program


def plan(job: JobSpec, role: str, command: list[str] | None) -> dict[str, Any] | None:
    """How ``role``'s ``command`` is run through the program in a pod (given to
    :func:`tfdist.node.leave_program.launch`), or None when it runs as it is."""
    if not command:
        return None
    found = leave_program.plan(command, job.strategy, role, job.drain_seconds, carry="node")
    return None if found is None else {**found, "file": LEAVE_PATH}


def needed(job: JobSpec) -> bool:
    """Whether any task of ``job`` runs the program (so its ConfigMap is created)."""
    return any(plan(job, role, job.command_for(role)) for role in job.roles if job.replicas(role) > 0)


def config_map(name: str, meta: dict[str, Any]) -> dict[str, Any]:
    """The ConfigMap ``name`` holding the program's text."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "name": name},
            "data": {LEAVE_KEY: leave_program.program_source()}}


def volume(name: str) -> dict[str, Any]:
    """The pod's volume of the ConfigMap ``name``."""
    return {"name": LEAVE_VOLUME, "configMap": {"name": name}}


def mount() -> dict[str, Any]:
    return {"name": LEAVE_VOLUME, "mountPath": LEAVE_MOUNT, "readOnly": True}
