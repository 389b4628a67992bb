"""The sidecar evaluator: evaluate each new checkpoint, stop when training is done.

It runs in the ``evaluator`` task, outside the training cluster. It must never keep a
job alive: it returns once the chief's end-of-training marker exists and the last
checkpoint has been evaluated, or after ``idle_timeout`` seconds without a new
checkpoint (e.g. the chief died and will not come back).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfdist.contract import DONE_MARKER
from tfdist.runtime import progress
from tfdist.runtime.env import read_context

_NUMBER = re.compile(r"(\d+)$")


def checkpoint_number(path: str | None) -> int | None:
    """The trailing number of a checkpoint prefix (``ckpt-003`` -> 3), if any."""
    match = _NUMBER.search(path or "")
    return int(match.group(1)) if match else None


def next_action(
    latest: str | None, evaluated: str | None, done: bool, idle: float, idle_timeout: float | None
) -> str:
    """What the evaluator does next: ``evaluate``, ``finish``, ``give-up`` or ``wait``.

    A pure function, so the stopping rule is tested without TensorFlow.
    """
    if latest and latest != evaluated:
        return "evaluate"
    if done:
        return "finish"
    if idle_timeout is not None and idle >= idle_timeout:
        return "give-up"
    return "wait"


def run_sidecar_evaluator(
    model: Any,
    data: Any,
    *,
    checkpoint_dir: str | Path | None = None,
    steps: int | None = None,
    poll_seconds: float = 0.5,
    idle_timeout: float | None = 600.0,
    load: Callable[[Any, str], None] | None = None,
) -> dict[str, Any]:
    """Evaluate every new checkpoint in ``checkpoint_dir`` (default: the job's).

    ``model`` is a compiled Keras model (or a function returning one); ``data`` what
    ``model.evaluate`` takes. ``load(model, path)`` restores a checkpoint; the default
    fits the weight checkpoints written by :func:`tfdist.runtime.callbacks`; use
    :func:`model_checkpoint_loader` for ``tf.train.Checkpoint(model=...)``. Reports each
    evaluation and returns the last metrics.
    """
    import tensorflow as tf

    if callable(model) and not hasattr(model, "evaluate"):
        model = model()
    directory = Path(checkpoint_dir) if checkpoint_dir else read_context().dirs.checkpoints
    load = load or _load_weights
    evaluated: str | None = None
    metrics: dict[str, Any] = {}
    last_change = time.monotonic()
    while True:
        # The marker first: the chief writes its last checkpoint, then the marker, so a
        # marker seen here guarantees the `latest` read next includes that checkpoint.
        done = (directory / DONE_MARKER).exists()
        latest = tf.train.latest_checkpoint(str(directory)) if directory.exists() else None
        action = next_action(latest, evaluated, done, time.monotonic() - last_change, idle_timeout)
        if action == "evaluate":
            assert latest is not None
            metrics = _evaluate(model, data, latest, steps, load)
            evaluated, last_change = latest, time.monotonic()
            progress.report(
                evaluation=True,
                checkpoint=Path(latest).name,
                epoch=checkpoint_number(latest),
                loss=metrics.get("loss"),
                metrics={k: v for k, v in metrics.items() if k != "loss"},
                final=False,
            )
        elif action == "wait":
            time.sleep(poll_seconds)
        else:
            progress.report(
                evaluation=True,
                checkpoint=Path(evaluated).name if evaluated else None,
                loss=metrics.get("loss"),
                metrics={k: v for k, v in metrics.items() if k != "loss"},
                final=True,
                gave_up=action == "give-up" or None,
            )
            return metrics


def model_checkpoint_loader(key: str = "model") -> Callable[[Any, str], None]:
    """A ``load`` for checkpoints of custom loops: ``tf.train.Checkpoint(model=...)``.

    The default loader reads Keras weight checkpoints, whose root is the model itself;
    a custom loop's checkpoint holds the model under ``key`` (next to the optimizer).
    """

    def load(model: Any, path: str) -> None:
        import tensorflow as tf

        tf.train.Checkpoint(**{key: model}).read(path).expect_partial()

    return load


def _load_weights(model: Any, path: str) -> None:
    status = model.load_weights(path)
    if hasattr(status, "expect_partial"):
        status.expect_partial()


def _evaluate(model: Any, data: Any, path: str, steps: int | None, load: Any) -> dict[str, Any]:
    """Restore ``path`` and evaluate; a checkpoint deleted meanwhile is retried later."""
    for attempt in range(3):
        try:
            load(model, path)
            break
        except (OSError, ValueError, RuntimeError) as err:  # being written or pruned
            if attempt == 2:
                raise
            print(f"tfdist: cannot read {path} yet ({err}); retrying", flush=True)
            time.sleep(0.5)
    result = model.evaluate(data, steps=steps, verbose=0, return_dict=True)
    return {k: float(v) for k, v in result.items()}
