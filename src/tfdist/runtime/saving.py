"""Save a model once per job, with every worker taking part.

Under MultiWorkerMirroredStrategy saving runs collective ops, so every worker must call
``model.save``; if they all wrote to the same path they would overwrite each other. The
chief writes the real path, the others a unique temporary directory that is removed
right after. Under the other strategies only the caller saves (on a parameter-server job
that is the chief; its ps and worker tasks never get here).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tfdist import contract
from tfdist.runtime import progress
from tfdist.runtime.env import read_context


def is_writer(strategy: Any) -> bool:
    """True if this task writes the real files (TensorFlow's ``should_checkpoint``)."""
    extended = strategy.extended
    in_multi = getattr(extended, "_in_multi_worker_mode", lambda: False)()
    return not in_multi or bool(getattr(extended, "should_checkpoint", True))


def write_path(path: str | Path, task: str, writer: bool) -> tuple[Path, Path | None]:
    """``(where to write, temp dir to remove)`` for this task. Pure apart from mkdtemp."""
    path = Path(path)
    if writer:
        return path, None
    tmp = Path(tempfile.mkdtemp(prefix=f"tfdist-save-{task}-"))
    return tmp / path.name, tmp


def save_model(model: Any, path: str | Path | None = None, **save_kwargs: Any) -> Path | None:
    """Save ``model`` to ``path`` (default: the job's model directory).

    Returns the path written on the chief, None on other tasks. Every worker of a
    MultiWorkerMirrored job must call this at the same point of the script. The
    evaluator never saves (it is not part of training).
    """
    ctx = read_context()
    if ctx.is_evaluator:
        return None
    target = Path(path) if path is not None else ctx.dirs.model
    writer = is_writer(model.distribute_strategy)
    where, tmp = write_path(target, ctx.task, writer)
    try:
        if writer:
            target.parent.mkdir(parents=True, exist_ok=True)
        model.save(os.fspath(where), **save_kwargs)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return target if writer else None


def save_checkpoint(
    checkpoint: Any, directory: str | Path, strategy: Any, number: int | None = None, *,
    step: int | None = None,
) -> str | None:
    """``checkpoint.write`` the same way: the chief into ``directory``, others to temp.

    For custom loops with ``tf.train.Checkpoint``. Returns the chief's checkpoint prefix
    and updates the ``checkpoint`` state file, so ``tf.train.latest_checkpoint`` and the
    sidecar evaluator find it. ``number`` (e.g. the epoch) names it; default: next free.
    ``step`` (the training step saved) goes into the goodput mark this sends when the save
    is done (its cost is what the launcher's checkpoint advice is measured from).
    """
    started = time.monotonic()
    try:
        return _save_checkpoint(checkpoint, directory, strategy, number)
    finally:
        progress.mark(contract.MARK_CHECKPOINT, step=step, seconds=time.monotonic() - started)


def _save_checkpoint(checkpoint: Any, directory: str | Path, strategy: Any,
                     number: int | None) -> str | None:
    ctx = read_context()
    writer = is_writer(strategy)
    directory = Path(directory)
    if writer:
        directory.mkdir(parents=True, exist_ok=True)
        number = _next_number(directory) if number is None else number
        prefix = checkpoint.write(os.fspath(directory / f"ckpt-{number:03d}"))
        _write_state(directory, prefix)
        return prefix
    tmp = Path(tempfile.mkdtemp(prefix=f"tfdist-ckpt-{ctx.task}-"))
    try:
        checkpoint.write(os.fspath(tmp / "ckpt"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return None


def _next_number(directory: Path) -> int:
    numbers = [
        int(p.name[5:8]) for p in directory.glob("ckpt-*.index") if len(p.name) > 8 and p.name[5:8].isdigit()
    ]
    return max(numbers, default=0) + 1


def _write_state(directory: Path, prefix: str) -> None:
    """The ``checkpoint`` state file that tf.train.latest_checkpoint reads."""
    name = Path(prefix).name
    text = f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n'
    tmp = directory / "checkpoint.tmp"
    tmp.write_text(text)
    tmp.replace(directory / "checkpoint")
