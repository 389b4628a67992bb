"""Fixtures of the YARN tests that need the real cluster (yarn_cluster.py) and of the HDFS
tests that need the HDFS beside it (hdfs_cluster.py)."""

from tests.backends.yarn.hdfs_cluster import hdfs  # noqa: F401
from tests.backends.yarn.yarn_cluster import pmem_checked, yarn, yarn_env  # noqa: F401
