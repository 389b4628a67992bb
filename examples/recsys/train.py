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
are ``--eval`` / ``--manifest``, else among the files of the job's ``heldout`` input
(``TFDIST_DATA_HELDOUT``: ``shard: none``, every task gets them), else beside the training
files.

With ``--save`` the model is checkpointed at every evaluation into the job's checkpoint
directory (``runtime.context().dirs``: under the job's ``model_dir`` output when it has
one, so the checkpoints are kept at its URI, e.g. in HDFS), a restarted task resumes from
the latest one, and the trained model is saved at the end (``runtime.save_model``).

Every ``--eval-every`` updates the chief scores the held-out rows and reports
``auc``, ``seconds`` (wall time since training started, evaluations included) and
``target`` through ``runtime.report``; it stops once AUC >= ``--target`` x the attainable
AUC of the manifest (or ``--target-auc``), or after ``--max-steps`` updates or
``--max-seconds``. The final
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

#: when this process started (about): the phases below are measured from here
STARTED = time.monotonic()
#: seconds from STARTED to each phase's end, and the training phases the chief measured;
#: the final report carries them as ``phases`` (where the time to target goes)
PHASES: dict[str, object] = {}


def input_files(pattern: str | None) -> list[str]:
    """This job's training files: TFDIST_DATA_TRAIN (a JSON list) or the --data glob."""
    raw = os.environ.get("TFDIST_DATA_TRAIN")
    if raw:
        try:
            files = json.loads(raw)
        except ValueError:
            files = None
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            sys.exit("train.py: error: TFDIST_DATA_TRAIN must be a JSON list of file names")
        return files
    if not pattern:
        sys.exit("train.py: error: give --data GLOB (or a job whose data section sets TFDIST_DATA_TRAIN)")
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
    p.add_argument("--max-seconds", type=float, default=0, help="budget of training seconds (0: none)")
    p.add_argument(
        "--eval-every", type=int, default=50, help="updates between evaluations (a multiple of 10)"
    )
    p.add_argument("--eval-rows", type=int, default=8000)
    p.add_argument("--seed", type=int, default=0, help="initial weights")
    p.add_argument("--save", action="store_true",
                   help="checkpoint at every evaluation, resume from the latest checkpoint, "
                   "save the model at the end")
    args = p.parse_args(argv)
    for name in ("batch", "dim", "hidden", "max_steps", "eval_every", "eval_rows"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.eval_every % 10:
        p.error("--eval-every must be a multiple of 10 (steps run 10 per call)")
    if not 0 < args.target <= 1:
        p.error("--target must be in (0, 1]")
    if args.save and args.loop == "sync":
        p.error("--save works with --loop fit or coordinator")
    return args


def heldout_files() -> dict[str, str]:
    """The job's ``heldout`` input (manifest.json, eval.tfrecord) by file name; {} without one."""
    if "TFDIST_DATA_HELDOUT" not in os.environ:
        return {}
    return {Path(f).name: f for f in runtime.input_files("heldout")}


class Evaluator:
    """Scores the held-out rows every ``--eval-every`` updates, reports, decides when to stop.

    Only the chief scores; under MultiWorkerMirrored every worker must stop at the same
    step, so the chief's decision is summed over the workers (the others add 0).
    """

    def __init__(self, args: argparse.Namespace, model, strategy, x_eval, y_eval, target: float, mwms: bool,  # type: ignore[no-untyped-def]
                 saver=None):
        import tensorflow as tf

        self.args, self.model, self.x, self.y, self.target = args, model, x_eval, y_eval, target
        self.strategy, self.saver = strategy, saver
        self.chief = runtime.context().is_chief
        self.mwms = mwms
        self.start = time.monotonic()
        self.reached_at: float | None = None
        self.auc, self.steps, self.eval_seconds = 0.0, 0, 0.0
        self.updates: list[tuple[float, int]] = []  # (time, updates applied so far)
        self.evals: list[tuple[float, float]] = []  # (start, end) of each evaluation

        @tf.function
        def agree(flag):  # type: ignore[no-untyped-def]
            return strategy.reduce("SUM", strategy.run(lambda: tf.identity(flag)), axis=None)

        self._agree = agree

    def score(self) -> float:
        import numpy as np
        from generate import auc

        n = len(self.y)
        logits = [
            self.model({k: v[i : i + 2048] for k, v in self.x.items()}, training=False).numpy()
            for i in range(0, n, 2048)
        ]
        return auc(self.y, np.concatenate(logits).ravel())

    def __call__(self, step: int) -> bool:
        """Score (on the chief), report, and say whether to stop."""
        import tensorflow as tf

        stop = False
        if self.chief:
            t = time.monotonic()
            self.auc, self.steps = self.score(), step
            self.eval_seconds += time.monotonic() - t
            self.evals.append((t, time.monotonic()))
            seconds = time.monotonic() - self.start
            if self.auc >= self.target and self.reached_at is None:
                self.reached_at = seconds
            over = step >= self.args.max_steps or 0 < self.args.max_seconds <= seconds
            stop = self.auc >= self.target or over
            runtime.report(
                step=step,
                metrics={"auc": round(self.auc, 5)},
                seconds=round(seconds, 3),
                target=round(self.target, 5),
                final=False,
            )
        if self.mwms:
            stop = float(self._agree(tf.constant(1.0 if stop else 0.0))) > 0
        if self.saver is not None:  # every MWMS worker takes part; the chief's is kept
            checkpoint, step_var = self.saver
            step_var.assign(step)
            saved = runtime.save_checkpoint(checkpoint, runtime.context().dirs.checkpoints, self.strategy,
                                            number=step, step=step)
            if saved:
                print(f"{runtime.context().task}: saved {saved} at step {step}", flush=True)
        return stop

    def updated(self, step: int) -> None:
        """An update was applied (``step`` so far): the first one's time and the steady rate."""
        self.updates.append((time.monotonic(), step))

    def training_phases(self) -> dict[str, object]:
        """``first_10_updates_s``: from the start of training to the 10th update applied
        (building the loop, tracing, the first collective or ps round trips, 10 updates:
        the sync loop applies 10 per call, so the 10th is the first both loops report);
        ``update_ms``: the mean time of an update after it, evaluations taken out;
        ``eval_s``: the mean time of one evaluation (on the chief)."""
        out: dict[str, object] = {"evals": len(self.evals)}
        if self.evals:
            out["eval_s"] = round(self.eval_seconds / len(self.evals), 3)
        after = [(t, s) for t, s in self.updates if s >= 10]
        if after:
            (t0, s0), (t1, s1) = after[0], after[-1]
            out["first_10_updates_s"] = round(t0 - self.start, 3)
            if s1 > s0:
                inside = sum(min(b, t1) - max(a, t0) for a, b in self.evals if b > t0 and a < t1)
                out["update_ms"] = round(1000 * (t1 - t0 - inside) / (s1 - s0), 2)
                out["updates_timed"] = s1 - s0
        return out

    def final_report(self) -> None:
        if not self.chief:
            return
        PHASES.update(self.training_phases())
        print(f"train.py phases: {json.dumps(PHASES)}", flush=True)
        reached = self.reached_at is not None
        runtime.report(
            step=self.steps,
            metrics={"auc": round(self.auc, 5)},
            final_auc=round(self.auc, 5),
            reached=reached,
            time_to_target_s=round(self.reached_at, 3) if self.reached_at is not None else None,
            seconds=round(time.monotonic() - self.start, 3),
            eval_seconds=round(self.eval_seconds, 3),
            target=round(self.target, 5),
            phases=PHASES,
            final=True,
        )


def train_fit(args, model, batches, evaluate, start: int = 0) -> None:  # type: ignore[no-untyped-def]
    """Keras fit; an "epoch" is --eval-every steps, evaluated at its end; ``start``: the
    step a restored checkpoint was saved at."""
    import tensorflow as tf

    class Evaluate(tf.keras.callbacks.Callback):
        def __init__(self):  # type: ignore[no-untyped-def]
            super().__init__()
            self._supports_tf_logs = True  # no per-step conversion of the logs to numpy
            self.steps_done = start

        def on_train_batch_end(self, batch, logs=None):  # type: ignore[no-untyped-def]
            evaluate.updated(self.steps_done + batch + 1)

        def on_epoch_begin(self, epoch, logs=None):  # type: ignore[no-untyped-def]
            self.steps_done = epoch * args.eval_every

        def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
            if evaluate((epoch + 1) * args.eval_every):
                self.model.stop_training = True

    creator = runtime.dataset_creator(batches, global_batch=runtime.global_batch_size(args.batch))
    epochs = -(-args.max_steps // args.eval_every)
    model.fit(creator, epochs=epochs, initial_epoch=start // args.eval_every, steps_per_epoch=args.eval_every,
              callbacks=[Evaluate()], verbose=0)


def train_coordinator(args, model, batches, evaluate, start: int = 0) -> None:  # type: ignore[no-untyped-def]
    """A custom loop: ClusterCoordinator schedules 10-step functions (runtime.Loop)."""
    import tensorflow as tf

    loss_fn = tf.keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")
    optimizer = model.optimizer
    global_batch = runtime.global_batch_size(args.batch)

    def replica_step(batch):  # type: ignore[no-untyped-def]
        x, y = batch
        with tf.GradientTape() as tape:
            per_example = loss_fn(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    loop = runtime.Loop(batches, global_batch=global_batch)
    step_fn = loop.multi_step(replica_step, steps_per_call=10)
    loop.begin(start)
    while True:
        loop.run(step_fn, args.eval_every // 10)
        if evaluate(loop.steps_done):
            break


def train_sync(args, model, batches, evaluate, start: int = 0) -> None:  # type: ignore[no-untyped-def]
    """tfdist.runtime.sync: the update mode is the job's options.update."""
    from tfdist.runtime.sync.keras import fit

    marks = {"next": args.eval_every, "stop": False}

    def callback(trainer, _stats):  # type: ignore[no-untyped-def]
        # called for each of the 10 updates of a call: once told to stop, the rest of the
        # call must not evaluate again (past --max-seconds each one would)
        evaluate.updated(trainer.stats.steps)
        if marks["stop"]:
            return True
        out_of_time = 0 < args.max_seconds <= time.monotonic() - evaluate.start
        if trainer.stats.steps < marks["next"] and not out_of_time:
            return False
        marks["next"] = trainer.stats.steps + args.eval_every
        marks["stop"] = evaluate(trainer.stats.steps)
        return marks["stop"]

    result = fit(model, lambda worker_id: batches(None, None, worker_id), args.max_steps, callback=callback)
    trainer = result.pop("trainer")
    PHASES["sync_setup_s"] = result.pop("setup_s")
    counts = {k: result[k] for k in ("steps", "attempts", "taken", "dropped")}
    cfg = trainer.config
    print(
        json.dumps({"mode": cfg.mode, "replicas_to_aggregate": cfg.replicas_to_aggregate, **counts}),
        flush=True,
    )
    if trainer.stats.steps > evaluate.steps:  # score the last steps too
        evaluate(trainer.stats.steps)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    files = input_files(args.data)
    strategy = runtime.strategy()  # ps and worker tasks of ParameterServerStrategy serve here
    PHASES["strategy_s"] = round(time.monotonic() - STARTED, 3)  # TensorFlow's import, the cluster
    import model as recsys_model
    import tensorflow as tf

    here = Path(files[0]).parent
    held = heldout_files()
    manifest_file = args.manifest or held.get("manifest.json") or here / "manifest.json"
    manifest = json.loads(Path(manifest_file).read_text())
    compression = manifest.get("compression", "")
    eval_name = manifest["eval_file"]["file"]
    eval_file = args.eval or held.get(eval_name) or str(here / eval_name)
    target = args.target_auc if args.target_auc is not None else args.target * manifest["attainable_auc"]
    ctx = runtime.context()
    tf.keras.utils.set_random_seed(args.seed)

    with strategy.scope():
        model = recsys_model.build(
            manifest["vocab_sizes"], dim=args.dim, hidden=args.hidden, table_rows=args.table_rows
        )
        legacy = ctx.strategy == "parameter_server" and args.loop != "sync"
        recsys_model.compile_model(model, args.lr, legacy=legacy)
        saver, start = None, 0
        if args.save:
            if not legacy:  # its slots exist before a restore fills them
                model.optimizer.build(model.trainable_variables)
            step_var = tf.Variable(0, dtype=tf.int64, trainable=False)
            saver = (tf.train.Checkpoint(model=model, optimizer=model.optimizer, step=step_var), step_var)
    if saver is not None:
        latest = tf.train.latest_checkpoint(str(ctx.dirs.checkpoints))
        if latest:  # a restarted task resumes where the chief last checkpointed
            saver[0].read(latest).expect_partial()
            start = int(saver[1].numpy())
            print(f"{ctx.task}: resumed from {latest} at step {start}", flush=True)
    PHASES["model_s"] = round(time.monotonic() - STARTED, 3)
    if ctx.is_chief:
        shards = recsys_model.table_shards(model)
        rows = sum(s[0] for s in shards)
        print(f"chief: table {rows:,} x {args.dim + 1} in {len(shards)} shard(s) {shards}", flush=True)

    # one line: sharded by file (a list the job's data section already cut for this task is read whole)
    share = "TFDIST_DATA_TRAIN" in os.environ and runtime.input_is_share("train")
    files_in_shards = runtime.FileShards(files, compression=compression, share=share)

    def batches(_batch_size, input_context, worker_id=None):  # type: ignore[no-untyped-def]
        return (
            files_in_shards.dataset(input_context, worker_id=worker_id)
            .shuffle(4096, seed=args.seed)
            .repeat()
            .batch(args.batch, drop_remainder=True)
            .map(recsys_model.parse, num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(2)
        )

    # the held-out rows, in memory on the chief (on every MWMS worker: they all run this)
    eval_ds = tf.data.TFRecordDataset(eval_file, compression_type=compression).take(args.eval_rows)
    x_eval, y_eval = next(iter(eval_ds.batch(args.eval_rows).map(recsys_model.parse)))
    mwms = ctx.strategy == "multi_worker_mirrored"
    PHASES["eval_data_s"] = round(time.monotonic() - STARTED, 3)
    evaluate = Evaluator(args, model, strategy, x_eval, y_eval.numpy().ravel(), target, mwms, saver)
    {"fit": train_fit, "coordinator": train_coordinator, "sync": train_sync}[args.loop](
        args, model, batches, evaluate, start
    )
    evaluate.final_report()
    if args.save:
        saved = runtime.save_model(model)  # every MWMS worker takes part; only the chief keeps it
        if saved:
            print(f"{ctx.task}: saved the model to {saved}", flush=True)


if __name__ == "__main__":
    main()
