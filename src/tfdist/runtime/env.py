"""What this task is, read from its environment: pure functions, no TensorFlow.

Everything the launcher tells a task arrives as environment variables (see
:func:`tfdist.cluster.task_env`). Reading them in one place, without importing TensorFlow,
lets a script decide its role (serve, evaluate, train) before paying for TF's start-up,
and lets the same script run with plain ``python train.py`` as a single task.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfdist import contract


@dataclass(frozen=True)
class Dirs:
    """The job's directories. All tasks of a job see the same paths (shared storage)."""

    model: Path
    checkpoints: Path
    backup: Path
    tensorboard: Path

    @property
    def done_marker(self) -> Path:
        return self.checkpoints / contract.DONE_MARKER


@dataclass(frozen=True)
class Context:
    """This task's place in the job. ``num_replicas`` is filled once a strategy exists."""

    task_type: str
    task_index: int
    cluster: dict[str, list[str]]
    strategy: str
    options: dict[str, Any]
    job_name: str
    restart_count: int
    dirs: Dirs
    num_replicas: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def task(self) -> str:
        return f"{self.task_type}-{self.task_index}"

    @property
    def in_cluster(self) -> bool:
        """True when TF_CONFIG describes more than this one task."""
        return sum(len(v) for v in self.cluster.values()) > 1

    @property
    def num_workers(self) -> int:
        """Tasks that compute gradients: chief + workers for all-reduce, workers for PS."""
        return num_workers(self.cluster, self.strategy)

    @property
    def is_chief(self) -> bool:
        return is_chief(self.cluster, self.task_type, self.task_index)

    @property
    def is_evaluator(self) -> bool:
        return self.task_type == "evaluator"

    @property
    def is_server(self) -> bool:
        """A ps or worker task of ParameterServerStrategy: it only serves variables/ops."""
        return self.strategy == "parameter_server" and self.task_type in ("ps", "worker")


def parse_tf_config(raw: str | None) -> tuple[dict[str, list[str]], str, int]:
    """``(cluster, task_type, task_index)``; no TF_CONFIG means a lone worker 0."""
    if not raw or not raw.strip():
        return {}, "worker", 0
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ValueError(f"TF_CONFIG is not valid JSON: {err}") from None
    cluster = {str(k): [str(a) for a in v] for k, v in (data.get("cluster") or {}).items()}
    task = data.get("task") or {}
    return cluster, str(task.get("type") or "worker"), int(task.get("index") or 0)


def is_chief(cluster: Mapping[str, list[str]], task_type: str, task_index: int) -> bool:
    """TensorFlow's rule: the chief if there is one, else worker 0 (or a lone task)."""
    if task_type == "chief":
        return True
    if task_type == "worker" and task_index == 0:
        return not cluster.get("chief")
    return False


def num_workers(cluster: Mapping[str, list[str]], strategy: str) -> int:
    """How many tasks feed data. Under PS the chief only coordinates."""
    if strategy == "parameter_server":
        return max(1, len(cluster.get("worker", [])))
    return max(1, len(cluster.get("chief", [])) + len(cluster.get("worker", [])))


def resolve_strategy(declared: str | None, env: Mapping[str, str]) -> str:
    """The strategy to build: argument, else TFDIST_STRATEGY, else a guess from TF_CONFIG.

    Without a cluster, multi-task strategies fall back to running in this one process,
    so ``python train.py`` works on a laptop with the same code.
    """
    name = declared or env.get(contract.STRATEGY) or ""
    cluster, _, _ = parse_tf_config(env.get(contract.TF_CONFIG))
    if not name:
        if cluster.get("ps"):
            name = "parameter_server"
        elif sum(len(v) for v in cluster.values()) > 1:
            name = "multi_worker_mirrored"
        else:
            name = "none"
    if name not in contract.STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; use one of {', '.join(contract.STRATEGIES)}")
    if name == "parameter_server" and not cluster.get("ps"):
        return "none"
    return name


