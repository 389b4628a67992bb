"""The real control plane of `make kube-up` (kube/kube.sh), as pytest fixtures.

The tests that use it skip, with one line saying why and how to get it, when it does not
run: no Go, a failed build (the line names the build log), or simply not started. The
cluster is shared by every test of a session; each test works in a namespace of its own,
deleted at the end.

Pods have no containers here: kwok plays their lifecycles by the Stage rules in
kube/stages.yaml, chosen per task with labels (see :func:`fate`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.backends.k8s.k8s_helpers import CRD_DIR, ROOT

KUBECONFIG = ROOT / ".kube" / "config"
UNAVAILABLE = ROOT / ".kube" / "unavailable"
JOBSET_UNAVAILABLE = ROOT / ".kube" / "jobset-unavailable"
#: The webhook configurations kube/kube.sh registers once the JobSet controller serves them.
JOBSET_WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/tfdist-jobset"

#: API path of each kind tfdist renders, by (apiVersion, kind).
PATHS = {
    ("v1", "Service"): "/api/v1/namespaces/{ns}/services",
    ("v1", "ConfigMap"): "/api/v1/namespaces/{ns}/configmaps",
    ("v1", "Pod"): "/api/v1/namespaces/{ns}/pods",
    ("v1", "ServiceAccount"): "/api/v1/namespaces/{ns}/serviceaccounts",
    ("v1", "PersistentVolumeClaim"): "/api/v1/namespaces/{ns}/persistentvolumeclaims",
    ("networking.k8s.io/v1", "NetworkPolicy"): "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    ("batch/v1", "Job"): "/apis/batch/v1/namespaces/{ns}/jobs",
    ("kubeflow.org/v1", "TFJob"): "/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets",
}
CRD_FILES = {"TFJob": "kubeflow.org_tfjobs.yaml", "JobSet": "jobset.x-k8s.io_jobsets.yaml"}


def why_unavailable() -> str | None:
    """None when the control plane answers; else one line: why not, and how to get it."""
    if not KUBECONFIG.exists():
        if UNAVAILABLE.exists():
            return f"no control plane: {UNAVAILABLE.read_text().strip()}"
        if shutil.which("go") is None:
            return "no control plane: Go is not installed (it builds one: make kube-up)"
        return "no control plane running; start one with: make kube-up"
    return None


def fate(task: str, code: int | str, attempt: int | None = None, after: str | None = None) -> dict[str, str]:
    """Labels that make kwok end ``task``'s pod with exit ``code`` (or keep it "pending")
    ``after`` a duration such as "3s"; ``attempt`` limits it to one attempt."""
    suffix = task + ("" if attempt is None else f".{attempt}")
    found = {f"tfdist-fate/{suffix}": str(code)}
    if after:
        found[f"tfdist-after/{suffix}"] = after
    return found


class Cluster:
    """The admin's client of the running control plane and a few plain-dict helpers."""

    def __init__(self) -> None:
        from kubernetes import config

        self.api_client = config.new_client_from_config(config_file=str(KUBECONFIG))
        self._crds: set[str] = set()  # kinds installed and Established in this session

    def call(self, method: str, path: str, body: Any = None, **query: Any) -> dict[str, Any]:
        """One API request as plain JSON; an error status raises ApiException."""
        from kubernetes.client.exceptions import ApiException

        method_, url, headers, body_, _ = self.api_client.param_serialize(
            method, path, query_params=list(query.items()), body=body, auth_settings=["BearerToken"],
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
        )
        resp = self.api_client.call_api(method_, url, headers, body_, _request_timeout=60)
        data = resp.read()
        if resp.status >= 400:
            err = ApiException(status=resp.status, reason=resp.reason)
            err.body = data.decode(errors="replace")  # shown by str(err): the server's message
            raise err
        return json.loads(data) if data else {}

    def create(self, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
        """Create for real; unknown or duplicate fields are errors (the server would
        otherwise drop them silently and the test would pass on a typo)."""
        path = PATHS[(obj["apiVersion"], obj["kind"])].format(ns=namespace)
        return self.call("POST", path, obj, fieldValidation="Strict")

    def list(self, path: str, **query: Any) -> list[dict[str, Any]]:
        return list(self.call("GET", path, **query).get("items") or [])

    def namespace(self) -> str:
        name = f"t-{uuid.uuid4().hex[:10]}"
        self.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        return name

    def delete_namespace(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self.call("DELETE", f"/api/v1/namespaces/{name}", propagationPolicy="Background")

    def install_crd(self, kind: str) -> bool:
        """Install a CRD from .kube/crds (once a session); False when the file is
        missing. Once: a CRD file is ~0.6-0.8 MB of YAML, and parsing it and posting it
        again for every test cost more than the tests' own API calls."""
        if kind in self._crds:
            return True
        path = CRD_DIR / CRD_FILES[kind]
        if not path.exists():
            return False
        crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        name = crd["metadata"]["name"]
        from kubernetes.client.exceptions import ApiException

        try:
            self.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        except ApiException as err:
            if err.status != 409:
                raise
        wait_until(lambda: _established(self.call(
            "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")), 60, f"CRD {name}")
        self._crds.add(kind)
        return True


def _established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def wait_until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout}s")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def kube() -> Cluster:
    reason = why_unavailable()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("kubernetes", reason="the kubernetes client is an optional dependency")
    cluster = Cluster()
    try:
        cluster.call("GET", "/version")
    except Exception as err:
        pytest.skip(f"no control plane answering at .kube/config ({type(err).__name__}); "
                    "restart it with: make kube-down kube-up")
    return cluster


@pytest.fixture
def namespace(kube: Cluster) -> Iterator[str]:
    name = kube.namespace()
    wait_until(lambda: kube.list(f"/api/v1/namespaces/{name}/serviceaccounts"), 60,
               f"the default service account of {name}")
    yield name
    kube.delete_namespace(name)


@pytest.fixture(scope="session")
def jobset_controller(kube: Cluster) -> Cluster:
    """The cluster, with the JobSet controller and its webhooks running (kube/kube.sh starts
    them when it could build them; otherwise only the tests that use this skip)."""
    if JOBSET_UNAVAILABLE.exists():
        pytest.skip(f"no JobSet controller: {JOBSET_UNAVAILABLE.read_text().strip()}")
    from kubernetes.client.exceptions import ApiException

    try:
        kube.call("GET", JOBSET_WEBHOOKS)
    except ApiException:
        pytest.skip("no JobSet controller running; restart the control plane with: make kube-down kube-up")
    return kube
