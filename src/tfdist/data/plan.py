"""Which task gets what, and the variables that tell it: pure, from the job and the files
:mod:`.resolve` listed.

Who gets an input's files:

- sharded inputs (``shard: file``) are split over the *training workers*: the chief and the
  workers under multi_worker_mirrored (the chief trains like a worker there), the single
  training task of one-task strategies and ``none``; under parameter_server the workers (each
  builds its own dataset). The other tasks (the parameter_server chief, which coordinates, and
  the evaluator) get every URI of a streamed sharded input, and nothing of a staged one:
  copying the whole data set to one node is what sharding avoids;
- ``shard: none`` inputs go whole to every task but the parameter servers (the evaluator's
  own data is such an input);
- parameter servers get no input and no output: they only hold variables.

Outputs: every task but the parameter servers gets a local directory for each, filled from
the output's URI before it starts; only the writer's (the chief, or worker-0 without one) is
copied back to the URI, and the evaluator's follows the URI while it runs (it reads the
chief's checkpoints there).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfdist import contract, runs
from tfdist.cluster import task_ids
from tfdist.data.shard import DataFile, TooFewFiles, shard
from tfdist.data.shown import count
from tfdist.errors import SpecError
from tfdist.jobspec.model import JobSpec

#: Linux's limit on one environment string (MAX_ARG_STRLEN), less room for the name.
MAX_VALUE = 128 * 1024 - 64
#: How many of a task's files of one input are named where they are shown (``status``, the
#: summary, the job store, the dashboard); the rest are counted (files and bytes), so a task
#: with 10,000 files costs what one with 3 does.
FIRST_FILES = 3
#: A named file's URI is kept up to this many characters (a name is the user's, or a
#: directory listing's: any length).
MAX_URI = 400


def shard_takers(job: JobSpec) -> list[str]:
    """The tasks a sharded input is split over, in the order shares are dealt."""
    names = [t.name for t in task_ids(job)]
    if job.strategy == "parameter_server":
        return [n for n in names if n.startswith("worker-")]
    return [n for n in names if n.startswith(("chief-", "worker-"))]


def writer(job: JobSpec) -> str:
    """The task whose output directories are kept: the chief, or worker-0 without one."""
    return "chief-0" if job.has_chief else "worker-0"


@dataclass(frozen=True)
class DataPlan:
    """Every task's share of the job's data."""

    #: task -> input -> its files.
    shares: Mapping[str, Mapping[str, tuple[DataFile, ...]]]
    #: input -> stage | stream.
    modes: Mapping[str, str]
    #: output name -> its URI.
    outputs: Mapping[str, str]
    writer: str
    #: input -> all its files.
    files: Mapping[str, tuple[DataFile, ...]] = field(default_factory=dict)
    #: task -> the inputs whose files in :attr:`shares` are its own share (``shard: file``).
    dealt: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: store (``hdfs://AUTHORITY``) -> how the nodes reach it: the WebHDFS address and user
    #: the files were listed with (tfdist.node.stores.route).
    routes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def stages(self) -> bool:
        """Whether a node must do something before a task starts (stage, fill outputs)."""
        return bool(self.outputs) or "stage" in self.modes.values()

    def task_env(self, task: str) -> dict[str, str]:
        """The variables ``task`` starts with: streamed inputs' URIs, and for the node side
        (tfdist.node.staging) the plan of what to stage and keep."""
        env: dict[str, str] = {}
        staged: list[dict[str, Any]] = []
        for name, files in self.shares.get(task, {}).items():
            if self.modes[name] == "stream":
                env[contract.DATA_PREFIX + name.upper()] = json.dumps([f.uri for f in files])
            else:
                staged.append({"name": name, "files": [f.to_dict() for f in files]})
        outputs = [] if task.startswith("ps-") else [
            {"name": name, "uri": uri, "writer": task == self.writer, "follow": task.startswith("evaluator-")}
            for name, uri in self.outputs.items()]
        if own := sorted(self.dealt.get(task, ())):
            env[contract.SHARDED_INPUTS] = json.dumps(own)
        if staged or outputs:
            node_plan: dict[str, Any] = {"task": task, "inputs": staged, "outputs": outputs}
            if self.routes:
                node_plan["stores"] = {key: dict(how) for key, how in self.routes.items()}
            env[contract.DATA_PLAN] = json.dumps(node_plan, separators=(",", ":"))
        return env

    def to_dict(self) -> dict[str, Any]:
        """What the run directory's ``data.json`` keeps (``tfdist status`` shows it)."""
        return {
            "inputs": {name: {"mode": self.modes[name], "files": len(files),
                              "bytes": sum(f.size for f in files)} for name, files in self.files.items()},
            "outputs": dict(self.outputs),
            "writer": self.writer,
            "tasks": {task: {name: [f.uri for f in files] for name, files in share.items()}
                      for task, share in self.shares.items()},
            "bytes": {task: {name: sum(f.size for f in files) for name, files in share.items()}
                      for task, share in self.shares.items()},
        }


