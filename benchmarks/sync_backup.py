"""Backup workers against all-reduce when one worker is slow: MWMS, PSS async, sync, backup.

Two workers train the digits MLP (64-32-10, sklearn's digits) four ways, side by side in
one run: MultiWorkerMirroredStrategy with a custom loop, and ParameterServerStrategy (one
ps, the chief coordinating) with ``SyncTrainer`` in ``async``, ``sync`` (K = N = 2) and
``backup`` (K = 1 of 2). Same model, data, per-worker batch (32) and learning-rate rule
(linear in the examples an update averages: ``LR_PER_32`` per 32), the same example budget.

One worker is slowed by a real CPU limit: its process is moved into a child cgroup with a
CFS bandwidth quota (``cpu.max`` on cgroup v2, ``cpu.cfs_quota_us`` on v1) of 1/f of the
CPU rate that same worker used in the un-slowed run of the same mode just before (so f is
relative to what it gets on this shared machine, not to a whole core), f = 1, 2, 4; it is
moved back and the cgroup removed after each run. Runs alternate modes within each seed.
Measured per run: wall time to the target test accuracy, accuracy after the budget, the
slowed worker's CPU rate. Median of 3 seeds. The last line of ``--json`` is one object.

    python benchmarks/sync_backup.py [--quick] [--json] [--plot PATH] [--rounds R]

Needs root (cgroups); the task processes run on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # tests.runtime.sync.cluster

MODES = ("mwms", "async", "sync", "backup")
FACTORS = (1, 2, 4)
SEEDS = (0, 1, 2)
WORKERS = 2
BATCH = 32  # per worker
LR_PER_32 = 0.25
SLOW = 1  # the worker that is slowed (task index)
MIN_PERIOD_US = 5_000  # short periods: the slowed worker runs in short bursts, often
MIN_QUOTA_US = 1_000  # the kernel's floor for a CFS quota


def _digits():  # type: ignore[no-untyped-def]
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    return train_test_split(x, y.astype(np.int32), test_size=0.25, random_state=0, stratify=y)


def _accuracy(weights: list[Any], x: Any, y: Any) -> float:
    import numpy as np

    w1, b1, w2, b2 = weights
    h = np.maximum(x @ w1 + b1, 0.0)
    return float(np.mean(np.argmax(h @ w2 + b2, 1) == y))


def _model(keras: Any, seed: int) -> Any:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)]
    )


def _commands() -> Any:
    """Commands from the launcher, one JSON object a line on stdin."""
    for line in sys.stdin:
        if line.strip():
            yield json.loads(line)


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write("RESULT " + json.dumps(obj) + "\n")
    sys.stdout.flush()


class _Curve:
    """Weight snapshots every ``every`` seconds (scored after the run, off the clock).
    ``read()`` gives the weights (default ``model.get_weights``)."""

    def __init__(self, model: Any, every: float, read: Any = None):
        self.read = read or model.get_weights
        self.every = every
        self.t0 = time.monotonic()
        self.last = self.t0
        self.snaps = [(0.0, 0, self.read())]

    def maybe(self, examples: int) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.snaps.append((now - self.t0, examples, self.read()))
            self.last = time.monotonic()

    def end(self, examples: int) -> float:
        elapsed = time.monotonic() - self.t0
        self.snaps.append((elapsed, examples, self.read()))
        return elapsed

    def scored(self, x: Any, y: Any) -> list[tuple[float, int, float]]:
        return [(t, n, _accuracy(w, x, y)) for t, n, w in self.snaps]


def _packed_reader(tf: Any, model: Any) -> Any:
    """The weights of a model whose variables are on one ps, in one round trip: a snapshot
    with ``get_weights`` fetches each variable from the ps on its own (four round trips
    here, where MWMS's snapshot reads local memory)."""
    shapes = [tuple(w.shape) for w in model.weights]

    @tf.function
    def packed() -> Any:
        with tf.device(model.weights[0].device):
            return tf.concat([tf.reshape(w, [-1]) for w in model.weights], 0)

    def read() -> list[Any]:
        import numpy as np

        flat = packed().numpy()
        sizes = [int(np.prod(s)) for s in shapes]
        return [p.reshape(s) for p, s in zip(np.split(flat, np.cumsum(sizes)[:-1]), shapes, strict=True)]

    return read


# -- the PSS chief (coordinator): async, sync, backup -------------------------------------


def pss_chief(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras as keras

    from tfdist.runtime.sync.trainer import SyncTrainer

    x_tr, x_te, y_tr, y_te = _digits()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    updates = {
        "async": {"mode": "async"},
        "sync": {"mode": "sync"},
        "backup": {"mode": "backup", "replicas_to_aggregate": 1},
    }
    per_update = {"async": 1, "sync": WORKERS, "backup": 1}  # gradients an update averages
    models, trainers, iterators = {}, {}, {}
    for mode, update in updates.items():
        with strategy.scope():
            models[mode] = _model(keras, 0)
            opt = keras.optimizers.SGD(LR_PER_32 * per_update[mode])

        def loss_fn(m: Any, batch: Any) -> Any:
            xb, yb = batch
            return tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(yb, m(xb, training=True), True)
            )

        trainers[mode] = SyncTrainer(
            strategy,
            models[mode],
            opt,
            loss_fn,
            update,
            coordinator=coordinator,
            steps_per_call=args.steps_per_call,
        )

    def dataset_fn(wid: Any) -> Any:
        ds = tf.data.Dataset.from_tensor_slices((x_tr, y_tr)).repeat()
        ds = ds.skip(tf.cast(wid, tf.int64) * 211).shuffle(2048)  # each worker its own order
        return ds.batch(BATCH, drop_remainder=True)

    readers = {mode: _packed_reader(tf, model) for mode, model in models.items()}
    for mode, trainer in trainers.items():
        iterators[mode] = trainer.per_worker_iterator(dataset_fn)
        readers[mode]()  # traced
    for mode, trainer in trainers.items():  # warm up: trace every function
        trainer.run(iterators[mode], 2 * args.steps_per_call)
    _reply({"ready": True})
    for cmd in _commands():
        mode, seed = cmd["mode"], cmd["seed"]
        model, trainer = models[mode], trainers[mode]
        local = _model(keras, seed)
        model.set_weights(local.get_weights())
        trainer.reset()  # the data stream goes on where it was: seeds change the initial weights
        updates_budget = args.examples // (BATCH * per_update[mode])
        curve = _Curve(model, args.snapshot_every, readers[mode])
        per = BATCH * per_update[mode]

        def callback(tr: Any, _st: Any, curve: _Curve = curve, per: int = per) -> bool:
            curve.maybe(tr.stats.steps * per)
            return False

        stats = trainer.run(iterators[mode], updates_budget, callback, join=False)
        elapsed = curve.end(stats.steps * per)
        stats = trainer.finish()
        _reply(
            {
                "mode": mode,
                "seed": seed,
                "seconds": elapsed,
                "updates": stats.steps,
                "dropped": stats.dropped,
                "attempts": stats.attempts,
                "curve": curve.scored(x_te, y_te),
            }
        )
    os._exit(0)


# -- an MWMS worker (custom loop) ---------------------------------------------------------


def mwms_worker(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras as keras

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    x_tr, x_te, y_tr, y_te = _digits()
    global_batch = BATCH * WORKERS
    with strategy.scope():
        model = _model(keras, 0)
        opt = keras.optimizers.SGD(LR_PER_32 * WORKERS)
    loss_obj = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=keras.losses.Reduction.NONE
    )
    per_call = args.steps_per_call

    def make_iterator(seed: int) -> Any:
        def dataset_fn(ctx: Any) -> Any:
            ds = tf.data.Dataset.from_tensor_slices((x_tr, y_tr)).repeat()
            ds = ds.shuffle(2048, seed=seed * 10 + ctx.input_pipeline_id)
            return ds.batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)

        options = tf.distribute.InputOptions(experimental_fetch_to_device=False)
        return iter(strategy.distribute_datasets_from_function(dataset_fn, options))

    def replica_step(batch: Any) -> Any:
        xb, yb = batch
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(
                loss_obj(yb, model(xb, training=True)), global_batch_size=global_batch
            )
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train(it: Any, n: Any) -> Any:
        for _ in tf.range(n):
            strategy.run(replica_step, args=(next(it),))
        return tf.constant(0)

    train(make_iterator(99), tf.constant(per_call))  # warm up (traces)
    if task == 0:
        _reply({"ready": True})
    for cmd in _commands():
        seed = cmd["seed"]
        model.set_weights(_model(keras, seed).get_weights())
        it = make_iterator(seed)
        budget = args.examples // global_batch
        curve = _Curve(model, args.snapshot_every)
        done = 0
        while done < budget:
            n = min(per_call, budget - done)
            train(it, tf.constant(n)).numpy()
            done += n
            curve.maybe(done * global_batch)
        elapsed = curve.end(done * global_batch)
        if task == 0:
            _reply(
                {
                    "mode": "mwms",
                    "seed": seed,
                    "seconds": elapsed,
                    "updates": done,
                    "dropped": 0,
                    "attempts": done * WORKERS,
                    "curve": curve.scored(x_te, y_te),
                }
            )
    os._exit(0)


