"""`tfdist render --as jobs` run by the real Job controller (kube-controller-manager), pods
played by kwok: the names TF_CONFIG uses are the pods' hostname.subdomain, and the README's
documented limits of plain Jobs hold as documented.

Needs `make kube-up`; skips with the reason otherwise.
"""

from __future__ import annotations

from typing import Any

from tests.backends.k8s.k8s_helpers import IMAGE, pod_env, tf_config
from tests.backends.k8s.kube_cluster import Cluster, fate, wait_until
from tfdist.backends.k8s import manifests, names
from tfdist.jobspec import load, model
from tfdist.jobspec.tfjob import CONTAINER

INDEX = "batch.kubernetes.io/job-completion-index"


def _create(kube: Cluster, namespace: str, data: dict[str, Any]) -> model.JobSpec:
    job = load.from_dict({"command": ["python", "train.py"], **data,
                          "kubernetes": {"image": IMAGE, "namespace": namespace, "ship_workdir": False,
                                         **data["kubernetes"]}}, "test")
    for obj in manifests.render(job, "jobs"):
        kube.create(obj, namespace)
    return job


def _pods(kube: Cluster, namespace: str) -> list[dict[str, Any]]:
    return kube.list(f"/api/v1/namespaces/{namespace}/pods", labelSelector=names.LABEL_JOB)


def _running(kube: Cluster, namespace: str, count: int) -> list[dict[str, Any]]:
    def check() -> list[dict[str, Any]] | None:
        pods = [p for p in _pods(kube, namespace) if (p.get("status") or {}).get("phase") == "Running"]
        return pods if len(pods) >= count else None

    return wait_until(check, 60, f"{count} running pods")


def _job_condition(kube: Cluster, namespace: str, name: str) -> set[str]:
    job = kube.call("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
    return {c["type"] for c in (job.get("status") or {}).get("conditions") or [] if c["status"] == "True"}


def test_tf_config_names_are_the_pods_dns_names_and_ps_outlive_success(kube: Cluster, namespace: str) -> None:
    labels = {**fate("chief-0", 0, after="3s"), "tfdist-after/ps-0": "1h",
              "tfdist-after/worker-0": "1h", "tfdist-after/worker-1": "1h"}
    job = _create(kube, namespace, {"name": "plain", "strategy": "parameter_server",
                                    "roles": {"chief": 1, "worker": 2, "ps": 1},
                                    "kubernetes": {"labels": labels}})
    pods = _running(kube, namespace, 4)
    seen = set()
    for pod in pods:
        meta, pod_spec = pod["metadata"], pod["spec"]
        role, index = meta["labels"][names.LABEL_ROLE], int(meta["annotations"][INDEX])
        container = next(c for c in pod_spec["containers"] if c["name"] == CONTAINER)
        config = tf_config(pod_env(container, meta.get("annotations"), meta["labels"]))
        assert config["task"] == {"type": role, "index": index}
        host = config["cluster"][role][index].split(":")[0]
        assert host == f"{pod_spec['hostname']}.{pod_spec['subdomain']}", (host, pod_spec)
        seen.add(f"{role}-{index}")
    assert seen == {"chief-0", "worker-0", "worker-1", "ps-0"}
    svc = kube.call("GET", f"/api/v1/namespaces/{namespace}/services/{pods[0]['spec']['subdomain']}")
    assert svc["spec"]["clusterIP"] == "None"
    wait_until(lambda: "Complete" in _job_condition(kube, namespace, f"{job.name}-chief"), 60, "the chief Job complete")
    # the documented limit: nothing ends the parameter server's Job when training succeeds
    assert "Complete" not in _job_condition(kube, namespace, f"{job.name}-ps")
    assert any(p["metadata"]["labels"][names.LABEL_ROLE] == "ps" for p in _running(kube, namespace, 1))


def test_a_failed_pod_is_recreated_alone_with_the_same_hostname(kube: Cluster, namespace: str) -> None:
    labels = {**fate("worker-1", 1, after="1s"), "tfdist-after/worker-0": "1h"}
    _create(kube, namespace, {"name": "plain-mwms", "strategy": "multi_worker_mirrored",
                              "roles": {"worker": 2}, "restart": {"policy": "on-failure", "max_restarts": 2},
                              "kubernetes": {"labels": labels}})
    first = {p["metadata"]["annotations"][INDEX]: p for p in _running(kube, namespace, 2)}

    def retried() -> list[dict[str, Any]] | None:
        mine = [p for p in _pods(kube, namespace) if p["metadata"]["annotations"][INDEX] == "1"]
        return mine if len(mine) >= 2 else None

    index_1 = wait_until(retried, 60, "a second pod for worker index 1")
    assert len({p["spec"]["hostname"] for p in index_1}) == 1  # same DNS name for the new attempt
    # the documented limit: no group restart, worker-0's pod is the one it was
    (worker_0,) = [p for p in _pods(kube, namespace) if p["metadata"]["annotations"][INDEX] == "0"]
    assert worker_0["metadata"]["uid"] == first["0"]["metadata"]["uid"]
    assert worker_0["status"]["phase"] == "Running"
