"""Backup workers vs. synchronous vs. asynchronous parameter-server training.

4 workers + 1 ps on 127.0.0.1, an MLP on sklearn's digits, one worker slowed by an
injected per-step delay of (factor - 1) x the measured step time (factors 1x, 2x, 4x).
For sync (K = N), backup (K = N-1) and async: wall time to a target test accuracy and
test accuracy after a fixed number of applied steps (async: the same number of gradients,
S x N single-batch updates), median of 3 seeds; accuracy-vs-time curves in one PNG.

    python benchmarks/sync_backup.py [--quick] [--json] [--plot PATH]

The straggler sleeps in its input pipeline after reading the global step, so its gradient
is labelled with the step it started on, like a slow computation. Snapshots of the
weights are taken every ~0.1 s by the coordinator and scored offline on the test split.
The last line of ``--json`` output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # tests.runtime.sync.cluster

MODES = ("sync", "backup", "async")
FACTORS = (1, 2, 4)
SEEDS = (0, 1, 2)
WORKERS = 4
SLOW_WORKER = 3
BATCH = 32
LR = 0.3


def _digits():
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    return train_test_split(x, y.astype(np.int32), test_size=0.25, random_state=0, stratify=y)


def _accuracy(weights, x, y) -> float:
    import numpy as np

    w1, b1, w2, b2 = weights
    h = np.maximum(x @ w1 + b1, 0.0)
    return float(np.mean(np.argmax(h @ w2 + b2, 1) == y))


# -- the coordinator (chief) ------------------------------------------------------------


def chief(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras as keras
    from tensorflow.python.data.experimental.ops import testing

    from tfdist.runtime.sync.trainer import SyncTrainer

    x_tr, x_te, y_tr, y_te = _digits()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((64,)),
                keras.layers.Dense(32, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        optimizer = keras.optimizers.SGD(LR)

    def loss_fn(m, batch):
        x, y = batch
        logits = m(x, training=True)
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, logits, True))

    trainers = {
        mode: SyncTrainer(strategy, model, optimizer, loss_fn, {"mode": mode}, coordinator=coordinator)
        for mode in MODES
    }

    def init_weights(seed: int):
        keras.utils.set_random_seed(seed)
        local = keras.Sequential(
            [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)]
        )
        return local.get_weights()

    def iterator(trainer, seed: int, delay_s: float):
        def dataset_fn(wid):
            ds = tf.data.Dataset.from_tensor_slices((x_tr, y_tr)).repeat()
            ds = ds.skip(tf.cast(wid, tf.int64) * 211).shuffle(2048, seed=seed)
            ds = ds.batch(BATCH, drop_remainder=True)
            if delay_s > 0:
                us = tf.where(
                    tf.equal(wid, SLOW_WORKER),
                    tf.constant(int(delay_s * 1e6), tf.int64),
                    tf.constant(0, tf.int64),
                )
                ds = ds.apply(testing.sleep(us))
            return ds

        return trainer.per_worker_iterator(dataset_fn)

    def one_run(mode: str, seed: int, delay_s: float, steps: int) -> dict:
        trainer = trainers[mode]
        model.set_weights(init_weights(seed))
        trainer.reset()
        it = iterator(trainer, seed, delay_s)
        budget = steps * WORKERS if mode == "async" else steps
        snaps = [(0.0, 0, model.get_weights())]
        last = [time.monotonic()]
        t0 = time.monotonic()

        def callback(tr, _st):
            now = time.monotonic()
            if now - last[0] >= args.snapshot_every:
                snaps.append((now - t0, tr.stats.steps, model.get_weights()))
                last[0] = time.monotonic()
            return False

        stats = trainer.run(it, budget, callback, join=False)
        elapsed = time.monotonic() - t0
        final = model.get_weights()
        snaps.append((elapsed, stats.steps, final))
        stats = trainer.finish()
        curve = [(t, s, _accuracy(w, x_te, y_te)) for t, s, w in snaps]
        reach = next((t for t, _, a in curve if a >= args.target), None)
        return {
            "mode": mode,
            "seed": seed,
            "delay_s": delay_s,
            "seconds": elapsed,
            "steps": stats.steps,
            "final_accuracy": curve[-1][2],
            "time_to_target": reach,
            "dropped": stats.dropped,
            "attempts": stats.attempts,
            "curve": curve,
        }

    # warm up every trainer (traces its functions), then measure the un-slowed step time
    for mode in MODES:
        one_run(mode, 99, 0.0, 5)
    base_runs = [one_run("sync", 99, 0.0, args.steps // 2) for _ in range(1)]
    base_step = base_runs[0]["seconds"] / max(1, base_runs[0]["steps"])
    runs = []
    for factor in FACTORS:
        delay = (factor - 1) * base_step
        for seed in SEEDS[: args.seeds]:
            for mode in MODES:
                r = one_run(mode, seed, delay, args.steps)
                r["factor"] = factor
                runs.append(r)
                print(
                    f"factor {factor} seed {seed} {mode:6s}: {r['seconds']:.2f}s "
                    f"acc {r['final_accuracy']:.3f} to-target {r['time_to_target']} "
                    f"dropped {r['dropped']}",
                    file=sys.stderr,
                    flush=True,
                )
    Path(args.raw).write_text(json.dumps({"base_step_s": base_step, "runs": runs}))
    sys.stdout.flush()
    os._exit(0)


# -- the launcher -----------------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is unknown (target never reached) or b is 0."""
    return a / b if a is not None and b else None