# -- the launcher: processes, cgroups, alternation ----------------------------------------


class Throttle:
    """A CFS bandwidth quota on one process, in a child cgroup made for it and removed after."""

    def __init__(self) -> None:
        unified = Path("/sys/fs/cgroup")
        if (unified / "cgroup.controllers").exists() and "cpu" in (
            unified / "cgroup.controllers"
        ).read_text():
            self.version, self.base = 2, unified
        elif Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists():
            self.version, self.base = 1, Path("/sys/fs/cgroup/cpu")
        else:
            raise SystemExit("no cgroup CPU controller (cgroup v2 cpu.max or v1 cpu.cfs_quota_us) found")
        self.dir: Path | None = None
        self.pid = 0

    def _origin(self, pid: int) -> Path:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if (self.version == 2 and controllers == "") or (
                self.version == 1 and "cpu" in controllers.split(",")
            ):
                where = self.base / path.lstrip("/")
                if where.name.startswith("tfdist-bench-"):
                    raise SystemExit(f"process {pid} is still in {where}: an earlier release failed")
                return where
        return self.base

    def limit(self, pid: int, cores: float) -> None:
        self.origin = self._origin(pid)
        self.dir = self.origin / f"tfdist-bench-{pid}"
        self.dir.mkdir(exist_ok=True)
        # the shortest period whose quota is above the kernel's floor
        period = max(MIN_PERIOD_US, int(MIN_QUOTA_US / max(cores, 1e-3)) + 1)
        quota = max(MIN_QUOTA_US, int(cores * period))
        if self.version == 2:
            (self.dir / "cpu.max").write_text(f"{quota} {period}")
        else:
            (self.dir / "cpu.cfs_period_us").write_text(str(period))
            (self.dir / "cpu.cfs_quota_us").write_text(str(quota))
        (self.dir / "cgroup.procs").write_text(str(pid))
        self.pid = pid

    def release(self) -> None:
        """Move every thread back (a thread TF starts while the process moves can stay
        behind, so this repeats until the cgroup is empty), then remove the cgroup."""
        if self.dir is None:
            return
        members = "cgroup.procs" if self.version == 2 else "tasks"  # v2 moves whole processes
        for _ in range(100):
            left = (self.dir / members).read_text().split()
            if not left:
                break
            for tid in left:
                with contextlib.suppress(OSError):  # ended meanwhile
                    (self.origin / members).write_text(tid)
            time.sleep(0.02)
        self.dir.rmdir()  # fails loudly if a thread is still inside
        self.dir = None


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wakeups(pid: int) -> int:
    """Voluntary context switches summed over the process's threads: how often one of
    them went to sleep waiting (for a message, a lock, a queue) and was woken again."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread ended meanwhile
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


def _run_delay(pid: int) -> float:
    """Seconds the process's threads spent runnable but waiting for a core (the second
    field of each thread's ``/proc/.../schedstat``): on a loaded machine, what each wake-up
    costs before the woken thread runs."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def _segments(names: dict[int, str]) -> dict[str, int]:
    """TCP data segments sent so far on each established loopback connection between two
    of these processes (``ss -tinp``), summed per direction as ``"sender->receiver"``: a
    gRPC message is one or a few segments, so this counts messages, roughly."""
    try:
        out = subprocess.run(
            ["ss", "-tinpH", "state", "established"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    socks: dict[tuple[int, int], tuple[int | None, int]] = {}
    head: tuple[int, int, int | None] | None = None
    for line in out.splitlines():
        if not line[:1].isspace():  # "Recv-Q Send-Q local:port peer:port users:((...pid=N...))"
            parts = line.split()
            head = None
            if len(parts) >= 4 and ":" in parts[2] and ":" in parts[3]:
                pid = next((int(x[4:]) for x in line.replace(",", " ").split() if x.startswith("pid=")), None)
                head = (int(parts[2].rsplit(":", 1)[1]), int(parts[3].rsplit(":", 1)[1]), pid)
        elif head is not None:
            segs = next((int(x.split(":")[1]) for x in line.split() if x.startswith("data_segs_out:")), 0)
            socks[(head[0], head[1])] = (head[2], segs)
            head = None
    pairs: dict[str, int] = {}
    for (local, peer), (pid, segs) in socks.items():
        other = socks.get((peer, local), (None, 0))[0]
        if pid in names and other in names:
            key = f"{names[pid]}->{names[other]}"
            pairs[key] = pairs.get(key, 0) + segs
    return pairs


class Counters:
    """CPU seconds, wake-ups and messages of a set of processes, between two samples."""

    def __init__(self, procs: dict[str, int]):
        self.procs = procs
        self.names = {pid: name for name, pid in procs.items()}
        self.start = self._sample()

    def _sample(self) -> tuple[dict[str, tuple[float, int, float]], dict[str, int]]:
        own = {n: (_cpu_seconds(p), _wakeups(p), _run_delay(p)) for n, p in self.procs.items()}
        return own, _segments(self.names)

    def per_update(self, updates: int) -> dict[str, Any]:
        """Per applied update: each process's CPU ms, wake-ups and ms waiting for a core,
        and messages per direction."""
        (own0, seg0), (own1, seg1) = self.start, self._sample()
        n = max(updates, 1)
        return {
            "cpu_ms": {k: round(1000 * (own1[k][0] - own0[k][0]) / n, 3) for k in own0},
            "wakeups": {k: round((own1[k][1] - own0[k][1]) / n, 2) for k in own0},
            "run_delay_ms": {k: round(1000 * (own1[k][2] - own0[k][2]) / n, 3) for k in own0},
            "segments": {k: round((seg1[k] - seg0.get(k, 0)) / n, 2) for k in seg1},
        }


def _reserve() -> tuple[socket.socket, str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    return sock, f"127.0.0.1:{sock.getsockname()[1]}"


class Proc:
    """A task process that takes commands on stdin and answers RESULT lines on stdout."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, answers: bool):
        self.log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.p = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
        )
        self.answers = answers

    def send(self, cmd: dict[str, Any]) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            if line.startswith("RESULT "):
                return json.loads(line[7:])
        raise SystemExit(f"a task process ended (exit {self.p.wait()}); see {self.log.name}")

    def stop(self) -> None:
        if self.p.poll() is None:
            os.killpg(self.p.pid, 9)
        self.p.wait()
        self.log.close()


def launch(args: argparse.Namespace) -> dict[str, Any]:
    from tests.runtime.sync.cluster import LocalCluster

    logs = Path(tempfile.mkdtemp(prefix="tfdist-bench-sync-"))
    me = [
        sys.executable,
        __file__,
        "--examples",
        str(args.examples),
        "--steps-per-call",
        str(args.steps_per_call),
        "--snapshot-every",
        str(args.snapshot_every),
    ]
    pythonpath = {"PYTHONPATH": str(ROOT / "src")}
    cluster = LocalCluster(workers=WORKERS, ps=1, log_dir=str(logs)).start()
    socks = [_reserve() for _ in range(WORKERS)]
    mwms: list[Proc] = []
    throttle = Throttle()
    chief: Proc | None = None
    try:
        chief = Proc(
            [*me, "--role", "pss-chief"], cluster.env("chief", 0, pythonpath), logs / "chief.log", True
        )
        for i in range(WORKERS):
            tf_config = json.dumps(
                {"cluster": {"worker": [a for _, a in socks]}, "task": {"type": "worker", "index": i}}
            )
            env = dict(
                os.environ,
                TF_CONFIG=tf_config,
                TF_GRPC_REUSE_PORT="1",
                TF_USE_LEGACY_KERAS="1",
                TF_CPP_MIN_LOG_LEVEL="2",
                **pythonpath,
            )
            mwms.append(Proc([*me, "--role", "mwms-worker"], env, logs / f"mwms-{i}.log", i == 0))
        chief.answer(), mwms[0].answer()  # both ready (traced, warmed up)
        slow_pid = {"mwms": mwms[SLOW].p.pid}
        for mode in ("async", "sync", "backup"):
            slow_pid[mode] = cluster.procs[f"worker-{SLOW}"].pid
        fast_pid = {"mwms": mwms[1 - SLOW].p.pid}
        for mode in ("async", "sync", "backup"):
            fast_pid[mode] = cluster.procs[f"worker-{1 - SLOW}"].pid
        mwms_procs = {f"worker-{i}": p.p.pid for i, p in enumerate(mwms)}
        pss_procs = {"chief": chief.p.pid, **{n: p.pid for n, p in cluster.procs.items()}}
        runs: list[dict[str, Any]] = []
        loads: list[float] = []
        base_rate: dict[str, float] = {}
        for rnd in range(args.rounds):
            for seed in SEEDS[: args.seeds]:
                for factor in args.factors:
                    order = MODES[rnd % 4 :] + MODES[: rnd % 4]  # rotate who goes first
                    for mode in [m for m in order if m in args.modes]:
                        loads.append(os.getloadavg()[0])
                        counters = Counters(mwms_procs if mode == "mwms" else pss_procs)
                        if factor > 1:
                            throttle.limit(slow_pid[mode], base_rate[mode] / factor)
                        cpu0 = (_cpu_seconds(slow_pid[mode]), _cpu_seconds(fast_pid[mode]))
                        t0 = time.monotonic()
                        try:
                            if mode == "mwms":
                                for p in mwms:
                                    p.send({"seed": seed})
                                r = mwms[0].answer()
                            else:
                                chief.send({"mode": mode, "seed": seed})
                                r = chief.answer()
                        finally:
                            throttle.release()
                        wall = time.monotonic() - t0
                        rates = [
                            (_cpu_seconds(slow_pid[mode]) - cpu0[0]) / wall,
                            (_cpu_seconds(fast_pid[mode]) - cpu0[1]) / wall,
                        ]
                        if factor == 1:
                            base_rate[mode] = rates[0]
                        reach = next((t for t, _, a in r["curve"] if a >= args.target), None)
                        r["per_update"] = counters.per_update(r["updates"])
                        r.update(
                            factor=factor,
                            round=rnd,
                            slow_cpu=rates[0],
                            fast_cpu=rates[1],
                            time_to_target=reach,
                            final_accuracy=r["curve"][-1][2],
                            load=loads[-1],
                        )
                        runs.append(r)
                        print(
                            f"round {rnd} seed {seed} {factor}x {mode:6s}: {r['seconds']:.2f}s "
                            f"to-target {reach if reach is None else round(reach, 2)} "
                            f"acc {r['final_accuracy']:.3f} slow-worker cpu {rates[0]:.2f} "
                            f"(1x {base_rate[mode]:.2f}) fast {rates[1]:.2f} dropped {r['dropped']}",
                            file=sys.stderr,
                            flush=True,
                        )
        shutil.rmtree(logs, ignore_errors=True)  # kept only when something failed
        return {
            "runs": runs,
            "load": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
            "cgroup": f"v{throttle.version}",
        }
    finally:
        throttle.release()
        for p in mwms:
            p.stop()
        if chief is not None:
            chief.stop()
        cluster.stop()
        for s, _ in socks:
            s.close()


def _median(xs: list[float | None]) -> float | None:
    """Median where a run that never reached the target counts as infinitely slow."""
    vals = [x if x is not None else float("inf") for x in xs]
    m = statistics.median(vals) if vals else float("inf")
    return None if m == float("inf") else m


def _median_counters(rows: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per counter and process (or direction), the median over runs."""
    out: dict[str, dict[str, float]] = {}
    for kind in ("cpu_ms", "wakeups", "run_delay_ms", "segments"):
        keys = sorted({k for r in rows for k in r.get(kind, {})})
        out[kind] = {k: statistics.median(r.get(kind, {}).get(k, 0.0) for r in rows) for k in keys}
    return out


def summarize(raw: dict[str, Any], target: float) -> dict[str, Any]:
    runs = raw["runs"]
    factors = sorted({r["factor"] for r in runs})
    table: dict[str, dict[str, Any]] = {}
    for factor in factors:
        for mode in MODES:
            sel = [r for r in runs if r["factor"] == factor and r["mode"] == mode]
            if sel:
                table.setdefault(f"{factor}x", {})[mode] = {
                    "time_to_target_s": _median([r["time_to_target"] for r in sel]),
                    "reached": f"{sum(r['time_to_target'] is not None for r in sel)}/{len(sel)}",
                    "final_accuracy": statistics.median(r["final_accuracy"] for r in sel),
                    "wall_s": statistics.median(r["seconds"] for r in sel),
                    "ms_per_update": statistics.median(
                        1000 * r["seconds"] / max(r["updates"], 1) for r in sel
                    ),
                    "slow_worker_cpu": statistics.median(r["slow_cpu"] for r in sel),
                    "dropped": statistics.median(r["dropped"] for r in sel),
                    "per_update": _median_counters([r["per_update"] for r in sel]),
                }

    # ratios per alternation (same round, seed and factor: minutes apart at most)
    def ratios(mode: str, factor: int) -> list[float]:
        out = []
        for r in runs:
            if r["mode"] != mode or r["factor"] != factor:
                continue
            m = next(
                x
                for x in runs
                if x["mode"] == "mwms"
                and x["factor"] == factor
                and x["seed"] == r["seed"]
                and x["round"] == r["round"]
            )
            if r["time_to_target"] is not None and m["time_to_target"]:
                out.append(r["time_to_target"] / m["time_to_target"])
            else:
                out.append(float("inf"))
        return out

    modes = sorted({r["mode"] for r in runs} - {"mwms"}, key=MODES.index)
    ratio = {f"{mode}/mwms {f}x": _median(ratios(mode, f)) for mode in modes for f in factors}
    backup4, sync1 = ratio.get("backup/mwms 4x"), ratio.get("sync/mwms 1x")
    return {
        "target_accuracy": target,
        "table": table,
        "time_to_target_ratio_vs_mwms": ratio,
        "goal_backup_4x_le_0_7_mwms": None if 4 not in factors else backup4 is not None and backup4 <= 0.7,
        "goal_sync_1x_le_1_25_mwms": sync1 is not None and sync1 <= 1.25,
        "load": raw["load"],
        "cgroup": raw["cgroup"],
    }


def plot(raw: dict[str, Any], path: str, target: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    factors = sorted({r["factor"] for r in raw["runs"]})
    fig, axes = plt.subplots(1, len(factors), figsize=(5 * len(factors), 4), sharey=True, squeeze=False)
    axes = axes[0]
    colors = {"mwms": "tab:purple", "async": "tab:red", "sync": "tab:blue", "backup": "tab:green"}
    for ax, factor in zip(axes, factors, strict=True):
        seen: set[str] = set()
        for r in raw["runs"]:
            if r["factor"] != factor:
                continue
            label = None if r["mode"] in seen else r["mode"]
            seen.add(r["mode"])
            ax.plot(
                [p[0] for p in r["curve"]],
                [p[2] for p in r["curve"]],
                color=colors[r["mode"]],
                alpha=0.6,
                label=label,
            )
        ax.axhline(target, color="grey", lw=0.8, ls="--")
        ax.set_title(f"worker 1 slowed {factor}x (CPU quota)")
        ax.set_xlabel("wall time (s)")
        ax.set_ylim(0.5, 1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    axes[0].legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, a smaller budget")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON last")
    parser.add_argument("--plot", default=str(ROOT / "docs" / "sync_backup.png"))
    parser.add_argument("--raw", default=None, help="also write every run's curve here (JSON)")
    parser.add_argument("--examples", type=int, default=None, help="training examples per run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1, help="repeat the whole alternation")
    parser.add_argument("--target", type=float, default=0.93)
    parser.add_argument("--steps-per-call", type=int, default=10)
    parser.add_argument(
        "--factors",
        default=",".join(map(str, FACTORS)),
        help="slow-downs of worker 1 to run (1 first: it sets the quotas)",
    )
    parser.add_argument(
        "--modes", default=",".join(MODES), help="which of mwms,async,sync,backup (mwms needed)"
    )
    parser.add_argument("--snapshot-every", type=float, default=0.05)
    parser.add_argument("--role", choices=("pss-chief", "mwms-worker"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.examples is None:
        args.examples = 4800 if args.quick else 9600
    if args.quick:
        args.seeds = 1
    try:
        args.factors = [int(f) for f in str(args.factors).split(",")]
        args.modes = [m.strip() for m in str(args.modes).split(",")]
    except ValueError:
        raise SystemExit("tfdist: error: --factors: give whole numbers like 1,2,4") from None
    if args.role is None and (args.factors[0] != 1 or any(f < 1 for f in args.factors)):
        raise SystemExit(
            "tfdist: error: --factors must start with 1 (its run sets the slowed worker's quota)"
        )
    if args.role is None and ("mwms" not in args.modes or not set(args.modes) <= set(MODES)):
        raise SystemExit(f"tfdist: error: --modes: choose from {','.join(MODES)}, mwms included")
    if args.role == "pss-chief":
        pss_chief(args)
        return
    if args.role == "mwms-worker":
        mwms_worker(args)
        return
    if os.geteuid() != 0:
        raise SystemExit(
            "tfdist: error: the benchmark needs root for cgroups (the CPU quota on the slowed worker)"
        )
    t0 = time.monotonic()
    raw = launch(args)
    summary = summarize(raw, args.target)
    summary.update(
        total_seconds=time.monotonic() - t0, examples=args.examples, seeds=args.seeds, rounds=args.rounds
    )
    if args.raw:
        Path(args.raw).write_text(json.dumps(raw))
    try:
        plot(raw, args.plot, args.target)
        where = Path(args.plot).resolve()
        summary["plot"] = str(where.relative_to(ROOT)) if where.is_relative_to(ROOT) else args.plot
    except ImportError:
        summary["plot"] = None
    print(
        json.dumps(summary, allow_nan=False) if args.json else json.dumps(summary, indent=2, allow_nan=False)
    )


if __name__ == "__main__":
    main()
