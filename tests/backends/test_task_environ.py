"""The environment every process backend gives a task (procs.task_environ): one order of
precedence on this machine, a Ray node and a Spark executor alike."""

from __future__ import annotations

from tfdist import contract
from tfdist.node.procs import task_environ


def test_the_task_environment_has_one_order_of_precedence() -> None:
    base = {"PATH": "/usr/bin", "TFDIST_TASK": "worker-9", "SPARK_HOME": "/spark", "KEEP": "base",
            "PYTHONPATH": "pyspark.zip"}
    env = task_environ(base, {"TF_CONFIG": "{}", "KEEP": "task"}, drop=("TFDIST_", "SPARK_"),
                       host={"PATH": "/job/bin:/usr/bin", "PYTHONPATH": None})
    # dropped by prefix, set or removed for the host, the port-reuse switch, the task's own last
    assert env == {"PATH": "/job/bin:/usr/bin", "KEEP": "task", "TF_CONFIG": "{}",
                   contract.GRPC_REUSE_PORT: "1"}
    assert base["TFDIST_TASK"] == "worker-9" and base["PATH"] == "/usr/bin"  # pure: base unchanged
    assert task_environ({}, {contract.GRPC_REUSE_PORT: "0"}) == {contract.GRPC_REUSE_PORT: "0"}
