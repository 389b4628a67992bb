"""The placement state the Spark and YARN backends share (tfdist.backends.agent.placement):
which addresses TF_CONFIG names, when new agents' addresses become the job's, and what a
task started after a move gets. Pure: agents' reports in, addresses and environments out."""

from __future__ import annotations

import json

from tfdist.backends.agent.placement import Placement, reported
from tfdist.cluster import task_ids
from tfdist.contract import TF_CONFIG
from tfdist.jobspec import load

JOB = load.from_dict({"name": "p", "command": "python t.py",
                      "roles": {"chief": 1, "worker": 2, "evaluator": 1}}, "job")
TASKS = task_ids(JOB)


def infos(**moved: str) -> dict[str, dict[str, object]]:
    """Every task's agent report: on 10.0.0.1, ports 4000..., unless ``moved`` gives ``host:port``."""
    out: dict[str, dict[str, object]] = {}
    for i, t in enumerate(TASKS):
        host, port = moved.get(t.name.replace("-", "_"), f"10.0.0.1:{4000 + i}").split(":")
        out[t.name] = {"host": host, "port": int(port), "node": "n1"}
    return out


def tf_config(cluster: dict[str, list[str]]) -> dict[str, str]:
    return {TF_CONFIG: json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}), "X": "1"}


def test_the_reserved_addresses_are_the_job_s_and_nothing_is_retargeted() -> None:
    placement = Placement(JOB)
    placement.take(reported(infos()))
    assert placement.addresses["worker-1"] == "10.0.0.1:4002" and not placement.moved
    # reserve returns only the cluster's members: the evaluator has no place in TF_CONFIG
    assert placement.reserved(TASKS) == {"chief-0": "10.0.0.1:4000", "worker-0": "10.0.0.1:4001",
                                         "worker-1": "10.0.0.1:4002"}
    env = tf_config({"worker": ["a:1"]})
    assert placement.retarget(dict(env)) == env
    assert placement.moved_address("worker-0") is None


def test_new_agents_addresses_are_adopted_once_every_task_has_one() -> None:
    placement = Placement(JOB)
    placement.take(reported(infos()))
    partial = infos(worker_1="10.0.0.9:5000")
    del partial["chief-0"]  # its new agent has not connected yet
    assert not placement.adopt(partial)
    assert placement.address("worker-1") == "10.0.0.1:4002" and not placement.moved
    no_port = infos(worker_1="10.0.0.9:5000")
    del no_port["chief-0"]["port"]  # an agent that reported no port (it could not hold one)
    assert not placement.adopt(no_port)
    assert placement.adopt(infos(worker_1="10.0.0.9:5000"))
    assert placement.address("worker-1") == "10.0.0.9:5000" and placement.moved
    assert not placement.adopt(infos(worker_1="10.0.0.9:5000"))  # the same again: no news


def test_after_a_move_attempts_get_the_new_cluster_map_and_members_their_new_address() -> None:
    placement = Placement(JOB)
    placement.take(reported(infos()))
    placement.adopt(infos(worker_1="10.0.0.9:5000", evaluator_0="10.0.0.9:5001"))
    env = placement.retarget(tf_config({"chief": ["10.0.0.1:4000"], "worker": ["x:1", "x:2"]}))
    config = json.loads(env[TF_CONFIG])
    assert config["cluster"] == {"chief": ["10.0.0.1:4000"], "worker": ["10.0.0.1:4001", "10.0.0.9:5000"]}
    assert config["task"] == {"type": "worker", "index": 0} and env["X"] == "1"
    assert placement.retarget({"X": "1"}) == {"X": "1"}  # no TF_CONFIG (the evaluator's): left alone
    assert placement.moved_address("worker-1") == "10.0.0.9:5000"
    assert placement.moved_address("worker-0") == "10.0.0.1:4001"
    assert placement.moved_address("evaluator-0") is None  # not a member of the cluster map


def test_addresses_are_a_copy_and_reported_skips_agents_without_a_port() -> None:
    placement = Placement(JOB)
    placement.take(reported(infos()))
    placement.addresses["chief-0"] = "elsewhere:1"
    assert placement.address("chief-0") == "10.0.0.1:4000"
    assert reported({"a": {"host": "h", "port": 1}, "b": {"host": "h", "error": "port taken"}}) == {"a": "h:1"}


def test_one_task_moved_alone_moves_the_job_and_one_without_an_address_moves_nothing() -> None:
    """Ray: a replacement actor of one task, on another node."""
    placement = Placement(JOB)
    trained = {n: a for n, a in reported(infos()).items() if n != "evaluator-0"}
    placement.take(trained)
    assert not placement.move("worker-0", "10.0.0.1:4001")  # the same address: no move
    assert not placement.move("evaluator-0", "10.0.0.9:1")  # not in the cluster map
    assert not placement.moved and placement.address("evaluator-0") is None
    assert placement.move("worker-0", "10.0.0.9:5000")
    assert placement.moved_address("worker-0") == "10.0.0.9:5000"
    env = placement.retarget(tf_config({}))
    assert json.loads(env[TF_CONFIG])["cluster"]["worker"] == ["10.0.0.9:5000", "10.0.0.1:4002"]
