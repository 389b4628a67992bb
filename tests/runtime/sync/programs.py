"""Chief (coordinator) programs for the sync integration tests.

Run as ``python programs.py SCENARIO`` with the chief's TF_CONFIG (see
tests/runtime/sync/cluster.py, LocalCluster.run_chief). Each prints one JSON line last.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

VOCAB, DIM, BATCH, SEQ = 64, 8, 8, 5


_STATE: dict = {}


def setup(partitioned: bool = False):
    import tensorflow as tf

    if "strategy" in _STATE:
        return tf, _STATE["strategy"]

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    kwargs = {}
    if partitioned:
        kwargs["variable_partitioner"] = tf.distribute.experimental.partitioners.FixedShardsPartitioner(2)
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver, **kwargs)
    _STATE["strategy"] = strategy
    _STATE["coordinator"] = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    return tf, strategy


def build_model(tf, seed: int = 0):
    import tf_keras as keras

    keras.utils.set_random_seed(seed)
    tokens = keras.Input((SEQ,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, DIM)(tokens)
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(16, activation="tanh")(x)
    out = keras.layers.Dense(3)(x)
    return keras.Model(tokens, out)


def worker_batch(tf, wid):
    seed = tf.stack([tf.cast(wid, tf.int64), tf.constant(7, tf.int64)])
    x = tf.random.stateless_uniform((BATCH, SEQ), seed, 0, VOCAB, dtype=tf.int32)
    y = tf.random.stateless_uniform((BATCH,), seed + 1, 0, 3, dtype=tf.int32)
    return x, y


def dataset_fn_for(tf, delays: dict[int, float] | None = None):
    def dataset_fn(wid):
        x, y = worker_batch(tf, wid)
        ds = tf.data.Dataset.from_tensors((x, y, wid)).repeat()
        if delays:
            from tensorflow.python.data.experimental.ops import testing

            us = tf.constant(0, tf.int64)
            for w, delay in delays.items():
                us = tf.where(tf.equal(wid, w), tf.constant(int(delay * 1e6), tf.int64), us)
            ds = ds.apply(testing.sleep(us))
        return ds

    return dataset_fn


def loss_fn(model, batch):
    import tensorflow as tf

    x, y, _ = batch
    logits = model(x, training=True)
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, logits, True))


def full_weights(model):
    """Each trainable variable's full value (shards concatenated, in order)."""
    import re

    import numpy as np

    from tfdist.runtime.sync.ps import flat_variables

    groups: dict[str, list] = {}
    for v in flat_variables(list(model.trainable_variables)):
        base = re.sub(r"/part_\d+", "", v.name)
        groups.setdefault(base, []).append(v)
    out = []
    for parts in groups.values():
        parts.sort(key=lambda v: int((re.findall(r"/part_(\d+)", v.name) or ["0"])[0]))
        out.append(np.concatenate([p.numpy() for p in parts], 0))
    return out


def trainer_for(update: dict, lr: float = 0.1, **kw):
    from tfdist.runtime.sync.trainer import SyncTrainer

    tf, strategy = setup()
    with strategy.scope():
        model = build_model(tf)
        opt = tf.keras.optimizers.SGD(lr)
    trainer = SyncTrainer(strategy, model, opt, loss_fn, update, coordinator=_STATE["coordinator"], **kw)
    return tf, model, trainer


