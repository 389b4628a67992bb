"""Fixtures of the Kubernetes tests that need the real control plane (kube_cluster.py)."""

from tests.k8s.kube_cluster import jobset_controller, kube, namespace  # noqa: F401
