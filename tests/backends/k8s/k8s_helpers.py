"""Shared helpers of the Kubernetes tests: schemas, jobs, Kubernetes' env expansion, and
driving a KubernetesBackend directly (its fake-server and real-cluster tests alike)."""

from __future__ import annotations

import copy
import functools
import json
import os
import queue
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfdist import cluster
from tfdist.backends.base import Exited
from tfdist.jobspec import load, model

ROOT = Path(__file__).resolve().parents[3]
#: The CRD schemas (TFJob, JobSet) that kube/kube.sh copies from their Go modules (the
#: versions it pins) into .kube/crds; ``TFDIST_KUBE_CRDS`` names another directory.
CRD_DIR = Path(os.environ.get("TFDIST_KUBE_CRDS") or ROOT / ".kube" / "crds")
#: Why a CRD test skips when its file is missing.
CRD_MISSING = "CRD schemas not found in .kube/crds; fetch them with: kube/kube.sh crds (needs Go)"
GOLDEN = Path(__file__).parent / "golden"
#: A recent and an older Kubernetes minor version still in use.
K8S_VERSIONS = ("1.37", "1.27")

IMAGE = "registry.example/tfdist-train:1"
#: The workdir the shipping test jobs pack into their ConfigMap (kubernetes.ship_workdir).
SHIPPED = Path(__file__).parent / "shipped"