def summarize(raw: dict, target: float) -> dict:
    runs = raw["runs"]
    table: dict[str, dict[str, dict]] = {}
    for factor in FACTORS:
        for mode in MODES:
            sel = [r for r in runs if r["factor"] == factor and r["mode"] == mode]
            if not sel:
                continue
            # a run that never reached the target counts as infinitely slow in the median;
            # a median that is such a run is reported as null (JSON has no infinity)
            times = [r["time_to_target"] if r["time_to_target"] is not None else float("inf") for r in sel]
            median = statistics.median(times)
            table.setdefault(str(factor), {})[mode] = {
                "time_to_target_s": None if median == float("inf") else median,
                "reached_target": f"{sum(t != float('inf') for t in times)}/{len(times)}",
                "final_accuracy": statistics.median(r["final_accuracy"] for r in sel),
                "wall_s": statistics.median(r["seconds"] for r in sel),
                "dropped": statistics.median(r["dropped"] for r in sel),
            }
    speedup, gap, overhead = {}, {}, {}
    for f, row in table.items():
        s, b = row["sync"], row["backup"]
        speedup[f] = _ratio(s["time_to_target_s"], b["time_to_target_s"])
        gap[f] = s["final_accuracy"] - b["final_accuracy"]
    s1, b1 = table["1"]["sync"], table["1"]["backup"]
    ratio = _ratio(b1["time_to_target_s"], s1["time_to_target_s"])
    overhead = None if ratio is None else ratio - 1
    return {
        "speedup_backup_vs_sync": speedup,
        "accuracy_gap_backup_vs_sync": gap,
        "backup_overhead_no_straggler": overhead,
        "goal_speedup_4x_ge_1_5": bool(speedup.get("4") and speedup["4"] >= 1.5),
        "goal_gap_4x_le_0_01": bool(gap.get("4") is not None and gap["4"] <= 0.01),
        "goal_overhead_1x_le_0_10": bool(overhead is not None and overhead <= 0.10),
        "target_accuracy": target,
        "base_step_s": raw["base_step_s"],
        "table": table,
    }


def plot(raw: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(FACTORS), figsize=(5 * len(FACTORS), 4), sharey=True)
    colors = {"sync": "tab:blue", "backup": "tab:green", "async": "tab:red"}
    for ax, factor in zip(axes, FACTORS, strict=True):
        for r in raw["runs"]:
            if r["factor"] != factor:
                continue
            t = [p[0] for p in r["curve"]]
            a = [p[2] for p in r["curve"]]
            label = r["mode"] if r["seed"] == 0 else None
            ax.plot(t, a, color=colors[r["mode"]], alpha=0.7, label=label)
        ax.set_title(f"straggler {factor}x")
        ax.set_xlabel("wall time (s)")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (under 5 minutes)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON last")
    parser.add_argument("--plot", default=None,
                        help="PNG to write (default docs/sync_backup[_quick].png)")
    parser.add_argument("--steps", type=int, default=None, help="applied steps per run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--target", type=float, default=None)
    parser.add_argument("--snapshot-every", type=float, default=0.1)
    parser.add_argument("--chief", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--raw", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plot is None:
        args.plot = str(ROOT / "docs" / f"sync_backup{'_quick' if args.quick else ''}.png")
    if args.steps is None:
        args.steps = 60 if args.quick else 150
    if args.target is None:
        args.target = 0.9 if args.quick else 0.93
    if args.chief:
        chief(args)
        return

    from tests.runtime.sync.cluster import LocalCluster

    raw_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"sync_backup_{os.getpid()}.json"
    argv = [sys.executable, __file__, "--chief", "--raw", str(raw_path)]
    argv += ["--steps", str(args.steps), "--seeds", str(args.seeds), "--target", str(args.target)]
    argv += ["--snapshot-every", str(args.snapshot_every)]
    t0 = time.monotonic()
    with LocalCluster(workers=WORKERS, ps=1) as cluster:
        proc = subprocess.run(
            argv,
            env=cluster.env("chief", 0, {"PYTHONPATH": str(ROOT / "src")}),
            stderr=None if not args.json else subprocess.PIPE,
            text=True,
            timeout=1800,
        )
    if proc.returncode != 0 or not raw_path.exists():
        sys.stderr.write((proc.stderr or "")[-4000:])
        raise SystemExit(f"the chief failed (exit {proc.returncode})")
    raw = json.loads(raw_path.read_text())
    summary = summarize(raw, args.target)
    summary["total_seconds"] = time.monotonic() - t0
    summary["steps"] = args.steps
    summary["seeds"] = args.seeds
    try:
        plot(raw, args.plot)
        where = Path(args.plot).resolve()
        # relative to the repository when inside it, so a committed summary names no machine path
        summary["plot"] = str(where.relative_to(ROOT)) if where.is_relative_to(ROOT) else args.plot
    except ImportError:
        summary["plot"] = None
    if args.json:
        print(json.dumps(summary, allow_nan=False))
    else:
        print(json.dumps(summary, indent=2, allow_nan=False))


if __name__ == "__main__":
    main()
