"""The digits data set (8x8 images of 0-9, shipped inside scikit-learn) and tiny models.

Every example trains on it so they can be compared; nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

NUM_CLASSES = 10
#: Pixel values are integers 0..16; the embedding example uses (position, value) tokens.
PIXEL_LEVELS = 17
NUM_PIXELS = 64


def arrays() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 images as (pixels 0..16, labels), exactly what ``load_digits()`` returns.

    Read straight from the CSV file scikit-learn ships: importing scikit-learn costs
    about 1.5 s of CPU, paid by every task of every run (and every restart) otherwise.
    """
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.exists():
            data = np.loadtxt(path, delimiter=",")
            return data[:, :-1], data[:, -1].astype("int32")
    from sklearn.datasets import load_digits  # another layout: the slower, official way

    digits = load_digits()
    return digits.data, digits.target


def load(test_fraction: float = 0.2, seed: int = 0):
    """``(x_train, y_train, x_test, y_test)``: float32 pixels in [0, 1], int32 labels."""
    pixels, labels = arrays()
    x = (pixels / 16.0).astype("float32")
    y = labels.astype("int32")
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test = int(len(x) * test_fraction)
    return x[n_test:], y[n_test:], x[:n_test], y[:n_test]


def tokens(x: np.ndarray) -> np.ndarray:
    """Each image as 64 tokens ``position * 17 + pixel level`` (for embedding models)."""
    levels = np.rint(x * 16).astype("int32")
    return np.arange(NUM_PIXELS, dtype="int32") * PIXEL_LEVELS + levels


def dense_model(tf_keras, hidden: int = 64, learning_rate: float = 0.01):
    """A small compiled classifier; call inside ``strategy.scope()``."""
    model = tf_keras.Sequential(
        [
            tf_keras.layers.Input(shape=(NUM_PIXELS,)),
            tf_keras.layers.Dense(hidden, activation="relu"),
            tf_keras.layers.Dense(NUM_CLASSES),
        ]
    )
    model.compile(
        optimizer=tf_keras.optimizers.Adam(learning_rate),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def crash_once(ctx, epoch: int, at_epoch: int | None) -> None:
    """Kill this task once, after ``at_epoch``, to try tfdist's restarts.

    Only a non-chief task crashes, and only on its first attempt
    (``TFDIST_RESTART_COUNT`` is 0), so the restarted job runs to the end.
    """
    import os

    if at_epoch and epoch == at_epoch and ctx.restart_count == 0 and not ctx.is_chief:
        print(f"{ctx.task}: crashing on purpose after epoch {epoch}", flush=True)
        os._exit(3)
