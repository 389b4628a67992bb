"""Fixtures of the Kubernetes tests that need the real control plane (kube_cluster.py)."""

import pytest

from tests.backends.k8s.kube_cluster import jobset_controller, kube, namespace  # noqa: F401


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the real control plane (the ``kube`` fixture, itself or through
    ``namespace`` / ``jobset_controller``) is marked ``k8s``, so ``-m "not k8s"`` leaves it out."""
    for item in items:
        if "kube" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.k8s)
