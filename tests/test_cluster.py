"""TF_CONFIG and task environments, checked against TensorFlow's own resolver format."""

from __future__ import annotations

import json

from tfdist import cluster
from tfdist.jobspec import load, model


def job(**roles: int) -> model.JobSpec:
    strategy = "parameter_server" if roles.get("ps") else "multi_worker_mirrored"
    return load.from_dict({"name": "j", "strategy": strategy, "command": ["x"], "roles": roles})


def addresses(j: model.JobSpec) -> dict[str, str]:
    ids = [t for t in cluster.task_ids(j) if cluster.needs_address(t)]
    return {t.name: f"127.0.0.1:{2000 + i}" for i, t in enumerate(ids)}


def test_task_order_and_names() -> None:
    names = [t.name for t in cluster.task_ids(job(chief=1, worker=2, ps=1, evaluator=1))]
    assert names == ["chief-0", "worker-0", "worker-1", "ps-0", "evaluator-0"]
    assert cluster.TaskId.parse("worker-12") == cluster.TaskId("worker", 12)


def test_tf_config_for_every_role() -> None:
    j = job(chief=1, worker=2, ps=1, evaluator=1)
    tasks = {t.name: t for t in cluster.plan(j, addresses(j), run_dir="/r")}
    worker1 = json.loads(tasks["worker-1"].env["TF_CONFIG"])
    assert worker1 == {
        "cluster": {
            "chief": ["127.0.0.1:2000"],
            "worker": ["127.0.0.1:2001", "127.0.0.1:2002"],
            "ps": ["127.0.0.1:2003"],
        },
        "task": {"type": "worker", "index": 1},
    }
    evaluator = json.loads(tasks["evaluator-0"].env["TF_CONFIG"])
    assert evaluator["task"] == {"type": "evaluator", "index": 0}
    assert "evaluator" not in evaluator["cluster"]
    assert tasks["evaluator-0"].address is None
    for t in tasks.values():
        assert "evaluator" not in json.loads(t.env["TF_CONFIG"])["cluster"]


def test_task_env_contract_and_overrides() -> None:
    j = load.from_dict({
        "name": "j", "command": ["x"], "env": {"A": "job", "B": "job"},
        "roles": {"worker": {"replicas": 1, "env": {"B": "role"}}},
    })
    env = cluster.plan(j, addresses(j), run_dir="/runs/j", restart_counts={"worker-0": 2})[0].env
    assert env["TFDIST_JOB_NAME"] == "j"
    assert env["TFDIST_TASK"] == "worker-0"
    assert env["TFDIST_RESTART_COUNT"] == "2"
    assert env["TFDIST_RUN_DIR"] == "/runs/j"
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert (env["A"], env["B"]) == ("job", "role")
    j2 = load.from_dict({"name": "j", "command": ["x"], "roles": {"worker": 1}, "legacy_keras": False})
    assert "TF_USE_LEGACY_KERAS" not in cluster.plan(j2, addresses(j2), run_dir="/r")[0].env


def test_tf_config_parses_with_tensorflow_resolver_format() -> None:
    """The exact keys TFConfigClusterResolver reads: cluster (dict of lists), task.type/index."""
    j = job(worker=3)
    config = json.loads(cluster.plan(j, addresses(j), run_dir="/r")[2].env["TF_CONFIG"])
    assert set(config) == {"cluster", "task"}
    assert config["task"]["index"] == 2
    assert all(isinstance(v, list) for v in config["cluster"].values())


def test_with_cluster_replaces_only_the_map() -> None:
    """What a task gets when its backend moved the job to other hosts: the new map, its own
    task entry and every other key as they were."""
    old = json.dumps({"cluster": {"worker": ["198.18.0.11:1", "198.18.0.12:2"]},
                      "task": {"type": "worker", "index": 1}, "environment": "cloud"})
    moved = json.loads(cluster.with_cluster(old, {"worker": ["198.18.0.11:1", "198.18.0.11:3"]}))
    assert moved == {"cluster": {"worker": ["198.18.0.11:1", "198.18.0.11:3"]},
                     "task": {"type": "worker", "index": 1}, "environment": "cloud"}
