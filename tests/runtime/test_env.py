"""tfdist.runtime.env: reading a task's place in the job from its environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfdist import contract
from tfdist.runtime import env


def tf_config(cluster: dict, role: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})


CLUSTER = {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"]}


def test_no_tf_config_is_a_lone_worker():
    assert env.parse_tf_config(None) == ({}, "worker", 0)
    assert env.parse_tf_config("  ") == ({}, "worker", 0)


def test_tf_config_is_parsed():
    cluster, role, index = env.parse_tf_config(tf_config(CLUSTER, "worker", 1))
    assert cluster == CLUSTER
    assert (role, index) == ("worker", 1)


def test_bad_tf_config_names_the_variable():
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        env.parse_tf_config("{cluster")


@pytest.mark.parametrize(
    ("cluster", "role", "index", "chief"),
    [
        (CLUSTER, "chief", 0, True),
        (CLUSTER, "worker", 0, False),  # there is a chief
        ({"worker": ["a", "b"]}, "worker", 0, True),  # no chief: worker 0
        ({"worker": ["a", "b"]}, "worker", 1, False),
        (CLUSTER, "evaluator", 0, False),
        (CLUSTER, "ps", 0, False),
        ({}, "worker", 0, True),  # a plain run
    ],
)
def test_chief_rule(cluster, role, index, chief):
    assert env.is_chief(cluster, role, index) is chief


def test_num_workers_counts_chief_only_for_all_reduce():
    assert env.num_workers(CLUSTER, "multi_worker_mirrored") == 3
    assert env.num_workers(CLUSTER, "parameter_server") == 2
    assert env.num_workers({}, "none") == 1


@pytest.mark.parametrize(
    ("declared", "environ", "expected"),
    [
        ("mirrored", {}, "mirrored"),
        (None, {"TFDIST_STRATEGY": "central_storage"}, "central_storage"),
        (None, {}, "none"),
        (None, {"TF_CONFIG": tf_config({"worker": ["a", "b"]}, "worker", 0)}, "multi_worker_mirrored"),
        (None, {"TF_CONFIG": tf_config(CLUSTER, "chief", 0)}, "parameter_server"),
        # declared PS but no cluster (plain `python train.py`): run in this process
        ("parameter_server", {}, "none"),
    ],
)
def test_resolve_strategy(declared, environ, expected):
    assert env.resolve_strategy(declared, environ) == expected


def test_unknown_strategy_is_refused():
    with pytest.raises(ValueError, match="unknown strategy 'mirored'"):
        env.resolve_strategy("mirored", {})


def test_options_merge_over_defaults():
    options = env.parse_options(json.dumps({"communication": {"bytes_per_pack": 4096}}))
    assert options["communication"] == {
        "implementation": "auto",
        "bytes_per_pack": 4096,
        "timeout_seconds": None,
    }
    assert options["auto_shard"] == "auto"
    assert options["partition"] is None
    assert env.parse_options(None)["communication"]["implementation"] == "auto"


def test_options_written_by_the_launcher_are_understood():
    from tfdist.jobspec.model import StrategyOptions

    raw = json.dumps(StrategyOptions(partition={"min_shard_bytes": 1024}, auto_shard="data").dump())
    options = env.parse_options(raw)
    assert options["partition"]["min_shard_bytes"] == 1024
    assert options["auto_shard"] == "data"


def test_dirs_default_under_run_dir_and_arguments_win(tmp_path: Path):
    dirs = env.job_dirs({"TFDIST_RUN_DIR": str(tmp_path)}, model=str(tmp_path / "elsewhere"))
    assert dirs.checkpoints == tmp_path / "checkpoints"
    assert dirs.backup == tmp_path / "backup"
    assert dirs.tensorboard == tmp_path / "tensorboard"
    assert dirs.model == tmp_path / "elsewhere"
    assert dirs.done_marker == tmp_path / "checkpoints" / contract.DONE_MARKER
    with pytest.raises(TypeError, match="unknown directory 'modle'"):
        env.job_dirs({}, modle="x")


def test_read_context_from_a_launcher_environment(tmp_path: Path):
    environ = {
        "TF_CONFIG": tf_config(CLUSTER, "worker", 1),
        "TFDIST_STRATEGY": "parameter_server",
        "TFDIST_JOB_NAME": "digits",
        "TFDIST_RESTART_COUNT": "2",
        "TFDIST_RUN_DIR": str(tmp_path),
    }
    ctx = env.read_context(environ)
    assert ctx.task == "worker-1"
    assert ctx.is_server and not ctx.is_chief and not ctx.is_evaluator
    assert ctx.num_workers == 2
    assert ctx.restart_count == 2
    assert ctx.job_name == "digits"
    assert ctx.in_cluster
    assert ctx.dirs.model == tmp_path / "model"


def test_evaluator_context_is_not_a_server():
    ctx = env.read_context(
        {"TF_CONFIG": tf_config(CLUSTER, "evaluator", 0), "TFDIST_STRATEGY": "parameter_server"}
    )
    assert ctx.is_evaluator and not ctx.is_server and not ctx.is_chief


def test_a_parameter_server_worker_gets_two_inter_op_threads_at_least() -> None:
    """A worker whose pool TensorFlow would size to one thread (TF_NUM_INTEROP_THREADS=1, or
    one CPU) gets 2 (the sync loops hang with 1); otherwise TensorFlow's choice stands, and
    ps tasks are left alone."""
    from tfdist.runtime.strategies import worker_inter_op_threads as threads

    assert threads("worker", {"TF_NUM_INTEROP_THREADS": "1"}, cpus=8) == 2
    assert threads("worker", {}, cpus=1) == 2
    assert threads("worker", {"TF_NUM_INTEROP_THREADS": "0"}, cpus=1) == 2  # 0: TF's default, one per CPU
    assert threads("worker", {"TF_NUM_INTEROP_THREADS": "4"}, cpus=1) is None
    assert threads("worker", {}, cpus=2) is None
    assert threads("worker", {"TF_NUM_INTEROP_THREADS": "lots"}, cpus=4) is None
    assert threads("ps", {"TF_NUM_INTEROP_THREADS": "1"}, cpus=1) is None
