"""What tfdist.runtime costs per training step (issue 13): steps/s with and without it.

MultiWorkerMirrored, 2 workers, the digits and a small dense model (batch 32 per replica).
The machine is shared and noisy, so each comparison alternates inside one job: the same
processes train ``--steps`` steps with A, then with B (then B, A in the next round, and
so on), each timed from inside (a callback first in the list, or around the custom
loop's steps), and a round's ratio compares two neighbours in time. Pairs:

- ``fit_plain`` / ``fit_runtime``: ``fit`` (one epoch per call) with tf_keras
  BackupAndRestore and a ModelCheckpoint per epoch, vs ``runtime.callbacks()`` (the same
  two, preemption-safe, plus step-level progress reports once a second);
- ``fit_plain`` / ``fit_allreduce``: the design this replaced, for scale: plain, plus a
  callback doing a one-number all-reduce after every batch (and reading it);
- ``loop_plain`` / ``loop_guard``: a custom loop without / with ``guard.requested()``
  after every step (the guard exists in both: its watcher thread only waits).

With ``--pss``, ParameterServerStrategy (chief + 2 workers + 1 ps): ``runtime.Loop`` vs a
plain ClusterCoordinator loop (10 steps per scheduled call, ``pss_loop`` / ``pss_plain``),
and ``runtime.sync.trainer.SyncTrainer`` (one worker loop per worker) in ``async``, ``sync``
(K = N = 2) and ``backup`` (K = 1 of 2) modes.

    python benchmarks/runtime_overhead.py [--rounds 6] [--pss] [--json]

Printed: the median steps/s of each variant and the median over rounds of each pair's
ratio. A task process runs this file with ``--task mwms|pss``.
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
PAIRS = {"mwms": [("fit_plain", "fit_runtime"), ("fit_plain", "fit_allreduce"), ("loop_plain", "loop_guard")],
         "pss": [("pss_plain", "pss_loop"), ("pss_async", "pss_sync"), ("pss_async", "pss_backup")]}


def _digits():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "examples" / "digits"))
    import digits_data

    x, y, _, _ = digits_data.load()
    return digits_data, x, y


def _alternate(rounds: int, pairs: list[tuple[str, str]], run: dict) -> dict[str, list[float]]:
    """Each round runs every pair A, B (B, A in odd rounds); ``run[v]()`` -> steps/s.
    Returns each variant's rates and, under ``B/A``, each round's ratio of neighbours."""
    rates: dict[str, list[float]] = {}
    for r in range(rounds):
        for a, b in pairs:
            got = {v: run[v]() for v in ((a, b) if r % 2 == 0 else (b, a))}
            for v, rate in got.items():
                rates.setdefault(v, []).append(rate)
            rates.setdefault(f"{b}/{a}", []).append(got[b] / got[a])
    return rates


# ---------------------------------------------------------------- inside a task


def task_mwms(rounds: int, steps: int) -> dict[str, list[float]]:
    from tfdist import runtime

    strategy = runtime.strategy()
    import tensorflow as tf
    import tf_keras

    ctx = runtime.context()
    batch = runtime.global_batch_size(32)
    digits_data, x, y = _digits()
    ds = runtime.with_auto_shard(tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=1).repeat())
    ds = ds.batch(batch)
    with strategy.scope():
        model = digits_data.dense_model(tf_keras)
    ctx.dirs.checkpoints.mkdir(parents=True, exist_ok=True)
    marks: dict[str, float] = {}
    timer = tf_keras.callbacks.LambdaCallback(  # first in the list: times the batches only
        on_epoch_begin=lambda e, logs: marks.__setitem__("t0", time.perf_counter()),
        on_epoch_end=lambda e, logs: marks.__setitem__("rate", steps / (time.perf_counter() - marks["t0"])),
    )

    def fit(callbacks: list) -> float:  # type: ignore[type-arg]
        model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[timer, *callbacks])
        return marks["rate"]

    def plain() -> list:  # type: ignore[type-arg]
        return [tf_keras.callbacks.BackupAndRestore(backup_dir=str(ctx.dirs.backup)),
                tf_keras.callbacks.ModelCheckpoint(str(ctx.dirs.checkpoints / "ckpt-{epoch:03d}"),
                                                   save_weights_only=True)]

    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                            reduction=tf_keras.losses.Reduction.NONE)

    def replica_step(xb, yb):  # type: ignore[no-untyped-def]
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb, training=True)), global_batch_size=batch)
        grads = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step(iterator):  # type: ignore[no-untyped-def]
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=next(iterator)), axis=None)

    iterator = iter(runtime.distribute(ds))
    guard = runtime.preemption_guard()

    def loop(with_guard: bool) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            loss = train_step(iterator)
            if with_guard and guard.requested():
                guard.exit("preempted")
        float(loss)
        return steps / (time.perf_counter() - start)

    from tfdist.runtime.agreement import any_worker_fn

    agree = any_worker_fn(strategy)
    allreduce = tf_keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: agree(False))

    fit(plain()), fit(runtime.callbacks(batch_size=batch, tensorboard=False)), loop(False)  # warm up
    rates = _alternate(rounds, PAIRS["mwms"], {
        "fit_plain": lambda: fit(plain()),
        "fit_runtime": lambda: fit(runtime.callbacks(batch_size=batch, tensorboard=False)),
        "fit_allreduce": lambda: fit([*plain(), allreduce]),
        "loop_plain": lambda: loop(False),
        "loop_guard": lambda: loop(True),
    })
    if guard.at_end():
        guard.exit("preempted")
    return rates


def task_pss(rounds: int, steps: int) -> dict[str, list[float]]:
    from tfdist import runtime

    strategy = runtime.strategy()  # ps and workers serve here
    import tensorflow as tf
    import tf_keras

    from tfdist.runtime.sync.trainer import SyncTrainer

    batch = runtime.global_batch_size(32)
    digits_data, x, y = _digits()
    per_call = 10

    def dataset_fn(batch_size, input_context):  # type: ignore[no-untyped-def]
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        return runtime.shard_for(ds, input_context).shuffle(2048).repeat().batch(batch_size)

    with strategy.scope():
        model = digits_data.dense_model(tf_keras)
        optimizer = tf_keras.optimizers.legacy.Adam(0.01)
        sgd = tf_keras.optimizers.SGD(0.05)  # SyncTrainer takes a tf_keras (not legacy) optimizer
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                            reduction=tf_keras.losses.Reduction.NONE)

    def replica_step(example):  # type: ignore[no-untyped-def]
        xb, yb = example
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb, training=True)), global_batch_size=batch)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables, strict=True))
        return loss

    loop = runtime.Loop(dataset_fn, global_batch=batch)
    loop_fn = loop.multi_step(replica_step, steps_per_call=per_call)
    coordinator = loop.coordinator
    iterator = iter(runtime.per_worker_dataset(coordinator, dataset_fn, batch, strategy))

    @tf.function
    def plain_fn(it):  # type: ignore[no-untyped-def]
        total = tf.constant(0.0)
        for _ in tf.range(per_call):
            out = strategy.run(replica_step, args=(next(it),))
            total += strategy.reduce(tf.distribute.ReduceOp.MEAN, out, axis=None)
        return total / per_call

    def with_loop() -> float:
        loop.run(loop_fn, steps // per_call)
        return steps // per_call * per_call / loop.seconds

    def plain() -> float:
        start = time.perf_counter()
        values = [coordinator.schedule(plain_fn, args=(iterator,)) for _ in range(steps // per_call)]
        coordinator.join()
        [v.fetch() for v in values]
        return steps // per_call * per_call / (time.perf_counter() - start)

    def loss_of(m, data):  # type: ignore[no-untyped-def]
        xb, yb = data
        return tf.reduce_mean(loss_fn(yb, m(xb, training=True)))

    trainers = {mode: SyncTrainer(strategy, model, sgd, loss_of, {"mode": mode, "replicas_to_aggregate": k},
                                  coordinator=coordinator)
                for mode, k in (("async", None), ("sync", 2), ("backup", 1))}
    iterators = {m: t.per_worker_iterator(
        lambda wid: tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048).repeat().batch(batch // 2))
        for m, t in trainers.items()}

    def sync_mode(mode: str) -> float:
        start = time.perf_counter()
        trainers[mode].run(iterators[mode], steps)
        return steps / (time.perf_counter() - start)

    plain(), with_loop(), [sync_mode(m) for m in trainers]  # warm up
    return _alternate(rounds, PAIRS["pss"], {
        "pss_plain": plain, "pss_loop": with_loop,
        "pss_async": lambda: sync_mode("async"), "pss_sync": lambda: sync_mode("sync"),
        "pss_backup": lambda: sync_mode("backup"),
    })


# ---------------------------------------------------------------- the driver


def run_job(family: str, rounds: int, steps: int, runs_dir: Path) -> dict[str, list[float]]:
    """One job; each variant's steps/s per round, from worker-0 (MWMS) or the chief (PSS)."""
    roles = (["--chief", "--workers", "2", "--ps", "1"] if family == "pss"
             else ["--workers", "2", "--strategy", "multi_worker_mirrored"])
    cmd = [*TFDIST, "run", "-q", "--json", "--runs-dir", str(runs_dir), *roles, "--name", f"overhead-{family}",
           "--env", "TF_CPP_MIN_LOG_LEVEL=2", "--", sys.executable, str(Path(__file__).resolve()),
           "--task", family, "--rounds", str(rounds), "--steps", str(steps)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    run_dir = Path(json.loads(out.stdout)["run_dir"])
    log = run_dir / "logs" / ("chief-0.log" if family == "pss" else "worker-0.log")
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("RATES "):
            return dict(json.loads(line[6:]))
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    raise SystemExit(f"{family}: no rates (exit {out.returncode}); {log.name} ends:\n{tail}")


def summarize(rates: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {"steps_per_sec": {v: statistics.median(r) for v, r in rates.items() if "/" not in v},
            "ratios": {v: statistics.median(r) for v, r in rates.items() if "/" in v}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=150, help="steps per measurement")
    parser.add_argument("--pss", action="store_true", help="also the ParameterServerStrategy pairs")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--task", choices=["mwms", "pss"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.task:
        rates = (task_pss if args.task == "pss" else task_mwms)(args.rounds, args.steps)
        print("RATES " + json.dumps(rates), flush=True)
        return
    rates: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="tfdist-overhead-") as tmp:
        for family in ["mwms", "pss"] if args.pss else ["mwms"]:
            rates.update(run_job(family, args.rounds, args.steps, Path(tmp)))
    result = {"rounds": args.rounds, "steps": args.steps, "raw": rates, **summarize(rates)}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    for v, rate in result["steps_per_sec"].items():
        print(f"{v:12s} {rate:8.1f} steps/s (median of {len(rates[v])})")
    print("ratios (median over rounds of neighbours in time):")
    for name, ratio in result["ratios"].items():
        print(f"{name:24s} {ratio:.3f}")


if __name__ == "__main__":
    main()
