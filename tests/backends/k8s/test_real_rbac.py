"""Least privilege against the real API server's RBAC: tfdist runs with a ServiceAccount
token bound only to the Role documented in examples/k8s/tfdist-role.yaml, and a missing
permission is one clear line naming the verb and the resource.

Needs `make kube-up`; skips with the reason otherwise.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.backends.k8s.k8s_helpers import IMAGE, ROOT
from tests.backends.k8s.kube_cluster import KUBECONFIG, Cluster, fate, wait_until
from tfdist.jobspec import load

ROLE = yaml.safe_load((ROOT / "examples" / "k8s" / "tfdist-role.yaml").read_text())


def _kubeconfig_for(kube: Cluster, namespace: str, rules: list[dict[str, Any]], path: Path) -> Path:
    """A ServiceAccount bound to a Role with ``rules`` only; its token in a kubeconfig."""
    sa, role = "tfdist-launcher", copy.deepcopy(ROLE)
    role["rules"] = rules
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}}, namespace)
    kube.call("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles", role)
    kube.call("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", {
        "metadata": {"name": "tfdist"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
    })
    token = kube.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"expirationSeconds": 3600}})["status"]["token"]
    admin = yaml.safe_load(KUBECONFIG.read_text())
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "launcher",
        "clusters": admin["clusters"],
        "users": [{"name": "launcher", "user": {"token": token}}],
        "contexts": [{"name": "launcher", "context": {"cluster": admin["clusters"][0]["name"],
                                                       "user": "launcher", "namespace": namespace}}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _run(kubeconfig: Path, namespace: str, labels: dict[str, str], tmp_path: Path,
         roles: dict[str, int] | None = None) -> subprocess.CompletedProcess:
    job = load.from_dict({
        "name": "rbac-job", "strategy": "one_device" if roles is None else "none",
        "command": ["python", "train.py"], "roles": roles or {"chief": 1},
        "kubernetes": {"image": IMAGE, "namespace": namespace, "labels": labels, "ship_workdir": False},
    }, "test")
    jobfile = tmp_path / "job.yaml"
    jobfile.write_text(job.to_yaml())
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    return subprocess.run([sys.executable, "-m", "tfdist.cli", "run", str(jobfile), "--backend", "kubernetes",
                           "--runs-dir", str(tmp_path / "runs")], capture_output=True, text=True,
                          timeout=180, env=env, cwd=tmp_path)


def _leftovers(kube: Cluster, namespace: str) -> list[str]:
    found = []
    for path in (f"/api/v1/namespaces/{namespace}/pods", f"/api/v1/namespaces/{namespace}/services",
                 f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies"):
        found += [o["metadata"]["name"] for o in kube.list(path, labelSelector="tfdist.io/job=rbac-job")]
    return found


def test_the_documented_role_is_enough(kube: Cluster, namespace: str, tmp_path: Path) -> None:
    kubeconfig = _kubeconfig_for(kube, namespace, ROLE["rules"], tmp_path / "kubeconfig")
    proc = _run(kubeconfig, namespace, fate("chief-0", 0), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    logs = "".join(p.read_text() for p in (tmp_path / "runs").rglob("kubernetes.log"))
    assert "forbidden" not in logs.lower(), logs
    wait_until(lambda: not _leftovers(kube, namespace), 30, "the run's objects deleted")


def test_a_missing_permission_is_one_line_naming_verb_and_resource(
    kube: Cluster, namespace: str, tmp_path: Path
) -> None:
    rules = [r for r in copy.deepcopy(ROLE["rules"]) if r["resources"] != ["services"]]
    kubeconfig = _kubeconfig_for(kube, namespace, rules, tmp_path / "kubeconfig")
    proc = _run(kubeconfig, namespace, fate("chief-0", 0), tmp_path)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if "services" in line]
    assert len(lines) == 1, proc.stderr
    assert "cannot create" in lines[0] and '"services"' in lines[0], lines[0]
    assert not _leftovers(kube, namespace)


def test_forbidden_pod_creates_end_the_job_with_one_line(kube: Cluster, namespace: str, tmp_path: Path) -> None:
    """20 pods whose creates are all refused (403) while several are in flight: the job
    ends on the first with one line naming verb and resource; no restart is tried."""
    rules = copy.deepcopy(ROLE["rules"])
    for rule in rules:
        if rule["resources"] == ["pods"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "create"]
    kubeconfig = _kubeconfig_for(kube, namespace, rules, tmp_path / "kubeconfig")
    proc = _run(kubeconfig, namespace, fate("worker-0", 0), tmp_path, roles={"worker": 20})
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if 'cannot create resource "pods"' in line]
    assert len(lines) == 1, proc.stdout + proc.stderr
    assert "cannot be started again" in lines[0], lines[0]
    wait_until(lambda: not _leftovers(kube, namespace), 30, "the run's objects deleted")