def summary(data: Mapping[str, Any]) -> dict[str, Any]:
    """The bounded view of a plan (:meth:`DataPlan.to_dict`, a run's ``data.json``) that is
    shown and stored: each input's totals, the outputs and their writer, and per task and input
    how many files, how many bytes (None from a ``data.json`` written before it kept them) and
    the first :data:`FIRST_FILES` URIs. Anything but the expected shapes is left out: the file
    is on disk, where anything may have changed it."""
    def text(value: Any) -> str:
        return str(value)[:MAX_URI]

    inputs = {text(name): {"mode": text(info.get("mode")), "files": count(info.get("files")),
                           "bytes": count(info.get("bytes"))}
              for name, info in _mapping(data.get("inputs")).items() if isinstance(info, Mapping)}
    sizes = _mapping(data.get("bytes"))
    tasks: dict[str, dict[str, dict[str, Any]]] = {}
    for task, share in _mapping(data.get("tasks")).items():
        own = _mapping(sizes.get(task))
        tasks[text(task)] = {
            text(name): {"files": len(uris), "bytes": count(own.get(name)),
                         "first": [text(u) for u in uris[:FIRST_FILES]]}
            for name, uris in _mapping(share).items() if isinstance(uris, list)}
    return {"inputs": inputs, "outputs": {text(k): text(v) for k, v in _mapping(data.get("outputs")).items()},
            "writer": text(data.get("writer") or ""), "tasks": tasks}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def plan_for(job: JobSpec, files: Mapping[str, list[DataFile]], outputs: Mapping[str, str],
             routes: Mapping[str, Mapping[str, str]] | None = None) -> DataPlan:
    """The plan of ``job`` given its inputs' files (pure: see :func:`make` for the listing)
    and how the nodes reach their stores (``routes``)."""
    tasks = [t.name for t in task_ids(job)]
    takers = shard_takers(job)
    shares: dict[str, dict[str, tuple[DataFile, ...]]] = {t: {} for t in tasks if not t.startswith("ps-")}
    own: dict[str, set[str]] = {}
    for name, spec in job.data.items():
        every = tuple(files[name])
        if spec.shard == "file":
            try:
                split = shard(every, len(takers))
            except TooFewFiles as err:
                raise SpecError(f"data.{name}: {err} (shard: file gives each worker its own files); "
                                "split the data into more files, or use shard: none") from None
            dealt = dict(zip(takers, split, strict=True))
        else:
            dealt = {}
        for task in shares:
            if task in dealt:
                shares[task][name] = tuple(dealt[task])
                own.setdefault(task, set()).add(name)
            elif spec.shard == "none" or spec.mode == "stream":
                shares[task][name] = every
    plan = DataPlan(shares=shares, modes={n: s.mode for n, s in job.data.items()},
                    outputs=dict(outputs), writer=writer(job), files={n: tuple(f) for n, f in files.items()},
                    dealt={task: frozenset(names) for task, names in own.items()},
                    routes=dict(routes or {}))
    for task in tasks:
        for key, value in plan.task_env(task).items():
            if len(key) + len(value) > MAX_VALUE:
                raise SpecError(f"data: {task} would get {len(value):,} bytes of file names in {key}, more "
                                "than one environment variable may hold; use fewer, larger files")
    return plan


def make(job: JobSpec) -> DataPlan | None:
    """The job's plan, its files listed (SpecError for what cannot be used); None without a
    data section or outputs."""
    if not job.data and not job.outputs:
        return None
    from tfdist.data.resolve import resolve  # the stores and their clients: only for a job with data

    files, outputs, routes = resolve(job)
    return plan_for(job, files, outputs, routes)


def write(plan: DataPlan, run_dir: Path, warn: Callable[[str], None]) -> None:
    """The run directory's ``data.json``; a disk that cannot take it must not stop the job."""
    try:
        (run_dir / runs.DATA).write_text(json.dumps(plan.to_dict(), indent=1) + "\n", encoding="utf-8")
    except OSError as err:
        warn(f"cannot write {runs.DATA} ({err.strerror or err})")


def read(run_dir: str | Path) -> dict[str, Any] | None:
    """A run's ``data.json``, or None (a job without data, or unreadable)."""
    try:
        data = json.loads((Path(run_dir) / runs.DATA).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
