"""What tfdist.runtime costs per training step (issue 13): steps/s with and without it.

MultiWorkerMirrored, 2 workers, the digits and a small dense model (batch 32 per replica),
``--steps`` steps per epoch, ``--epochs`` epochs; each task times its epochs from inside
(a callback first in the list, or around the custom loop's epoch) and the steady state is
the median over epochs 2.., then over tasks. Variants, run alternating in one process so
machine noise falls on all alike (order rotated each round):

- ``fit_plain``: ``fit`` with tf_keras BackupAndRestore and a ModelCheckpoint per epoch;
- ``fit_runtime``: ``fit`` with ``runtime.callbacks()`` (the same two, preemption-safe,
  plus step-level progress reports once a second);
- ``loop_plain`` / ``loop_guard``: a custom loop without / with ``preemption_guard()``.

With ``--pss``, also ParameterServerStrategy (chief + 2 workers + 1 ps, 10 steps per
scheduled call): ``runtime.Loop`` vs a plain ClusterCoordinator loop (``pss_loop``,
``pss_plain``), and ``runtime.sync.SyncTrainer`` in ``async``, ``sync`` and ``backup``
(K = 1 of 2) modes, one step per scheduled call.

    python benchmarks/runtime_overhead.py [--rounds 5] [--pss] [--json]

A task process runs this file with ``--task VARIANT``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TFDIST = [sys.executable, "-m", "tfdist.cli"]
MWMS = ["fit_plain", "fit_runtime", "loop_plain", "loop_guard"]
PSS = ["pss_plain", "pss_loop", "pss_async", "pss_sync", "pss_backup"]
RATIOS = [("fit_runtime", "fit_plain"), ("loop_guard", "loop_plain"), ("pss_loop", "pss_plain"),
          ("pss_sync", "pss_async"), ("pss_backup", "pss_async")]


# ---------------------------------------------------------------- inside a task


def _data():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "examples" / "digits"))
    import digits_data

    x, y, _, _ = digits_data.load()
    return digits_data, x, y


def task_mwms(variant: str, steps: int, epochs: int) -> None:
    from tfdist import runtime

    strategy = runtime.strategy()
    import tensorflow as tf
    import tf_keras

    ctx = runtime.context()
    batch = runtime.global_batch_size(32)
    digits_data, x, y = _data()
    ds = runtime.with_auto_shard(tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=1).repeat())
    ds = ds.batch(batch)
    with strategy.scope():
        model = digits_data.dense_model(tf_keras)
    rates: list[float] = []
    if variant.startswith("fit"):
        marks: dict[str, float] = {}
        timer = tf_keras.callbacks.LambdaCallback(
            on_epoch_begin=lambda e, logs: marks.__setitem__("t0", time.perf_counter()),
            on_epoch_end=lambda e, logs: rates.append(steps / (time.perf_counter() - marks["t0"])),
        )
        if variant == "fit_plain":
            ctx.dirs.checkpoints.mkdir(parents=True, exist_ok=True)
            extra = [tf_keras.callbacks.BackupAndRestore(backup_dir=str(ctx.dirs.backup)),
                     tf_keras.callbacks.ModelCheckpoint(str(ctx.dirs.checkpoints / "ckpt-{epoch:03d}"),
                                                        save_weights_only=True)]
        else:
            extra = runtime.callbacks(batch_size=batch, tensorboard=False)
        model.fit(ds, epochs=epochs, steps_per_epoch=steps, verbose=0, callbacks=[timer, *extra])
    else:
        loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf_keras.losses.Reduction.NONE)

        def replica_step(xb, yb):  # type: ignore[no-untyped-def]
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb, training=True)), global_batch_size=batch)
            grads = tape.gradient(loss, model.trainable_variables)
            model.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        @tf.function
        def train_step(iterator):  # type: ignore[no-untyped-def]
            return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=next(iterator)),
                                   axis=None)

        iterator = iter(runtime.distribute(ds))
        guard = runtime.preemption_guard() if variant == "loop_guard" else None
        for _ in range(epochs):
            start = time.perf_counter()
            for _ in range(steps):
                loss = train_step(iterator)
                if guard is not None and guard.requested():
                    guard.exit("preempted")
            float(loss)
            rates.append(steps / (time.perf_counter() - start))
        if guard is not None and guard.at_end():
            guard.exit("preempted")
    print("RATES " + json.dumps(rates), flush=True)


def task_pss(variant: str, steps: int, epochs: int) -> None:
    from tfdist import runtime

    strategy = runtime.strategy()  # ps and workers serve here
    import tensorflow as tf
    import tf_keras

    batch = runtime.global_batch_size(32)
    digits_data, x, y = _data()

    def dataset_fn(batch_size, input_context):  # type: ignore[no-untyped-def]
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        return runtime.shard_for(ds, input_context).shuffle(2048).repeat().batch(batch_size)

    with strategy.scope():
        model = digits_data.dense_model(tf_keras)
        optimizer = tf_keras.optimizers.legacy.Adam(0.01)
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                            reduction=tf_keras.losses.Reduction.NONE)
    rates: list[float] = []
    if variant in ("pss_async", "pss_sync", "pss_backup"):
        from tfdist.runtime.sync_trainer import SyncTrainer

        mode = {"pss_async": {"mode": "async"}, "pss_sync": {"mode": "sync"},
                "pss_backup": {"mode": "backup", "replicas_to_aggregate": 1}}[variant]

        def loss_of(m, data):  # type: ignore[no-untyped-def]
            xb, yb = data
            return tf.reduce_mean(loss_fn(yb, m(xb, training=True)))

        with strategy.scope():  # SyncTrainer takes a tf_keras (not legacy) optimizer
            sgd = tf_keras.optimizers.SGD(0.05)
        trainer = SyncTrainer(strategy, model, sgd, loss_of, mode)
        iterator = trainer.per_worker_iterator(
            lambda wid: tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048).repeat().batch(batch // 2))
        for _ in range(epochs):
            start = time.perf_counter()
            trainer.run(iterator, steps)
            rates.append(steps / (time.perf_counter() - start))
    else:
        per_call = 10

        def replica_step(example):  # type: ignore[no-untyped-def]
            xb, yb = example
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb, training=True)), global_batch_size=batch)
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                          model.trainable_variables, strict=True))
            return loss

        if variant == "pss_loop":
            loop = runtime.Loop(dataset_fn, global_batch=batch)
            fn = loop.multi_step(replica_step, steps_per_call=per_call)
            for _ in range(epochs):
                loop.run(fn, steps // per_call)
                rates.append(steps // per_call * per_call / loop.seconds)
        else:
            coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
            iterator = iter(runtime.per_worker_dataset(coordinator, dataset_fn, batch, strategy))

            @tf.function
            def fn(it):  # type: ignore[no-untyped-def]
                total = tf.constant(0.0)
                for _ in tf.range(per_call):
                    out = strategy.run(replica_step, args=(next(it),))
                    total += strategy.reduce(tf.distribute.ReduceOp.MEAN, out, axis=None)
                return total / per_call

            for _ in range(epochs):
                start = time.perf_counter()
                values = [coordinator.schedule(fn, args=(iterator,)) for _ in range(steps // per_call)]
                coordinator.join()
                [v.fetch() for v in values]
                rates.append(steps // per_call * per_call / (time.perf_counter() - start))
    print("RATES " + json.dumps(rates), flush=True)


# ---------------------------------------------------------------- the driver


def run_variant(variant: str, steps: int, epochs: int, runs_dir: Path) -> float | None:
    """One job; the steady-state steps/s (median over epochs 2.. of each task, then tasks)."""
    pss = variant.startswith("pss")
    roles = ["--chief", "--workers", "2", "--ps", "1"] if pss else ["--workers", "2", "--strategy",
                                                                     "multi_worker_mirrored"]
    cmd = [*TFDIST, "run", "-q", "--json", "--runs-dir", str(runs_dir), *roles, "--name", variant.replace("_", "-"),
           "--env", "TF_CPP_MIN_LOG_LEVEL=2", "--", sys.executable, str(Path(__file__).resolve()),
           "--task", variant, "--steps", str(steps), "--epochs", str(epochs)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    try:
        run_dir = Path(json.loads(out.stdout)["run_dir"])
    except (ValueError, KeyError):
        print(f"{variant}: no summary: {out.stderr[-500:]}", file=sys.stderr)
        return None
    per_task = []
    for log in (run_dir / "logs").glob("*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("RATES "):
                rates = json.loads(line[6:])[1:]  # epoch 1 traces functions and warms up
                if rates:
                    per_task.append(statistics.median(rates))
    if out.returncode != 0 or not per_task:
        print(f"{variant}: failed (exit {out.returncode})", file=sys.stderr)
        for log in (run_dir / "logs").glob("[cw]*-0.log"):  # chief-0, or worker-0
            tail = log.read_text(errors="replace").splitlines()[-8:]
            print(f"  {log.name}: " + "\n    ".join(tail), file=sys.stderr)
        return None
    return statistics.median(per_task)


def summarize(raw: dict[str, list[float]]) -> dict[str, dict[str, float | None]]:
    rates = {v: statistics.median(r) if r else None for v, r in raw.items()}
    ratios = {}
    for a, b in RATIOS:
        pairs = [x / y for x, y in zip(raw.get(a, []), raw.get(b, []), strict=False) if y]
        if pairs:  # per round (the two ran minutes apart at most), then the median
            ratios[f"{a}/{b}"] = statistics.median(pairs)
    return {"steps_per_sec": rates, "ratios": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--pss", action="store_true", help="also the ParameterServerStrategy variants")
    parser.add_argument("--only-pss", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--task", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.task:
        (task_pss if args.task.startswith("pss") else task_mwms)(args.task, args.steps, args.epochs)
        return
    variants = ([] if args.only_pss else MWMS) + (PSS if args.pss or args.only_pss else [])
    raw: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="tfdist-overhead-") as tmp:
        for r in range(args.rounds):
            order = variants[r % len(variants):] + variants[: r % len(variants)]
            for v in order:
                rate = run_variant(v, args.steps, args.epochs, Path(tmp))
                if rate is not None:
                    raw[v].append(rate)
                print(f"round {r + 1}/{args.rounds} {v}: {rate if rate is None else round(rate, 1)} steps/s",
                      file=sys.stderr, flush=True)
    result = {"raw": raw, **summarize(raw)}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    for v, rate in result["steps_per_sec"].items():
        print(f"{v:12s} {rate:8.1f} steps/s (median of {len(raw[v])})" if rate else f"{v:12s}  -")
    for name, ratio in result["ratios"].items():
        print(f"{name:24s} {ratio:.3f}")


if __name__ == "__main__":
    main()