JOBS: dict[str, dict[str, Any]] = {
    # all-reduce, no chief: worker-0 decides success; the group restarts on failure
    "mwms": {
        "name": "digits-mwms",
        "command": [
            "python",
            "train.py",
            "--epochs",
            "3",
        ],
        "roles": {"worker": {"replicas": 2, "resources": {"cpus": 1, "memory": "2Gi"}}},
        "restart": {"policy": "on-failure", "max_restarts": 2},
        "workdir": str(SHIPPED),  # shipped to the pods (the default)
        "kubernetes": {"image": IMAGE},
    },
    # everything: chief, workers with GPUs, ps, evaluator, PVC, scheduling, exit-code policy
    "pss": {
        "name": "digits-pss",
        "strategy": "parameter_server",
        "command": "python train.py --epochs 3",
        "env": {"DATA": "/data", "LITERAL": "$(HOME)"},
        "roles": {
            "chief": 1,
            "worker": {"replicas": 3, "resources": {"cpus": 0.5, "memory": "2Gi", "gpus": 1}},
            "ps": 2,
            "evaluator": {"replicas": 1, "command": ["python", "evaluate.py"]},
        },
        "restart": {"policy": "exit-code", "max_restarts": 3},
        "deadline_seconds": 1800,
        "kubernetes": {
            "image": IMAGE,
            "namespace": "ml",
            "service_account": "trainer",
            "image_pull_policy": "IfNotPresent",
            "node_selector": {"pool": "gpu"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "labels": {"team": "vision"},
            "model_volume_claim": "models",
            "model_mount_path": "/models",
            "port": 2345,
            "ship_workdir": False,
        },
    },
    # parameter servers with in-place worker restarts and success when all workers finish
    "pss-allworkers": {
        "name": "pss-aw",
        "strategy": "parameter_server",
        "command": ["python", "train.py"],
        "roles": {"chief": 1, "worker": 2, "ps": 1},
        "restart": {"policy": "on-failure", "max_restarts": 5},
        "success": "all-workers",
        "legacy_keras": False,
        "kubernetes": {"image": IMAGE, "ship_workdir": False},
    },
    # one task, never restarted
    "single": {
        "name": "one",
        "strategy": "one_device",
        "command": ["python", "train.py"],
        "roles": {"chief": 1},
        "workdir": str(SHIPPED),
        "kubernetes": {"image": IMAGE},
    },
}


def job(case: str, **changes: Any) -> model.JobSpec:
    data = copy.deepcopy(JOBS[case])
    data.update(changes)
    return load.from_dict(data, case)


# -- schemas ------------------------------------------------------------------------


@functools.cache
def crd_schema(kind: str) -> dict[str, Any]:
    """The openAPIV3Schema of a CRD, made strict: unknown fields are errors.

    The API server silently prunes unknown fields of a structural schema; a typo in a
    manifest would vanish without a trace, so the tests forbid them instead.
    """
    files = {"JobSet": "jobset.x-k8s.io_jobsets.yaml", "TFJob": "kubeflow.org_tfjobs.yaml"}
    path = CRD_DIR / files[kind]
    if not path.exists():
        pytest.skip(CRD_MISSING)
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return _strict(schema)


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        node = {k: _strict(v) for k, v in node.items()}
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


def validate_crd(obj: dict[str, Any]) -> None:
    import jsonschema

    schema = dict(crd_schema(obj["kind"]))
    # metadata is {type: object} in a CRD; the API server checks it like any object's
    jsonschema.Draft7Validator(schema).validate(obj)


def validate_core(obj: dict[str, Any], version: str) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(obj, version, strict=True)


# -- Kubernetes' $(VAR) expansion ---------------------------------------------------


def expand(value: str, known: dict[str, str]) -> str:
    """Kubernetes' expansion (k8s.io/kubernetes third_party/forked/golang/expansion), ported:
    ``$(VAR)`` of a variable defined earlier is replaced, ``$$`` is one ``$``, anything else
    stays as written."""
    out = []
    checkpoint = 0
    cursor = 0
    while cursor < len(value):
        if value[cursor] == "$" and cursor + 1 < len(value):
            out.append(value[checkpoint:cursor])
            rest = value[cursor + 1 :]
            if rest[0] == "$":
                read, advance = "$", 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close == -1:
                    read, advance = "$(", 1
                else:
                    name = rest[1:close]
                    read, advance = known.get(name, f"$({name})"), close + 1
            else:
                read, advance = "$" + rest[0], 1
            out.append(read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + value[checkpoint:]


def pod_env(
    container: dict[str, Any],
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    config_maps: list[dict[str, Any]] | None = None,
) -> dict[str, str]:
    """The environment a process in this container sees, as the kubelet builds it: in
    order, each ``$(VAR)`` expanded from the variables before it; ``valueFrom`` read from the
    pod's fields or from ``config_maps`` (a missing one fails, as the pod would not start)."""
    fields = {f"metadata.annotations['{k}']": v for k, v in (annotations or {}).items()}
    fields.update({f"metadata.labels['{k}']": v for k, v in (labels or {}).items()})
    maps = {m["metadata"]["name"]: m.get("data") or {} for m in config_maps or []}
    env: dict[str, str] = {}
    for item in container.get("env", []):
        source = item.get("valueFrom")
        if source and "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            assert ref["name"] in maps, f"{item['name']}: no ConfigMap {ref['name']} (the pod would not start)"
            env[item["name"]] = maps[ref["name"]][ref["key"]]  # never expanded
        elif source:
            env[item["name"]] = fields[source["fieldRef"]["fieldPath"]]
        else:
            env[item["name"]] = expand(item.get("value", ""), env)
    return env


def tf_config(env: dict[str, str]) -> dict[str, Any]:
    return json.loads(env["TF_CONFIG"])


def start_all(backend: Any) -> dict[str, cluster.Task]:
    """Reserve every task of the backend's job and start attempt 0 of each; the tasks by name."""
    addresses = backend.reserve(cluster.task_ids(backend.job))
    tasks = {t.name: t for t in cluster.plan(backend.job, addresses, run_dir="/local")}
    for task in tasks.values():
        backend.start(task, 0)
    return tasks


def events_until(backend: Any, until: set[str], *, kind: type = Exited, timeout: float) -> list[Any]:
    """The backend's events until every task in ``until`` has sent a ``kind`` event (the test
    fails after ``timeout`` seconds, naming what it saw)."""
    seen: list[Any] = []
    left = set(until)
    deadline = time.monotonic() + timeout
    while left:
        try:
            event = backend.events.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"no {kind.__name__} event for {sorted(left)} within {timeout}s; saw {seen}")
        seen.append(event)
        if isinstance(event, kind):
            left.discard(event.task)
    return seen