def scenario_replay(update: dict, delays: dict | None, steps: int, steps_per_call: int) -> dict:
    """Each applied step must equal, in one process, the SGD step with the average of the
    gradients of exactly the batches the step says it applied, computed on the parameters
    of that step: a stale gradient (computed on older parameters) or a wrong count would
    move the weights elsewhere. Every worker's batch is always the same, so it can be
    recomputed."""
    import numpy as np

    lr = 0.5
    tf, model, trainer = trainer_for(update, lr, steps_per_call=steps_per_call)
    w0 = full_weights(model)
    devices = sorted({s.device for s in trainer.variables})
    it = trainer.per_worker_iterator(dataset_fn_for(tf, delays))
    stats = trainer.run(it, steps)
    w_final = full_weights(model)
    with tf.device("/job:chief/replica:0/task:0/device:CPU:0"):
        ref = build_model(tf, seed=1)
        ref.set_weights(w0)
        for st in stats.history:
            grads_sum = None
            for wid in st.workers:
                x, y = worker_batch(tf, wid)
                with tf.GradientTape() as tape:
                    loss = loss_fn(ref, (x, y, None))
                grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, ref.trainable_variables)]
                grads_sum = (
                    grads if grads_sum is None else [a + b for a, b in zip(grads_sum, grads, strict=False)]
                )
            for v, g in zip(ref.trainable_variables, grads_sum, strict=False):
                v.assign_sub(lr * g / len(st.workers))
        w_ref = [v.numpy() for v in ref.trainable_variables]
    max_err = max(float(np.max(np.abs(a - b))) for a, b in zip(w_final, w_ref, strict=False))
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(w_final, w0, strict=False))
    return {
        "max_err": max_err,
        "moved": moved,
        "counts": [st.count for st in stats.history],
        "workers": [st.workers for st in stats.history],
        "stats": stats.as_dict(),
        "devices": devices,
        "n_vars": len(trainer.variables),
        "sparse": sorted(trainer._sparse),
    }


def scenario_staleness(max_staleness: int) -> dict:
    """Stale mode, K = 1; worker 1 is slow: its gradients arrive several steps late."""
    tf, _, trainer = trainer_for({"mode": "stale", "replicas_to_aggregate": 1, "max_staleness": max_staleness})
    # Worker 0 takes 0.08 s a batch, so 40 steps last at least 3.2 s whatever the machine's
    # speed: worker 1 (0.6 s a batch) finishes about five gradients, each ~7 steps late.
    it = trainer.per_worker_iterator(dataset_fn_for(tf, {0: 0.08, 1: 0.6}))
    stats = trainer.run(it, 40)
    per_worker: dict[int, int] = {}
    for st in stats.history:
        for wid in st.workers:
            per_worker[wid] = per_worker.get(wid, 0) + 1
    return {"stats": stats.as_dict(), "per_worker": per_worker}


def scenario_update(update: dict, delays: dict, steps: int = 20) -> dict:
    """Any update mode; per-step counts."""
    tf, _, trainer = trainer_for(update)
    it = trainer.per_worker_iterator(dataset_fn_for(tf, delays))
    stats = trainer.run(it, steps)
    return {
        "stats": stats.as_dict(),
        "counts": [st.count for st in stats.history],
        "tokens": trainer.config.tokens,
    }


def scenario_kill() -> dict:
    """Backup K = N-1: SIGKILL worker 1 at step 5; training must go on."""
    tf, _, trainer = trainer_for({"mode": "backup"}, steps_per_call=1)
    it = trainer.per_worker_iterator(dataset_fn_for(tf))
    victim = int(os.environ["VICTIM_PGID"])
    times: list[float] = []

    def callback(tr, st):
        times.append(time.monotonic())
        if st.step == 5:
            os.killpg(victim, signal.SIGKILL)
            print("KILLED", flush=True)
        return False

    stats = trainer.run(it, 40, callback, join=False)
    gap_after_kill = max(b - a for a, b in zip(times[4:], times[5:], strict=False))
    return {
        "steps": stats.steps,
        "k": trainer.config.replicas_to_aggregate,
        "max_gap_after_kill": gap_after_kill,
    }


def scenario_keras() -> dict:
    """The thin Keras loop: a compiled model, sync mode, loss goes down."""
    import tf_keras as keras

    from tfdist.runtime.sync.keras import fit

    tf, strategy = setup()
    with strategy.scope():
        model = build_model(tf)
        model.compile(
            optimizer=keras.optimizers.SGD(0.5),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )

    def dataset_fn(wid):
        x, y = worker_batch(tf, wid)
        return tf.data.Dataset.from_tensors((x, y)).repeat()

    out = fit(
        model,
        dataset_fn,
        30,
        update={"mode": "sync"},
        strategy=strategy,
        coordinator=_STATE["coordinator"],
        log_every=5,
    )
    out.pop("trainer")
    return out


