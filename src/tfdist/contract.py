"""What the launcher and the runtime agree on: environment variables, strategy names, the
progress-line prefix and the defaults of the options the runtime reads.

Standard library only and free of tfdist imports, because ``tfdist.runtime`` runs inside
training scripts (it must stay light at import) and the launcher must never drift from it:
both sides import these names from here, and a test fails if a literal is copied again.
"""

from __future__ import annotations

from typing import Any

# -- environment variables every task gets (see tfdist.cluster.task_env) ----------------------
TF_CONFIG = "TF_CONFIG"
JOB_NAME = "TFDIST_JOB_NAME"
TASK = "TFDIST_TASK"
RESTART_COUNT = "TFDIST_RESTART_COUNT"
RUN_DIR = "TFDIST_RUN_DIR"
STRATEGY = "TFDIST_STRATEGY"
OPTIONS = "TFDIST_OPTIONS"
#: Seconds a stopped task has between SIGTERM and SIGKILL: the runtime's save window.
STOP_GRACE = "TFDIST_STOP_GRACE"
LEGACY_KERAS = "TF_USE_LEGACY_KERAS"
#: Set by process backends: TensorFlow's gRPC server then binds a port tfdist holds.
GRPC_REUSE_PORT = "TF_GRPC_REUSE_PORT"
#: Set by the local backend for a task with a port: the ports its preloaded bind interposer
#: keeps on loopback (read by backends/loopback_bind.c; see backends/netguard.py).
LOOPBACK_PORTS = "TFDIST_LOOPBACK_PORTS"
#: Read by the local backend from its environment or the job's env: 1 leaves ports reachable.
EXPOSE_PORTS = "TFDIST_EXPOSE_PORTS"
#: The job's data section (see tfdist.data): ``TFDIST_DATA_<NAME>`` is a JSON list of the
#: task's files of input ``name`` (local paths when staged, URIs when streamed);
#: ``TFDIST_OUTPUT_<NAME>`` the local directory of output ``name``. ``TFDIST_NODE_PLAN`` is
#: what the node side (tfdist.node.staging) reads to stage inputs and keep outputs (outside
#: both prefixes: an input may be named ``plan``); the script never sees it.
DATA_PREFIX = "TFDIST_DATA_"
#: URI schemes a data input or output may name ("" is a plain path): the job spec refuses
#: others, tfdist.node.stores has a store for each.
DATA_SCHEMES: tuple[str, ...] = ("", "file", "hdfs")
OUTPUT_PREFIX = "TFDIST_OUTPUT_"
DATA_PLAN = "TFDIST_NODE_PLAN"
#: A JSON list of the inputs whose list in ``TFDIST_DATA_<NAME>`` is this task's own share
#: (``shard: file`` dealt to it), so a reader must not shard it again (runtime.FileShards);
#: an input not named here is every file of it. Outside the prefix, like the plan.
SHARDED_INPUTS = "TFDIST_SHARDED_INPUTS"
#: Variables tfdist sets itself, in the order they are documented.
TASK_ENV = (TF_CONFIG, JOB_NAME, TASK, RESTART_COUNT, RUN_DIR, STRATEGY, OPTIONS, STOP_GRACE)

# -- roles and strategies ------------------------------------------------------------------
#: Roles in the order tasks are planned and shown.
ROLES: tuple[str, ...] = ("chief", "worker", "ps", "evaluator")
#: Roles that are part of the training cluster map in TF_CONFIG.
TRAINING_ROLES: tuple[str, ...] = ("chief", "worker", "ps")
#: Strategy names a job file accepts (tfdist.jobspec.model.Strategy lists the same, tested).
STRATEGIES: tuple[str, ...] = (
    "multi_worker_mirrored",
    "parameter_server",
    "mirrored",
    "central_storage",
    "one_device",
    "none",
)
#: Strategies that run inside one task (no multi-task cluster).
SINGLE_TASK_STRATEGIES: tuple[str, ...] = ("mirrored", "central_storage", "one_device")

# -- what tasks print and write -------------------------------------------------------------
#: Prefix of a progress report line on a task's stdout: ``TFDIST_PROGRESS {json}``.
PROGRESS_PREFIX = "TFDIST_PROGRESS "
#: A progress report with this key marks a moment of training for the goodput breakdown
#: (tfdist.supervisor.goodput): ``begin`` (training starts from ``step``: after a restore, the
#: restored step), ``checkpoint`` (a save of ``step`` that blocked training for ``seconds``
#: ended), ``eval`` (an evaluation inside training took ``seconds``), ``wait`` (the task
#: waited ``seconds`` for others), ``stage`` (below).
MARK = "mark"
MARK_BEGIN = "begin"
MARK_CHECKPOINT = "checkpoint"
MARK_EVAL = "eval"
MARK_WAIT = "wait"
#: Sent by the node side (not the script) after it staged a task's inputs: ``seconds`` it
#: took, ``files`` and ``bytes`` copied (see tfdist.node.staging).
MARK_STAGE = "stage"
#: The file the chief writes into the checkpoint directory when training ends.
DONE_MARKER = "TRAINING_DONE"

#: ``options`` of a job as the runtime sees them when the job file sets none
#: (tfdist.jobspec.model.StrategyOptions has the same defaults, tested).
DEFAULT_OPTIONS: dict[str, Any] = {
    "communication": {"implementation": "auto", "bytes_per_pack": 0, "timeout_seconds": None},
    "partition": None,
    "auto_shard": "auto",
    "update": {
        "mode": "async",
        "replicas_to_aggregate": None,
        "timeout_seconds": None,
        "min_replicas": 1,
        "max_staleness": 0,
    },
}
