"""Every form `tfdist render` writes is accepted by a real API server: created, not only
dry-run, with strict field validation (an unknown field is an error, not dropped).

Needs `make kube-up` (kube/kube.sh); skips with the reason otherwise. The TFJob CRD comes
from the training operator's Go module (kube.sh copies it into .kube/crds); so does JobSet's,
from its module, when kube.sh could not start
the JobSet controller, else it is the controller's own and every JobSet also passes its
validating and mutating webhooks (and then runs: test_real_jobset.py checks how).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.backends.k8s.k8s_helpers import CRD_MISSING, IMAGE, JOBS, ROOT, job
from tests.backends.k8s.kube_cluster import Cluster
from tfdist.backends.k8s import manifests, names
from tfdist.errors import SpecError
from tfdist.jobspec import load, model


def _example_jobs() -> list[Path]:
    found = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        try:
            load.from_file(path, [f"kubernetes.image={IMAGE}"])
        except SpecError:
            continue  # not a job file
        found.append(path)
    return found


EXAMPLES = _example_jobs()


def _needs_crd(kube: Cluster, mode: str) -> None:
    kind = {"tfjob": "TFJob", "jobset": "JobSet"}.get(mode)
    if kind and not kube.install_crd(kind):
        pytest.skip(CRD_MISSING)


def _create_all(kube: Cluster, objs: list[dict[str, Any]], namespace: str) -> None:
    for obj in objs:
        obj["metadata"]["namespace"] = namespace
        made = kube.create(obj, namespace)
        assert made["metadata"]["name"] == obj["metadata"]["name"]
        assert made["metadata"]["uid"]


def _in(namespace: str, case: str, **changes: Any) -> model.JobSpec:
    return job(case, kubernetes={**JOBS[case]["kubernetes"], "namespace": namespace}, **changes)


def test_examples_are_found() -> None:
    assert len(EXAMPLES) >= 5, EXAMPLES


@pytest.mark.parametrize("mode", names.MODES)
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_every_example_is_created(kube: Cluster, namespace: str, path: Path, mode: str) -> None:
    _needs_crd(kube, mode)
    job_spec = load.from_file(path, [f"kubernetes.image={IMAGE}", f"kubernetes.namespace={namespace}"])
    _create_all(kube, manifests.render(job_spec, mode), namespace)


@pytest.mark.parametrize("mode", names.MODES)
@pytest.mark.parametrize("case", ["mwms", "pss", "pss-allworkers", "single"])
def test_every_test_job_is_created(kube: Cluster, namespace: str, case: str, mode: str) -> None:
    _needs_crd(kube, mode)
    data = _in(namespace, case)
    _create_all(kube, manifests.render(data, mode), namespace)


@pytest.mark.parametrize("mode", names.MODES)
def test_1000_replicas_with_the_longest_name_are_created(kube: Cluster, namespace: str, mode: str) -> None:
    _needs_crd(kube, mode)
    name = "a" * names.max_name_length(mode)
    data = _in(namespace, "mwms", name=name, roles={"worker": 1000, "evaluator": 1})
    objs = manifests.render(data, mode)
    for obj in objs:  # created, then stopped at once: acceptance is the point, not 1,000 pods
        if obj["kind"] in ("Job", "JobSet"):  # a suspended JobSet's Jobs are created suspended
            obj["spec"]["suspend"] = True
    _create_all(kube, objs, namespace)


def test_the_server_rejects_an_unknown_field(kube: Cluster, namespace: str) -> None:
    """What makes the tests above able to fail: strict validation, for core kinds and CRDs."""
    from kubernetes.client.exceptions import ApiException

    _needs_crd(kube, "tfjob")
    for obj in manifests.render(_in(namespace, "single"), "tfjob"):  # ConfigMap, NetworkPolicy, TFJob
        obj.setdefault("spec", {})["typo"] = 1  # a ConfigMap has no spec: an unknown field too
        with pytest.raises(ApiException, match="unknown field"):
            kube.create(obj, namespace)