def scenario_worker_error() -> dict:
    """Worker 0's loss raises a non-retryable error at its first step: ``run`` must raise
    that error, not wait for gradients that never come. Run in a thread with a bound, so a
    chief that hangs reports it instead of hanging (the scenarios after it then show whether
    the coordinator still works: on the one-ps cluster the kill runs next)."""
    import threading

    import tensorflow as tf

    def failing_loss(model, batch):
        _, _, wid = batch
        check = tf.debugging.assert_none_equal(
            wid, tf.constant(0, wid.dtype), message="tfdist-test-worker-error"
        )
        with tf.control_dependencies([check]):
            return loss_fn(model, batch)

    from tfdist.runtime.sync.trainer import SyncTrainer

    _, strategy = setup()
    with strategy.scope():
        model = build_model(tf)
        opt = tf.keras.optimizers.SGD(0.1)
    trainer = SyncTrainer(
        strategy, model, opt, failing_loss, {"mode": "sync"}, coordinator=_STATE["coordinator"]
    )
    it = trainer.per_worker_iterator(dataset_fn_for(tf))
    out: dict = {"raised": None}

    def run():
        try:
            trainer.run(it, 20)
        except Exception as e:  # noqa: BLE001 - reported to the test
            out["raised"] = f"{type(e).__name__}: {e}"

    t0 = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(120)
    out["hung"] = thread.is_alive()
    out["to_raise"] = time.monotonic() - t0
    if not out["hung"]:  # nothing is left running: the coordinator is idle
        out["idle"] = trainer.coordinator.done()
        # after the failure: finish() still ends (nothing to wait for), another run refuses
        done: dict = {}
        thread = threading.Thread(target=lambda: done.update(stats=trainer.finish()), daemon=True)
        thread.start()
        thread.join(60)
        out["finish_hung"] = thread.is_alive()
        out["finish_dropped"] = done["stats"].dropped if "stats" in done else None
        try:
            trainer.run(it, 1)
            out["rerun"] = None
        except RuntimeError as e:
            out["rerun"] = str(e)
    return out


def run_scenario(name: str) -> dict:
    if name == "equality":  # K = N, several steps per aggregator call
        return scenario_replay({"mode": "sync"}, None, 6, 3)
    if name == "partitioned":
        return scenario_replay({"mode": "sync"}, None, 3, 1)
    if name == "backup_replay":  # K = 1 of 2, worker 1 slow: its late gradients dropped
        return scenario_replay({"mode": "backup", "replicas_to_aggregate": 1}, {0: 0.05, 1: 0.4}, 30, 4)
    if name.startswith("bounded:"):
        return scenario_staleness(int(name.split(":")[1]))
    if name == "kill":
        return scenario_kill()
    if name == "timeout":
        update = {"mode": "timeout", "timeout_seconds": 0.2, "min_replicas": 1}
        return scenario_update(update, {0: 0.15, 1: 2.0})
    if name == "k_gt_n":
        return scenario_update({"mode": "backup", "replicas_to_aggregate": 4}, {})
    if name == "keras":
        return scenario_keras()
    if name == "worker_error":  # bounded: a chief that hangs here goes on with its result
        return scenario_worker_error()
    raise SystemExit(f"unknown scenario {name}")


def main() -> None:
    import faulthandler

    faulthandler.dump_traceback_later(float(os.environ.get("TFDIST_TEST_DUMP_AFTER", "150")))
    if sys.argv[1] == "partitioned":
        setup(partitioned=True)
    out = {}
    for name in sys.argv[1:]:
        t0 = time.monotonic()
        out[name] = run_scenario(name)
        out[name]["seconds"] = time.monotonic() - t0
        print(f"SCENARIO {name} done in {out[name]['seconds']:.1f}s", file=sys.stderr, flush=True)
    print(json.dumps(out), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
