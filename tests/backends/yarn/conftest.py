"""Fixtures of the YARN tests that need the real cluster (yarn_cluster.py)."""

from tests.backends.yarn.yarn_cluster import yarn, yarn_env  # noqa: F401
