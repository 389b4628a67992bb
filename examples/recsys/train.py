"""Train the click-through model until a target AUC or a step budget, under any strategy.

One script for every job in this directory; the job file picks the strategy and
``--loop`` how training is driven:

* ``fit``: Keras ``model.fit`` on a ``runtime.dataset_creator`` (MultiWorkerMirrored, and
  ParameterServer with the chief coordinating);
* ``coordinator``: a custom loop with ClusterCoordinator (``runtime.Loop``, ParameterServer);
* ``sync``: ``tfdist.runtime.sync.keras.fit``, whose update mode (``async``, ``sync``,
  ``backup``...) comes from the job's ``options.update`` (ParameterServer).

The training files: the JSON list in ``TFDIST_DATA_TRAIN`` when tfdist's job file gives
one, else ``--data`` (a glob). Each input pipeline reads its own files
(``runtime.FileShards``) and says which. The held-out ``eval`` file and ``manifest.json``
are read from the files' directory (or ``--eval`` / ``--manifest``).

Every ``--eval-every`` updates the chief scores the held-out rows and reports
``auc``, ``seconds`` (wall time since training started, evaluations included) and
``target`` through ``runtime.report``; it stops once AUC >= ``--target`` x the attainable
AUC of the manifest (or ``--target-auc``), or after ``--max-steps`` updates. The final
report carries ``reached``, ``time_to_target_s`` and ``final_auc``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from pathlib import Path

from tfdist import runtime


def input_files(pattern: str | None) -> list[str]:
    """This job's training files: TFDIST_DATA_TRAIN (a JSON list) or the --data glob."""
    raw = os.environ.get("TFDIST_DATA_TRAIN")
    if raw:
        files = json.loads(raw)
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            sys.exit("train.py: error: TFDIST_DATA_TRAIN must be a JSON list of file names")
        return files
    if not pattern:
        sys.exit("train.py: error: give --data GLOB (or run it from a job whose data section sets TFDIST_DATA_TRAIN)")
    files = sorted(glob.glob(pattern))
    if not files:
        sys.exit(f"train.py: error: --data {pattern!r} matches no file")
    return files


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="glob of the training files (when TFDIST_DATA_TRAIN is not set)")
    p.add_argument("--eval", help="held-out file (default: eval.tfrecord[.gz] beside the training files)")
    p.add_argument("--manifest", help="the generator's manifest.json (default: beside the training files)")
    p.add_argument("--loop", choices=("fit", "coordinator", "sync"), default="fit")
    p.add_argument("--batch", type=int, default=256, help="examples per worker per step")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--dim", type=int, default=8, help="embedding width")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--table-rows", type=int, default=0, help="pad the embedding table to this many rows")
    p.add_argument("--target", type=float, default=0.9, help="fraction of the attainable AUC to stop at")
    p.add_argument("--target-auc", type=float, help="absolute AUC to stop at (instead of --target)")
    p.add_argument("--max-steps", type=int, default=2000, help="budget of updates")
    p.add_argument("--eval-every", type=int, default=50, help="updates between evaluations (a multiple of 10)")
    p.add_argument("--eval-rows", type=int, default=8000)
    p.add_argument("--seed", type=int, default=0, help="initial weights")
    args = p.parse_args(argv)
    for name in ("batch", "dim", "hidden", "max_steps", "eval_every", "eval_rows"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.eval_every % 10:
        p.error("--eval-every must be a multiple of 10 (steps run 10 per call)")
    if not 0 < args.target <= 1:
        p.error("--target must be in (0, 1]")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    files = input_files(args.data)
    strategy = runtime.strategy()  # ps and worker tasks of ParameterServerStrategy serve here
    import numpy as np
    import tensorflow as tf

    import model as recsys_model
    from generate import auc

    here = Path(files[0]).parent
    manifest = json.loads(Path(args.manifest or here / "manifest.json").read_text())
    compression = manifest.get("compression", "")
    eval_file = args.eval or str(here / manifest["eval_file"]["file"])
    target = args.target_auc if args.target_auc is not None else args.target * manifest["attainable_auc"]
    ctx = runtime.context()
    mwms = ctx.strategy == "multi_worker_mirrored"
    tf.keras.utils.set_random_seed(args.seed)

    with strategy.scope():
        model = recsys_model.build(manifest["vocab_sizes"], dim=args.dim, hidden=args.hidden, table_rows=args.table_rows)
        recsys_model.compile_model(model, args.lr, legacy=ctx.strategy == "parameter_server" and args.loop != "sync")
    if ctx.is_chief:
        shards = recsys_model.table_shards(model)
        rows = sum(s[0] for s in shards)
        print(f"chief: table {rows:,} x {args.dim + 1} in {len(shards)} shard(s) {shards}", flush=True)

    shards_of_files = runtime.FileShards(files, compression=compression)

    def batches(records):  # type: ignore[no-untyped-def]
        return (
            records.shuffle(4096, seed=args.seed)
            .repeat()
            .batch(args.batch, drop_remainder=True)
            .map(recsys_model.parse, num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(2)
        )

    # the held-out rows, in memory on every task that evaluates
    eval_ds = tf.data.TFRecordDataset(eval_file, compression_type=compression).take(args.eval_rows)
    x_eval, y_eval = next(iter(eval_ds.batch(args.eval_rows).map(recsys_model.parse)))
    y_eval = y_eval.numpy().ravel()

    def score() -> float:
        logits = [model(
            {"num": x_eval["num"][i : i + 2048], "cat": x_eval["cat"][i : i + 2048]}, training=False
        ).numpy() for i in range(0, len(y_eval), 2048)]
        return auc(y_eval, np.concatenate(logits).ravel())


    @tf.function
    def agree(flag):  # type: ignore[no-untyped-def]
        """Under MultiWorkerMirrored every worker must stop at the same step: the chief's
        decision, summed over the workers (the others add 0)."""
        return strategy.reduce("SUM", strategy.run(lambda: tf.identity(flag)), axis=None)

    state = {"start": 0.0, "reached_at": None, "auc": 0.0, "steps": 0, "evals": 0.0}

    def evaluate(step: int) -> bool:
        """Score, report, and say whether to stop (on the chief; every MWMS worker agrees)."""
        stop = False
        if ctx.is_chief:
            t = time.monotonic()
            value = score()
            state["evals"] += time.monotonic() - t
            seconds = time.monotonic() - state["start"]
            state["auc"], state["steps"] = value, step
            if value >= target and state["reached_at"] is None:
                state["reached_at"] = seconds
            stop = value >= target or step >= args.max_steps
            runtime.report(step=step, metrics={"auc": round(value, 5)}, seconds=round(seconds, 3),
                           target=round(target, 5), final=False)
        if mwms:
            stop = float(agree(tf.constant(1.0 if stop else 0.0))) > 0
        return stop

    calls = args.eval_every // 10
    state["start"] = time.monotonic()
    if args.loop == "fit":

        class Evaluate(tf.keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
                if evaluate((epoch + 1) * args.eval_every):
                    self.model.stop_training = True

        creator = runtime.dataset_creator(lambda batch, ic: batches(shards_of_files.dataset(ic)),
                                          global_batch=runtime.global_batch_size(args.batch))
        model.fit(creator, epochs=-(-args.max_steps // args.eval_every), steps_per_epoch=args.eval_every,
                  callbacks=[Evaluate()], verbose=0)
    elif args.loop == "coordinator":
        loss_fn = tf.keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")
        optimizer = model.optimizer
        global_batch = runtime.global_batch_size(args.batch)

        def replica_step(batch):  # type: ignore[no-untyped-def]
            x, y = batch
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)), global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        loop = runtime.Loop(lambda batch, ic: batches(shards_of_files.dataset(ic)), global_batch=global_batch)
        step_fn = loop.multi_step(replica_step, steps_per_call=10)
        loop.begin(0)
        state["start"] = time.monotonic()
        while True:
            loop.run(step_fn, calls)
            if evaluate(loop.steps_done):
                break
    else:
        from tfdist.runtime.sync.keras import fit

        def per_worker(worker_id):  # type: ignore[no-untyped-def]
            return batches(shards_of_files.dataset(worker_id=worker_id))

        marks = {"next": args.eval_every}

        def callback(trainer, _stats):  # type: ignore[no-untyped-def]
            if trainer.stats.steps < marks["next"]:
                return False
            marks["next"] = trainer.stats.steps + args.eval_every
            return evaluate(trainer.stats.steps)

        result = fit(model, per_worker, args.max_steps, callback=callback)
        trainer = result.pop("trainer")
        cfg = trainer.config
        print(json.dumps({"mode": cfg.mode, "replicas_to_aggregate": cfg.replicas_to_aggregate,
                          **{k: result[k] for k in ("steps", "attempts", "taken", "dropped")}}), flush=True)
        if trainer.stats.steps > state["steps"]:  # score the last steps too
            evaluate(trainer.stats.steps)

    if ctx.is_chief:
        reached = state["reached_at"] is not None
        runtime.report(
            step=state["steps"],
            metrics={"auc": round(state["auc"], 5)},
            final_auc=round(state["auc"], 5),
            reached=reached,
            time_to_target_s=round(state["reached_at"], 3) if reached else None,
            seconds=round(time.monotonic() - state["start"], 3),
            eval_seconds=round(state["evals"], 3),
            target=round(target, 5),
            final=True,
        )


if __name__ == "__main__":
    main()
