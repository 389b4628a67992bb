"""`tfdist render --as jobset` run by the real JobSet controller (its webhooks included), the
real Job controller and scheduler, pods played by kwok: what the README claims of JobSet.

A pod's end is chosen by labels (kube/stages.yaml); in a JobSet a label may name one
attempt of the whole set (``fate("worker-1", 1, attempt=0)``: the set's first run only).
One difference from a kubelet remains: a pod with ``restartPolicy: OnFailure`` (the
evaluator's) that fails is replaced by a new pod instead of restarting its container in
place; the Job controller counts both against ``backoffLimit`` alike.

Needs `make kube-up` with the JobSet controller; skips with the reason otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.backends.k8s.k8s_helpers import IMAGE, ROOT, pod_env, tf_config
from tests.backends.k8s.kube_cluster import Cluster, fate, wait_until
from tfdist.backends.k8s import manifests, names
from tfdist.jobspec import load, model
from tfdist.jobspec.tfjob import CONTAINER

INDEX = "batch.kubernetes.io/job-completion-index"
ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
HANG = "1h"


def _jobset_path(namespace: str, name: str = "") -> str:
    return f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets" + (f"/{name}" if name else "")


def _create(kube: Cluster, namespace: str, data: dict[str, Any]) -> model.JobSpec:
    job = load.from_dict({"name": "js", "command": ["python", "train.py"], **data,
                          "kubernetes": {"image": IMAGE, "namespace": namespace, "ship_workdir": False,
                                         **data["kubernetes"]}}, "test")
    for obj in manifests.render(job, "jobset"):
        kube.create(obj, namespace)
    return job


def _pods(kube: Cluster, namespace: str) -> list[dict[str, Any]]:
    return kube.list(f"/api/v1/namespaces/{namespace}/pods", labelSelector=names.LABEL_JOB)


def _task(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta['labels'][names.LABEL_ROLE]}-{meta['annotations'][INDEX]}"


def _conditions(jobset: dict[str, Any]) -> set[str]:
    return {c["type"] for c in (jobset.get("status") or {}).get("conditions") or [] if c["status"] == "True"}


class History:
    """Every pod seen while polling (pods of a restarted set are deleted: keep them)."""

    def __init__(self, kube: Cluster, namespace: str, name: str) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.pods: dict[str, dict[str, Any]] = {}  # by uid, the last state seen
        self.live: list[dict[str, Any]] = []  # the pods of the last poll
        self.jobset: dict[str, Any] = {}

    def poll(self) -> None:
        self.live = _pods(self.kube, self.namespace)
        for pod in self.live:
            self.pods[pod["metadata"]["uid"]] = pod
        self.jobset = self.kube.call("GET", _jobset_path(self.namespace, self.name))

    def until(self, check: Callable[[History], bool], timeout: float, what: str) -> None:
        def step() -> bool:
            self.poll()
            return check(self)

        wait_until(step, timeout, what)

    def condition(self) -> set[str]:
        return _conditions(self.jobset)

    def restarts(self) -> int:
        return int((self.jobset.get("status") or {}).get("restarts") or 0)

    def uids(self, task: str, attempt: int | None = None) -> set[str]:
        """The pods of ``task`` (in the set's ``attempt``, or in any)."""
        return {uid for uid, pod in self.pods.items() if _task(pod) == task
                and (attempt is None or pod["metadata"]["labels"][ATTEMPT] == str(attempt))}

    def attempts(self, task: str) -> set[int]:
        return {int(p["metadata"]["labels"][ATTEMPT]) for p in self.pods.values() if _task(p) == task}


def _running(count: int) -> Callable[[History], bool]:
    def check(h: History) -> bool:
        return len([p for p in h.live if (p.get("status") or {}).get("phase") == "Running"]) >= count

    return check


def test_an_example_rendered_by_the_cli_runs_and_ends_at_the_chiefs_success(
    jobset_controller: Cluster, namespace: str
) -> None:
    kube = jobset_controller
    labels = {**fate("chief-0", 0, after="4s")}
    for task in ("ps-0", "worker-0", "worker-1", "evaluator-0"):
        labels[f"tfdist-after/{task}"] = HANG
    rendered = subprocess.run(
        [sys.executable, "-m", "tfdist.cli", "render", str(ROOT / "examples/digits/pss_fit.yaml"),
         "--as", "jobset", "--set", f"kubernetes.image={IMAGE}", "--set", f"kubernetes.namespace={namespace}",
         "--set", f"kubernetes.labels={json.dumps(labels)}"],
        capture_output=True, text=True, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    objs = list(yaml.safe_load_all(rendered.stdout))
    assert [o["kind"] for o in objs] == ["ConfigMap", "NetworkPolicy", "JobSet"]  # the shipped workdir first
    for obj in objs:
        kube.create(obj, namespace)
    name = objs[-1]["metadata"]["name"]
    history = History(kube, namespace, name)
    history.until(_running(5), 60, "5 running pods, created by the JobSet and Job controllers")

    pods = [p for p in history.live if p["status"].get("phase") == "Running"]
    assert sorted(_task(p) for p in pods) == ["chief-0", "evaluator-0", "ps-0", "worker-0", "worker-1"]
    subdomains = set()
    for pod in pods:
        meta, pod_spec = pod["metadata"], pod["spec"]
        role, index = meta["labels"][names.LABEL_ROLE], int(meta["annotations"][INDEX])
        assert pod_spec["nodeName"]  # placed by the scheduler
        container = next(c for c in pod_spec["containers"] if c["name"] == CONTAINER)
        config = tf_config(pod_env(container, meta.get("annotations"), meta["labels"]))
        assert config["task"] == {"type": role, "index": index}
        subdomains.add(pod_spec["subdomain"])
        # every task's TF_CONFIG names each pod by its DNS name, hostname.subdomain
        if role != "evaluator":
            host = config["cluster"][role][index].rsplit(":", 1)[0]
            assert host == f"{pod_spec['hostname']}.{pod_spec['subdomain']}", (host, pod_spec)
    assert subdomains == {name}
    hosts = {f"{p['spec']['hostname']}.{p['spec']['subdomain']}" for p in pods}
    for pod in pods:  # one cluster, and every address in it is one of the pods
        container = next(c for c in pod["spec"]["containers"] if c["name"] == CONTAINER)
        cluster = tf_config(pod_env(container, pod["metadata"].get("annotations"), pod["metadata"]["labels"]))["cluster"]
        assert {a.rsplit(":", 1)[0] for addrs in cluster.values() for a in addrs} <= hosts
    # the headless Service that makes hostname.subdomain resolve: the controller's own
    svc = kube.call("GET", f"/api/v1/namespaces/{namespace}/services/{name}")
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert all(p["metadata"]["labels"][k] == v for p in pods for k, v in svc["spec"]["selector"].items())

    history.until(lambda h: "Completed" in h.condition(), 60, "the JobSet completed")
    # ... and the ps, workers and evaluator are gone with their Jobs, the chief's pod is kept
    wait_until(lambda: [_task(p) for p in _pods(kube, namespace)] == ["chief-0"], 60, "only the chief's pod left")
    # the Jobs go after their pods (the controller deletes them in the foreground), so wait
    wait_until(lambda: [j["metadata"]["name"] for j in kube.list(f"/apis/batch/v1/namespaces/{namespace}/jobs")]
               == [f"{name}-chief-0"], 60, "only the chief's Job left")
    assert history.restarts() == 0


def test_a_failing_worker_restarts_the_whole_set(jobset_controller: Cluster, namespace: str) -> None:
    labels = {**fate("worker-1", 1, attempt=0, after="2s"), "tfdist-after/chief-0.0": HANG,
              **fate("chief-0", 0, attempt=1, after="3s"), "tfdist-after/worker-0": HANG,
              "tfdist-after/worker-1.1": HANG}
    job = _create(jobset_controller, namespace, {
        "strategy": "multi_worker_mirrored", "roles": {"chief": 1, "worker": 2},
        "restart": {"policy": "on-failure", "max_restarts": 2}, "kubernetes": {"labels": labels}})
    history = History(jobset_controller, namespace, job.name)
    history.until(lambda h: "Completed" in h.condition() or "Failed" in h.condition(), 90, "the JobSet ended")
    assert history.condition() >= {"Completed"} and history.restarts() == 1, history.jobset.get("status")
    # the whole group was restarted, not just worker-1: every task has a pod of each attempt
    for task in ("chief-0", "worker-0", "worker-1"):
        assert history.attempts(task) == {0, 1}, (task, history.attempts(task))
        assert len(history.uids(task, 0)) == 1 and len(history.uids(task, 1)) == 1


def test_the_set_fails_when_its_restarts_are_used_up(jobset_controller: Cluster, namespace: str) -> None:
    labels = {**fate("worker-1", 1, after="1s"), "tfdist-after/chief-0": HANG, "tfdist-after/worker-0": HANG}
    job = _create(jobset_controller, namespace, {
        "strategy": "multi_worker_mirrored", "roles": {"chief": 1, "worker": 2},
        "restart": {"policy": "on-failure", "max_restarts": 2}, "kubernetes": {"labels": labels}})
    history = History(jobset_controller, namespace, job.name)
    history.until(lambda h: "Completed" in h.condition() or "Failed" in h.condition(), 120, "the JobSet ended")
    assert "Failed" in history.condition() and history.restarts() == 2, history.jobset.get("status")
    assert history.attempts("worker-1") == {0, 1, 2}
    assert history.attempts("chief-0") == {0, 1, 2}
    # a failed set leaves no training running
    wait_until(lambda: not [p for p in _pods(jobset_controller, namespace)
                            if p["status"].get("phase") in ("Pending", "Running")], 60, "no pod left running")


def test_a_permanent_exit_code_fails_the_set_without_a_restart(jobset_controller: Cluster, namespace: str) -> None:
    """``restart: exit-code``: 137 (killed) is retried by restarting the set, 2 (the program's
    own failure) fails the set at once."""
    labels = {**fate("worker-1", 137, attempt=0, after="1s"), **fate("worker-1", 2, attempt=1, after="1s"),
              "tfdist-after/chief-0": HANG, "tfdist-after/worker-0": HANG}
    job = _create(jobset_controller, namespace, {
        "strategy": "multi_worker_mirrored", "roles": {"chief": 1, "worker": 2},
        "restart": {"policy": "exit-code", "max_restarts": 3}, "kubernetes": {"labels": labels}})
    history = History(jobset_controller, namespace, job.name)
    history.until(lambda h: "Completed" in h.condition() or "Failed" in h.condition(), 90, "the JobSet ended")
    assert "Failed" in history.condition() and history.restarts() == 1, history.jobset.get("status")
    assert history.attempts("worker-1") == {0, 1}


def test_a_role_that_never_restarts_fails_the_set(jobset_controller: Cluster, namespace: str) -> None:
    """``roles.ps.restart: never``: a ps failure fails the set at once, though the set may
    restart for the workers (as under tfdist's supervisor and a TFJob)."""
    labels = {**fate("ps-0", 1, after="2s"), "tfdist-after/chief-0": HANG, "tfdist-after/worker-0": HANG}
    job = _create(jobset_controller, namespace, {
        "strategy": "parameter_server", "roles": {"chief": 1, "worker": 1, "ps": {"replicas": 1, "restart": "never"}},
        "restart": {"policy": "on-failure", "max_restarts": 2}, "kubernetes": {"labels": labels}})
    history = History(jobset_controller, namespace, job.name)
    history.until(lambda h: "Completed" in h.condition() or "Failed" in h.condition(), 90, "the JobSet ended")
    assert "Failed" in history.condition() and history.restarts() == 0, history.jobset.get("status")


def test_the_evaluator_restarts_on_its_own_budget(jobset_controller: Cluster, namespace: str) -> None:
    """Its failures retry its pod in place (the set is not restarted) up to ``max_restarts``;
    past that its Job fails and JobSet applies its failure policy (the documented limit)."""
    labels = {**fate("evaluator-0", 1, after="1s"), "tfdist-after/chief-0": HANG,
              "tfdist-after/worker-0": HANG, "tfdist-after/ps-0": HANG}
    job = _create(jobset_controller, namespace, {
        "strategy": "parameter_server", "roles": {"chief": 1, "worker": 1, "ps": 1, "evaluator": 1},
        "restart": {"policy": "on-failure", "max_restarts": 2}, "kubernetes": {"labels": labels}})
    history = History(jobset_controller, namespace, job.name)
    history.until(lambda h: h.restarts() >= 1 or "Failed" in h.condition(), 150,
                  "the evaluator's budget used up")
    # before that, in the set's first attempt: 1 + max_restarts evaluator pods, and one pod
    # for each training task (never restarted for the evaluator's sake)
    assert len(history.uids("evaluator-0", 0)) == 3, history.uids("evaluator-0", 0)
    for task in ("chief-0", "worker-0", "ps-0"):
        assert len(history.uids(task, 0)) == 1, task
    assert history.restarts() == 1 and "Failed" not in history.condition(), history.jobset.get("status")


def test_the_webhook_refuses_what_the_schema_lets_through(jobset_controller: Cluster, namespace: str) -> None:
    """What makes the tests above able to fail on rendering: the controller's validating
    webhook sees every JobSet (a success rule naming no replicatedJob passes the CRD schema)."""
    from kubernetes.client.exceptions import ApiException

    job = load.from_dict({"name": "js", "command": ["python", "t.py"], "roles": {"worker": 1},
                          "kubernetes": {"image": IMAGE, "namespace": namespace, "ship_workdir": False}}, "test")
    (obj,) = [o for o in manifests.render(job, "jobset") if o["kind"] == "JobSet"]
    obj["spec"]["successPolicy"]["targetReplicatedJobs"] = ["nope"]
    with pytest.raises(ApiException, match="does not appear in .spec.ReplicatedJobs"):
        jobset_controller.create(obj, namespace)