def parse_options(raw: str | None) -> dict[str, Any]:
    """TFDIST_OPTIONS merged over the defaults of spec.StrategyOptions."""
    options = json.loads(json.dumps(contract.DEFAULT_OPTIONS))
    if raw and raw.strip():
        given = json.loads(raw)
        for key, value in given.items():
            if isinstance(value, dict) and isinstance(options.get(key), dict):
                options[key].update(value)
            else:
                options[key] = value
    return options


def _data_var(prefix: str, name: str) -> str:
    if not isinstance(name, str) or not name or not (name[0].isalpha() and name.replace("_", "a").isalnum()):
        raise ValueError(f"{name!r} is no input or output name; use the name the job file gives it")
    return prefix + name.upper()


def input_files(name: str, env: Mapping[str, str] | None = None) -> list[str]:
    """This task's files of input ``name`` (the job file's ``data:``): local paths when it
    is staged, URIs when it is streamed; under ``shard: file`` only this task's share.

    Read from ``TFDIST_DATA_<NAME>``; KeyError naming the input when the job has no such
    input for this task (a parameter server gets none)."""
    env = os.environ if env is None else env
    key = _data_var(contract.DATA_PREFIX, name)
    if key not in env:
        raise KeyError(f"no input {name!r} for this task ({key} is not set): check the job file's data "
                       "section (parameter servers get no inputs)")
    files = json.loads(env[key])
    return [str(f) for f in files]


def input_is_share(name: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether this task's files of input ``name`` are its own share (``shard: file`` dealt
    them to it), so a reader must not shard them again; False for a whole list."""
    env = os.environ if env is None else env
    try:
        shared = json.loads(env.get(contract.SHARDED_INPUTS) or "[]")
    except ValueError:
        return False
    return isinstance(shared, list) and name in shared


def output_dir(name: str, env: Mapping[str, str] | None = None) -> Path:
    """The local directory of output ``name`` (the job file's ``outputs:``): what the chief
    writes there is copied to the output's URI as it is saved; it starts with the URI's content.

    Read from ``TFDIST_OUTPUT_<NAME>``; KeyError naming the output when it is not set."""
    env = os.environ if env is None else env
    key = _data_var(contract.OUTPUT_PREFIX, name)
    if key not in env:
        raise KeyError(f"no output {name!r} for this task ({key} is not set): check the job file's "
                       "outputs section (parameter servers get none)")
    return Path(env[key])


#: The output whose directory holds the job's model, checkpoints and TensorBoard logs.
MODEL_OUTPUT = "model_dir"


def job_dirs(env: Mapping[str, str], **overrides: str | os.PathLike[str] | None) -> Dirs:
    """``<base>/{model,checkpoints,backup,tensorboard}``; arguments win.

    The base is the local directory of the output named ``model_dir`` when the job has one
    (so what the save helpers write is copied to its URI), else ``TFDIST_RUN_DIR``; without
    either (a plain run) ``./tfdist-run``.
    """
    output = env.get(_data_var(contract.OUTPUT_PREFIX, MODEL_OUTPUT))
    base = Path(output or env.get(contract.RUN_DIR) or "tfdist-run")
    paths = {name: base / name for name in ("model", "checkpoints", "backup", "tensorboard")}
    for name, value in overrides.items():
        if name not in paths:
            raise TypeError(f"unknown directory {name!r}; use {', '.join(paths)}")
        if value is not None:
            paths[name] = Path(value)
    return Dirs(**paths)


def read_context(env: Mapping[str, str] | None = None, /, **dirs: str | os.PathLike[str] | None) -> Context:
    """This task's :class:`Context` from an environment (default: ``os.environ``)."""
    env = os.environ if env is None else env
    cluster, task_type, task_index = parse_tf_config(env.get(contract.TF_CONFIG))
    return Context(
        task_type=task_type,
        task_index=task_index,
        cluster=cluster,
        strategy=resolve_strategy(None, env),
        options=parse_options(env.get(contract.OPTIONS)),
        job_name=env.get(contract.JOB_NAME, ""),
        restart_count=int(env.get(contract.RESTART_COUNT) or 0),
        dirs=job_dirs(env, **dirs),
    )
