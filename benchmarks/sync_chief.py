"""What the chief (the coordinator) spends per ``sync`` update, and whether it is per step.

``SyncTrainer``'s aggregator applies ``steps_per_call`` updates per call from the chief, so
the chief's share should shrink as that grows if all it does is call. This runs the same
``sync`` (K = N = 2) trainer on a loopback cluster (1 ps, 2 workers, the digits-sized MLP
64-32-10 on fixed batches, no weight snapshots, no callback) twice per round, with
``steps_per_call`` 10 and 100 alternating, and reports per applied update: wall time, the
chief's CPU time and its threads' wake-ups (voluntary context switches, by thread name),
and each task process's CPU time. If the chief's CPU per update is about the same at 10
and 100 steps per call, something on the chief takes part in every step.

    python benchmarks/sync_chief.py [--updates N] [--rounds R] [--json]

The task processes run on 127.0.0.1; no root needed.
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # tests.runtime.sync.cluster

from sync_backup import _cpu_seconds  # noqa: E402 - beside this file; imports no TensorFlow

STEPS_PER_CALL = (10, 100)


def _thread_wakeups() -> dict[str, int]:
    """Voluntary context switches of this process's threads, summed by thread name."""
    out: dict[str, int] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            status = Path(f"/proc/self/task/{tid}/status").read_text()
        except OSError:  # the thread ended
            continue
        n = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
        out[name] = out.get(name, 0) + n
    return out


def chief(updates: int, steps_per_call: int) -> None:
    """The coordinator: one trainer, warmed up, then ``updates`` measured updates."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras as keras

    from tfdist.runtime.sync.trainer import SyncTrainer

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)]
        )
        optimizer = keras.optimizers.SGD(0.1)

    def loss_fn(m: Any, batch: Any) -> Any:
        x, y = batch
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, m(x, training=True), True))

    def dataset_fn(_wid: Any) -> Any:
        x = tf.random.stateless_uniform((32, 64), [1, 2])
        y = tf.random.stateless_uniform((32,), [3, 4], 0, 10, tf.int32)
        return tf.data.Dataset.from_tensors((x, y)).repeat()

    trainer = SyncTrainer(
        strategy, model, optimizer, loss_fn, {"mode": "sync"}, steps_per_call=steps_per_call
    )
    iterator = trainer.per_worker_iterator(dataset_fn)
    trainer.run(iterator, 2 * steps_per_call, join=False)  # traced, loops running
    print("READY", flush=True)  # the parent samples the tasks' CPU from here
    before, cpu0, t0 = _thread_wakeups(), time.process_time(), time.monotonic()
    trainer.run(iterator, updates, join=False)
    wall, cpu, after = time.monotonic() - t0, time.process_time() - cpu0, _thread_wakeups()
    trainer.finish()
    wakeups = {k: round((after[k] - before.get(k, 0)) / updates, 1) for k in after}
    print(
        "RESULT "
        + json.dumps(
            {
                "ms_per_update": 1000 * wall / updates,
                "chief_cpu_ms": 1000 * cpu / updates,
                "chief_wakeups": {k: v for k, v in wakeups.items() if v >= 0.1},
            }
        ),
        flush=True,
    )
    os._exit(0)  # the coordinator's threads would hold the exit


def run_chief(argv: list[str], updates: int) -> tuple[dict[str, Any], dict[str, float]]:
    """Run the chief ``argv`` (which prints READY, then one ``RESULT {json}`` line) against
    a fresh loopback cluster (1 ps, 2 workers): its result, and each task's CPU ms per
    update from READY to RESULT."""
    from tests.runtime.sync.cluster import LocalCluster

    with LocalCluster(workers=2, ps=1) as cluster:
        env = cluster.env("chief", 0, {"PYTHONPATH": str(ROOT / "src")})
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        lines = iter(proc.stdout.readline, "")
        if next((x for x in lines if x.startswith("READY")), None) is None:
            raise RuntimeError(f"the chief ended before it was ready (exit {proc.wait()})")
        cpu0 = {n: _cpu_seconds(p.pid) for n, p in cluster.procs.items()}
        line = next((x for x in lines if x.startswith("RESULT ")), "")
        tasks = {
            n: round(1000 * (_cpu_seconds(p.pid) - cpu0[n]) / updates, 2) for n, p in cluster.procs.items()
        }
        if proc.wait(timeout=60) != 0 or not line:
            raise RuntimeError(f"the chief failed (exit {proc.returncode})")
    return json.loads(line[7:]), tasks


def one_run(updates: int, steps_per_call: int) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--role-chief", str(steps_per_call), "--updates", str(updates)]
    result, tasks = run_chief(argv, updates)
    return {"steps_per_call": steps_per_call, **result, "task_cpu_ms": tasks, "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--role-chief", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role_chief is not None:
        chief(args.updates, args.role_chief)
        return
    runs = []
    for rnd in range(args.rounds):
        order = STEPS_PER_CALL if rnd % 2 == 0 else STEPS_PER_CALL[::-1]
        for spc in order:
            r = one_run(args.updates, spc)
            runs.append(r)
            print(
                f"round {rnd} steps_per_call {spc:3d}: {r['ms_per_update']:.2f} ms/update, "
                f"chief CPU {r['chief_cpu_ms']:.2f} ms, tasks {r['task_cpu_ms']}",
                file=sys.stderr,
                flush=True,
            )
    summary = {
        str(spc): {
            key: round(statistics.median(r[key] for r in runs if r["steps_per_call"] == spc), 3)
            for key in ("ms_per_update", "chief_cpu_ms")
        }
        for spc in STEPS_PER_CALL
    }
    out = {"median": summary, "runs": runs, "updates": args.updates}
    print(json.dumps(out, indent=None if args.json else 1))


if __name__ == "__main__":
    main()
